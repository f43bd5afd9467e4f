"""The command line's text fits a terminal: every line of ``npumagic analyze`` and ``npumagic
advise`` on every shared input within 160 columns (sentences wrap to the terminal's width,
``COLUMNS`` or 100), and kernel names shortened so that different kernels never read alike."""

from __future__ import annotations

import re
import warnings

import pandas as pd
import pytest

from npumagic.cli import main
from npumagic.render.tables import Column, Table, shorten_apart
from npumagic.terminal import wrap

from .analysis.test_verdict import SHARED_INPUTS
from .conftest import need


@pytest.mark.parametrize("command", ["analyze", "advise"])
@pytest.mark.parametrize("path", SHARED_INPUTS, ids=lambda p: "/".join(p.parts[-2:]))
def test_every_line_fits_160_columns(path, command, capsys, monkeypatch):
    # GIVEN no COLUMNS: the width npumagic assumes when stdout is not a terminal
    monkeypatch.setenv("COLUMNS", "100")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # WHEN the command prints its text
        assert main([command, str(need(path))]) == 0
    lines = capsys.readouterr().out.splitlines()
    # THEN no line runs past 160 columns
    assert max(len(line) for line in lines) <= 160, max(lines, key=len)


VECTORIZED = ("void at::native::vectorized_elementwise_kernel<4, at::native::{}<float>, at::detail::Array<char*, 3> >"
              "(int, at::native::{}<float>, at::detail::Array<char*, 3>)")


def test_kernels_that_differ_in_the_middle_never_shorten_alike():
    # GIVEN two kernels alike at both ends, as PyTorch's elementwise kernels are
    names = [VECTORIZED.format(f, f) for f in ("CUDAFunctor_add", "CUDAFunctor_mul")]
    # WHEN they are shortened to a table column
    shown = shorten_apart(names, 34)
    # THEN they keep their start and end, and the part that tells them apart
    assert len(set(shown)) == 2 and all(len(s) <= 34 for s in shown)
    assert "add" in shown[0] and "mul" in shown[1]
    assert all(s.startswith("void at:") and s.endswith(", 3>)") for s in shown)


def test_a_kernel_table_tells_its_kernels_apart():
    names = [VECTORIZED.format(f, f) for f in ("CUDAFunctor_add", "CUDAFunctor_mul", "CUDAFunctor_div")]
    table = Table(pd.DataFrame({"name": names, "count": [1, 2, 3]}),
                  [Column("name", "kernel", "name"), Column("count", "count", "int")])
    rows = table.to_text(40).splitlines()[1:]
    assert len({row.rsplit(None, 1)[0] for row in rows}) == 3  # the kernel cells differ
    assert max(len(row) for row in rows) <= 40


def test_a_long_sentence_wraps_under_its_hanging_indent():
    line = "3. Next change  " + " ".join(["word"] * 60)
    wrapped = wrap(line, 50, 16).splitlines()
    assert len(wrapped) > 1 and max(len(x) for x in wrapped) <= 50
    assert all(x.startswith(" " * 16) and x[16] != " " for x in wrapped[1:])


class _Terminal:
    """Standard output as a terminal IPython or a script in a terminal has it."""

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return len(text)


def test_shown_text_wraps_to_a_terminal_and_keeps_whole_lines_elsewhere(monkeypatch):
    import npumagic

    from .conftest import ASCEND

    summary = npumagic.analyze(need(ASCEND / "level1"))
    advice = npumagic.advise(summary)
    monkeypatch.setenv("COLUMNS", "72")
    # WHEN printed where output goes to a file or a notebook: whole sentences, as before
    piped = str(advice)
    assert max(len(line) for line in piped.splitlines()) > 72
    # WHEN printed to a terminal (print(advice), a terminal IPython's display): wrapped to it
    monkeypatch.setattr("sys.stdout", _Terminal())
    for shown in (str(advice), str(npumagic.checklist(summary)), str(summary).splitlines()[0]):
        long = [line for line in shown.splitlines() if len(line) > 72]
        assert all(" " not in line.strip() for line in long), long  # only a word too long to break
    # the same words (a module path too long for a line breaks after a slash)
    assert " ".join(re.sub(r"(?<=\S)/\n +", "/", str(advice)).split()) == " ".join(piped.split())


def test_a_module_path_too_long_for_the_line_breaks_after_a_slash_and_loses_nothing():
    from npumagic.render.text import _wrap_path

    line = "    in: DistributedDataParallel_0/AlexNet_0/Sequential_0/Conv2d_3, backward (65% of its time)"
    wrapped = _wrap_path(line, 40, 8)
    assert max(map(len, wrapped.splitlines())) <= 40
    assert re.sub(r"/\n +", "/", wrapped).replace("\n        ", " ") == line


def test_tables_give_up_optional_figures_before_names_lose_what_tells_them_apart():
    from npumagic.analysis.compare import compare
    from npumagic.render.tables import MIN_NAME_CHARS, format_kernel_diff, format_ranks

    from .conftest import ASCEND, CUDA, shared_summary

    ranks = format_ranks(shared_summary(ASCEND / "level1").ranks)
    assert " steps " in ranks.to_text(160)  # room for everything
    narrow = ranks.to_text(80).splitlines()
    assert max(map(len, narrow)) <= 80 and " steps " not in narrow[-3]  # the rank count gave way
    cuda = shared_summary(CUDA / "tracelens" / "h100_qwen")
    diff = format_kernel_diff(compare(cuda, cuda, "before", "after"), top=5)
    lines = diff.to_text(80).splitlines()
    assert max(map(len, lines)) <= 80 and "before count" not in lines[1]
    assert len(lines[2].split("  ")[0].rstrip()) >= MIN_NAME_CHARS  # the kernel keeps its room
    assert "before count" in diff.to_text(200)
