"""The comparison of two runs' memory by operator, on real CPU runs (each in its own process: the
CPU allocator's totals count from the process's first profiled allocation): a model of two Linear
layers at batch 256 and 1024 allocates 3 MiB more a step in each Linear's forward (aten::addmm)
and backward (aten::mm), said in ``compare``'s JSON ``memory.operators``, its text, a real
shell's ``%npucompare`` (text and HTML) and ``memcompare``; a second run at 256 lists none."""

from __future__ import annotations

import html
import json

import pandas as pd
import pytest

from npumagic.cli import main

from .memory_runs import record_batches

HIDDEN, FEATURES = 1024, 256
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    model = f"torch.nn.Sequential(torch.nn.Linear({FEATURES}, {HIDDEN}), torch.nn.ReLU(), torch.nn.Linear({HIDDEN}, 1))"
    return record_batches(tmp_path_factory.mktemp("operator_batches"), model, FEATURES,
                          {"b256": 256, "b1024": 1024, "b256_again": 256})


def _linear_bytes(batch: int) -> dict[str, int]:
    """What the two Linear layers allocate a step, float32: forward, each layer's output; backward,
    the input gradient of the second, the weight gradients of both."""
    return {"aten::addmm": 4 * (batch * HIDDEN + batch * 1),
            "aten::mm": 4 * (batch * HIDDEN + HIDDEN * 1 + HIDDEN * FEATURES)}


def _allocated_per_step(path) -> pd.Series:
    """Bytes the CPU allocated within each ProfilerStep (the [memory] events read with json)."""
    events = json.loads(path.read_text())["traceEvents"]
    steps = [(int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")]
    memory = [(e["ts"], e["args"]["Bytes"]) for e in events if e.get("name") == "[memory]" and e["args"]["Bytes"] > 0]
    return pd.Series({n: sum(b for ts, b in memory if start <= ts < end) for n, start, end in steps}).sort_index()


def test_the_linear_layers_allocate_more_at_the_larger_batch(runs, capsys):
    assert main(["compare", str(runs["b256"]), str(runs["b1024"]), "--json"]) == 0
    memory = json.loads(capsys.readouterr().out)["memory"]
    rows = {r["name"]: r for r in memory["operators"]}
    small, large = _linear_bytes(256), _linear_bytes(1024)
    for name in ("aten::addmm", "aten::mm"):
        row = rows[name]
        assert (row["bytes_a"], row["bytes_b"]) == (small[name], large[name]) and row["change"] == "more"
        # every step allocates the same: the interval is the change itself, beyond the 2 MiB floor
        assert row["interval_low_bytes"] == row["interval_high_bytes"] == row["delta_bytes"] == 3 * 2**20 + \
            (4 * 768 if name == "aten::addmm" else 0) >= row["floor_bytes"] == 2 * 2**20
    assert all(r["change"] == "more" for r in memory["operators"])  # nothing allocates less at a larger batch
    # memcompare judges them alike, its table above the raw list
    assert main(["memcompare", str(runs["b256"]), str(runs["b1024"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["changed_operators"] == memory["operators"]
    assert main(["memcompare", str(runs["b256"]), str(runs["b1024"])]) == 0
    said = capsys.readouterr().out
    assert said.index("operators allocating more or less memory") < said.index("operators whose allocations changed most")


def test_the_operator_bytes_are_what_the_steps_allocated(runs):
    from npumagic.analysis.memory_view import memory_view
    from npumagic.analysis.sources.memory import read_memory

    for path in (runs["b256"], runs["b1024"]):
        by_step = memory_view(read_memory(path)).step_operators.groupby("step")["bytes"].sum()
        pd.testing.assert_series_equal(by_step, _allocated_per_step(path).astype(float), check_names=False,
                                       check_index_type=False)


def test_the_same_batch_again_lists_no_operator(runs, capsys):
    assert main(["compare", str(runs["b256"]), str(runs["b256_again"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory"]["operators"] == []
    assert main(["compare", str(runs["b256"]), str(runs["b256_again"])]) == 0
    assert "operators allocating more or less memory" not in capsys.readouterr().out


def test_npucompare_lists_them_in_text_and_html(runs, shell):
    for name in ("b256", "b1024"):
        assert shell.run_cell(f"%npuload {runs[name]} --name {name} --no-plot").success
    report = shell.run_line_magic("npucompare", "b256 b1024")
    bundle = report._repr_mimebundle_()
    text, page = bundle["text/plain"], html.unescape(bundle["text/html"])
    head = "operators allocating more or less memory (MiB a step; beyond the run-to-run noise"
    flat = " ".join(text.split())  # the caption wraps at the terminal's width
    assert head in flat and head in page and "1% of b256's bytes, at least 2 MiB" in page
    table = text[text.index("operators allocating more or less memory"):].split("\n\n")[0].splitlines()
    listed = {line.split()[0]: line.split()[1:] for line in table if line.startswith("aten::")}
    assert listed["aten::addmm"][:3] == ["1.00", "4.00", "+3.00"] and listed["aten::mm"][:3] == ["2.00", "5.00", "+3.00"]
    assert page.index("needs MORE memory") < page.index("aten::addmm")
