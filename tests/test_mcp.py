"""``npumagic mcp`` through the official MCP client: the server runs in a subprocess over stdio,
as an assistant starts it."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

from npumagic.jsonout import SCHEMA

from .conftest import ASCEND, need

mcp = pytest.importorskip("mcp", reason="need the MCP SDK (the extra npumagic[mcp], in [test])")
anyio = pytest.importorskip("anyio")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

TOOLS = {"runs", "analyze", "advise", "compare", "steps", "export"}


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """A history of two recorded runs: the two profiler levels of the shared torch_npu job's rank 0."""
    from npumagic.session import Session

    out = tmp_path_factory.mktemp("runs")
    session = Session(out)
    session.load(need(ASCEND / "level1" / "rank0_ascend_pt"), name="level1")
    session.load(need(ASCEND / "level2" / "rank0_ascend_pt"), name="level2")
    return out


def call_server(out, calls):
    """Start ``npumagic mcp --out OUT``, initialize, list the tools, then make ``calls``
    [(tool, arguments)]; returns (server name, tool names, results)."""
    server = StdioServerParameters(command=sys.executable, args=["-m", "npumagic.cli", "mcp", "--out", str(out)],
                                   env={"PYTHONPATH": os.environ.get("PYTHONPATH", "")}, cwd=str(out))

    async def session(errlog):
        with anyio.fail_after(300):
            async with stdio_client(server, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as client:
                    init = await client.initialize()
                    tools = await client.list_tools()
                    results = [await client.call_tool(name, args) for name, args in calls]
                    return init.server_info.name, {t.name for t in tools.tools}, results

    with tempfile.TemporaryFile("w+") as errlog:  # the server's stderr, said when it fails
        try:
            return anyio.run(session, errlog)
        except Exception:
            errlog.seek(0)
            print(errlog.read()[-5000:], file=sys.stderr)
            raise


def text(result) -> str:
    return "\n".join(block.text for block in result.content)


def test_the_client_initializes_lists_tools_analyzes_and_compares(history):
    job = need(ASCEND / "level1")
    name, tools, (analyzed, compared) = call_server(history, [("analyze", {"target": str(job)}),
                                                               ("compare", {"a": "level1", "b": "level2"})])
    assert name == "npumagic" and tools == TOOLS
    assert not analyzed.is_error
    said = text(analyzed)
    assert "communication-bound" in said and len(said) < 12_000 + 200  # a few thousand tokens at most
    assert analyzed.structured_content["schema"] == SCHEMA
    assert analyzed.structured_content["verdict"]["bottleneck"] == "communication"
    assert not compared.is_error
    assert "no difference beyond noise can be shown between level1 and level2" in text(compared)
    doc = compared.structured_content
    assert (doc["schema"], doc["kind"], doc["name_a"], doc["name_b"], doc["significant"]) == \
        (SCHEMA, "comparison", "level1", "level2", False)


def test_runs_steps_and_errors_as_the_cli_says_them(history, tmp_path):
    _, _, (runs, steps, missing, unknown) = call_server(history, [
        ("runs", {}), ("steps", {"target": "level1", "first": 50, "last": 50}),
        ("analyze", {"target": str(tmp_path / "none")}), ("advise", {"target": "nosuchrun"})])
    assert [r["name"] for r in runs.structured_content["runs"]] == ["level1", "level2"]
    assert [s["step"] for s in steps.structured_content["steps"]] == [50] and "1 steps" in text(steps)
    assert missing.is_error and f"{tmp_path / 'none'}: no such file or directory" in text(missing)
    assert unknown.is_error and "Unknown run 'nosuchrun'; known: level1, level2" in text(unknown)
