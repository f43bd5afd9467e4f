"""The regions and modules commands through the three shells (CLI, MCP tool, ``%npu``) on a
real CPU training loop recorded here, on a run of a history, and what each says where the run
recorded none."""

from __future__ import annotations

import json

import pytest

from npumagic.cli import main

from .analysis.test_regions import SLEEP_S, record_loop
from .test_command_core import mcp_call

anyio = pytest.importorskip("anyio")
pytest.importorskip("mcp", reason="need the MCP SDK (the extra npumagic[mcp], in [test])")


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """A loop recorded with modules (and stacks) and one without, and a history holding the first as run 'mods'."""
    from npumagic.session import Session

    root = tmp_path_factory.mktemp("regions_cmd")
    record_loop(root / "mods", modules=True, steps=2)
    record_loop(root / "plain", steps=2)
    Session(root / "runs").recorder.load(root / "mods", name="mods")
    return root


def test_regions_in_the_cli_the_mcp_tool_and_the_magic_alike(traces, shell, capsys):
    from npumagic.mcp_server import build_server

    path = str(traces / "mods")
    assert main(["regions", path]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"{path}: regions, median of 2 steps") and "data_load_and_transform" in said
    assert "(outside regions)" in said
    assert main(["regions", path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "regions" and doc["recorded"] and doc["what_to_record"] is None
    rows = {r["path"]: r for r in doc["median"]}
    assert rows["data_load_and_transform"]["host_ms"] >= SLEEP_S * 1000
    assert rows["forward_backward"]["device_ms"] is None  # a CPU run: no device time
    assert {"name", "path", "calls", "host_ms", "device_ms", "self_device_ms", "step"} <= set(doc["steps"][0])
    server = build_server(traces / "runs", roots=[str(traces)])
    assert mcp_call(server, "regions", {"target": path}) == (False, doc)
    result = shell.run_line_magic("npu", f"regions {path}")
    assert result.to_dict() == doc and str(result) == said.strip()
    # a run of the history, by name: its profiler output read again
    assert main(["regions", "mods", "--history", str(traces / "runs"), "--json"]) == 0
    by_name = json.loads(capsys.readouterr().out)
    assert by_name["path"] == "mods" and by_name["median"] == doc["median"]


def test_modules_lists_each_layer_forward_and_backward(traces, capsys):
    assert main(["modules", str(traces / "mods")]) == 0
    said = capsys.readouterr().out
    for line in ("  Linear_0 ", "  Linear_1 ", "  Linear_0 [backward] ", "  Linear_1 [backward] "):
        assert line in said
    assert main(["modules", str(traces / "mods"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["note"] is None and {(r["pass"], r["path"]) for r in doc["median"]} >= {
        ("forward", "Sequential_0/Linear_0"), ("backward", "Sequential_0/Linear_1")}


def test_a_run_without_them_is_told_what_to_record(traces, capsys):
    plain = str(traces / "plain")
    assert main(["modules", plain]) == 0
    said = capsys.readouterr().out
    # a terminal is told the command, no magic
    assert said.startswith(f"{plain}: no nn.Module spans recorded: profile with `npumagic run --modules`, or ")
    assert "%npu" not in said
    assert main(["modules", plain, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert not doc["recorded"] and "with_modules=True" in doc["what_to_record"]


def test_npucompare_by_module_and_by_region_in_the_shell_and_the_cli(shell, tmp_path, capsys):
    from .analysis.test_compare_parts import record_model

    # four times the layer's work: a step the other suite's load stalls cannot pass for the wide layer's
    for name, width in (("narrow", 1024), ("wide", 4096)):
        record_model(tmp_path / name, width)
        shell.run_line_magic("npuload", f"{tmp_path / name} --name {name} --no-plot")
    capsys.readouterr()
    report = shell.run_line_magic("npucompare", "narrow wide --by-module --by-region --no-plot")
    regions, modules = report.parts
    assert (regions.what, modules.what) == ("regions", "modules")
    layer = modules.table.set_index(["pass", "path"]).loc[("forward", "Sequential_0/Linear_1")]
    assert layer["significant"] and layer["verdict"] == "slower"
    said = str(report)
    assert "by module: wide against narrow" in said and "forward Sequential_0/Linear_1" in said
    # the command core's compare takes the same flags: the CLI's JSON carries both tables
    assert main(["compare", "narrow", "wide", "--history", str(tmp_path / "runs"), "--by-module", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "by_region" not in doc
    rows = {(r["pass"], r["path"]): r for r in doc["by_module"]["rows"]}
    assert rows[("forward", "Sequential_0/Linear_1")]["verdict"] == "slower"
    # and the MCP tool: the same rows, the table in its text
    from npumagic.mcp_server import build_server

    server = build_server(tmp_path / "runs", roots=[str(tmp_path)])
    is_error, tool_doc = mcp_call(server, "compare", {"a": "narrow", "b": "wide", "by_module": True})
    assert not is_error and tool_doc["by_module"] == doc["by_module"]
