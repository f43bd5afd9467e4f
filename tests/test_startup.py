"""The CLI starts in a blink: --help and every command's argument errors answer without
importing pandas, numpy, torch or matplotlib, and `analyze` of a trace imports pandas and numpy
but nothing else it does not use (each checked in a fresh process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from npumagic.cli import _subcommands, build_parser

from .conftest import CUDA, need

HEAVY = ("pandas", "numpy", "torch", "matplotlib")
# what no command below needs: the notebook's, plotting, SQL and cluster stacks, and the comparison
# of two runs (about 12 ms of dataclasses to define)
UNUSED = ("IPython", "scipy", "duckdb", "dask", "npumagic.analysis.compare")
# torch_npu's reader and outline (CSV tables, SQLite): a Kineto trace's analysis needs neither
ASCEND_READER = ("npumagic.analysis.sources.ascend.reader", "npumagic.analysis.sources.ascend.outline", "sqlite3")
# runs the CLI as the console script does, then says on stderr's last line which of WATCHED it imported
PROBE = """
import json, sys
from npumagic.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as exit:
    status = exit.code
print(json.dumps([status, sorted(m for m in WATCHED if m in sys.modules)]), file=sys.stderr)
"""


def probe(*argv: str, cwd=None, env=None, watched=HEAVY + UNUSED) -> tuple[int, list[str], str]:
    code = f"WATCHED = {tuple(watched)!r}\n{PROBE}"
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=cwd, timeout=120,
                          env=env)
    *said, last = done.stderr.strip().splitlines()
    status, heavy = json.loads(last)
    return status, heavy, "\n".join(said)


@pytest.mark.parametrize("argv", [["--help"], ["analyze", "--help"], ["show", "--help"], ["mcp", "--help"]])
def test_help_imports_nothing_heavy(argv):
    status, heavy, _ = probe(*argv)
    assert (status, heavy) == (0, [])


@pytest.mark.parametrize("argv, said", [
    (["analyze"], "required: path"),
    (["analyze", "x", "--top", "z"], "invalid int value"),
    (["analyze", "/no/such/trace"], "/no/such/trace: no such file or directory"),
    (["advise", "/no/such/trace"], "/no/such/trace: no such file or directory"),
    (["compare", ".", "/no/such/trace"], "/no/such/trace: no such file or directory"),
    (["show", "/no/such/trace", "-o", "x.png"], "/no/such/trace: no such file or directory"),
    (["show", ".", "-o", "x.png", "--step-range", "3:1"], "the end comes before the start"),
    (["show", ".", "-o", "x.png", "--dpi", "5"], "5 is not from 20 to 600"),
    (["runs"], "no ./npumagic_runs here"),
    (["runs", "a", "--out", "b"], "two output directories"),
    (["export", "a", "--out", "b"], "two output directories"),
    (["demo", "--bogus"], "unrecognized arguments"),
])
def test_argument_errors_import_nothing_heavy(argv, said, tmp_path):
    status, heavy, stderr = probe(*argv, cwd=tmp_path)
    assert status == 2 and said in stderr
    assert heavy == []


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_analyze_imports_pandas_and_numpy_only(json_flag):
    # GIVEN the shared V100 trace WHEN `npumagic analyze` reads it THEN of the heavy modules only
    # pandas and numpy, which read it, are imported: no matplotlib, torch, IPython, ...
    trace = need(CUDA / "ns_resolution")
    status, heavy, _ = probe("analyze", str(trace), *json_flag)
    assert (status, heavy) == (0, ["numpy", "pandas"])


def test_analyze_of_a_kineto_trace_loads_no_torch_npu_reader():
    # GIVEN the shared V100 Kineto trace WHEN `npumagic analyze` reads it THEN torch_npu's reader,
    # its outline and SQLite stay unloaded: only a torch_npu job's reading imports them
    trace = need(CUDA / "ns_resolution")
    status, loaded, _ = probe("analyze", str(trace), "--json", watched=ASCEND_READER)
    assert (status, loaded) == (0, [])


@pytest.mark.parametrize("name", [name for name, *_ in _subcommands()])
def test_one_subcommand_parses_as_the_whole_parser_does(name, capsys):
    # GIVEN the parser `npumagic NAME ...` builds (that subcommand alone declared) WHEN it words
    # its usage, the subcommand's help and an error THEN each reads as the whole parser's
    whole, alone = build_parser(), build_parser(only=name)
    choices = lambda parser: parser._subparsers._group_actions[0].choices  # noqa: E731
    assert list(choices(alone)) == [name]
    assert alone.format_usage() == whole.format_usage()
    assert choices(alone)[name].format_help() == choices(whole)[name].format_help()
    said = []
    for parser in (whole, alone):
        with pytest.raises(SystemExit):
            parser.parse_args([name, "--no-such-option"])
        said.append(capsys.readouterr().err)
    assert said[0] == said[1]
    assert "unrecognized arguments: --no-such-option" in said[0] or "the following arguments are required" in said[0]


def test_the_public_api_loads_on_first_use():
    code = ("import sys, npumagic; before = [m for m in ('pandas', 'numpy') if m in sys.modules]; "
            "print(before, npumagic.Summary.__name__, npumagic.checklist.__module__, 'analyze' in dir(npumagic))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.split() == ["[]", "Summary", "npumagic.analysis.checklist", "True"]


def test_mcp_without_the_sdk_says_how_to_install_it():
    code = "import sys; sys.modules['mcp'] = None; from npumagic.cli import main; sys.exit(main(['mcp']))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr == "npumagic: error: npumagic mcp needs the MCP Python SDK (2.x): pip install 'npumagic[mcp]'\n"


@pytest.fixture
def two_runs(trainer, tmp_path):
    """A history of two runs recorded by the magics in a real shell, one with a note."""
    for name in ("first", "second"):
        ran = trainer.run_cell(f"%npusteps --wait 0 --warmup 1 --steps 3 --no-plot --quiet --name {name} train_step()")
        assert ran.success, ran.error_in_exec
    trainer.run_line_magic("npunote", 'second "a note"')
    return tmp_path / "runs"


def _as_pandas_wrote_it(out) -> tuple[list[dict], str]:
    """The runs as the DataFrame path (``%npuruns``'s table) writes them: JSON rows and text."""
    from npumagic.named_runs import NamedRuns
    from npumagic.render.tables import format_runs

    table = NamedRuns(out, create=False).table()
    return json.loads(table.to_json(orient="records", date_format="iso")), format_runs(table).to_text(120)


@pytest.mark.parametrize("command", ["runs", "export", "rules"])
def test_reading_the_history_imports_nothing_heavy(two_runs, command):
    # GIVEN a history of two runs WHEN the CLI lists it, prints its log or its rules' calibration
    # THEN no pandas or numpy
    for json_flag in ([], ["--json"]):
        status, heavy, stderr = probe(command, str(two_runs), *json_flag)
        assert (status, heavy, stderr) == (0, [], "")


def test_runs_prints_what_the_table_of_runs_holds(two_runs, monkeypatch):
    # GIVEN a history WHEN `npumagic runs DIR [--json]` prints it from plain rows THEN its rows
    # and text are those of the DataFrame %npuruns shows
    monkeypatch.setenv("COLUMNS", "120")
    rows, text = _as_pandas_wrote_it(two_runs)
    cli = [sys.executable, "-m", "npumagic.cli", "runs", str(two_runs)]
    doc = json.loads(subprocess.run([*cli, "--json"], capture_output=True, text=True, check=True, timeout=120).stdout)
    assert doc["runs"] == rows and [r["name"] for r in rows] == ["first", "second"]
    assert rows[1]["note"] == "a note" and rows[0]["steps"] == 3
    assert rows[0]["created"][:16].replace("T", " ") in text  # when, to the minute
    assert subprocess.run(cli, capture_output=True, text=True, check=True, timeout=120).stdout == text + "\n"


@pytest.fixture
def three_runs(trainer, tmp_path):
    """A history of three runs of one cell: the third has a band learned from the first two."""
    for name in ("first", "second", "third"):
        ran = trainer.run_cell(f"%npusteps --wait 0 --warmup 1 --steps 3 --no-plot --quiet --name {name} train_step()")
        assert ran.success, ran.error_in_exec
    return tmp_path / "runs"


@pytest.mark.parametrize("run, statuses", [
    ("first", {0}),  # no band yet
    ("third", {0, 1}),  # decided: its step times, the band, the record's facts and stored host samples
])
def test_checking_a_run_of_the_history_imports_nothing_heavy(three_runs, run, statuses):
    # GIVEN a history WHEN `npumagic check RUN` gates a run of it THEN no pandas, numpy or scipy
    env = {**os.environ, "NPUMAGIC_CONTENDED_WAIT_PCT": "100"}  # a loaded machine's "cannot tell" is light too, but not this test's
    for json_flag in ([], ["--json"]):
        status, heavy, stderr = probe("check", run, "--history", str(three_runs), *json_flag, env=env)
        assert (status in statuses, heavy, stderr) == (True, [], "")
