"""The core of commands under the three shells: a command declared once, in one module, is a CLI
subcommand, an MCP tool and ``%npu NAME``; and the CLI and the MCP server answer ``compare`` alike
(the same run on both sides refused, equal names told apart by their folder, a run's context
passed), on real profiler output."""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest
from IPython.core.error import UsageError

from npumagic.cli import main
from npumagic.commands import COMMANDS

from .conftest import CUDA, need

anyio = pytest.importorskip("anyio")
pytest.importorskip("mcp", reason="need the MCP SDK (the extra npumagic[mcp], in [test])")

TRACE = CUDA / "alexnet_sync"  # a small real Kineto trace (25 kB)

MADE_UP = textwrap.dedent('''
    """A made-up command: the kernel with the most device time."""
    from dataclasses import dataclass

    from npumagic.commands.base import TARGET, Command, Result


    @dataclass(frozen=True)
    class Busiest(Result):
        label: str
        kernel: str
        total_us: float

        def to_dict(self):
            return {"kind": "busiest", "path": self.label, "kernel": self.kernel, "total_us": self.total_us}

        def text(self, width=None):
            return f"{self.label}: busiest kernel {self.kernel}"


    def busiest(places, target):
        found = places.target(target)
        top = found.summary.kernels.sort_values("total_us", ascending=False).iloc[0]
        return Busiest(found.label, str(top["name"]), float(top["total_us"]))


    COMMAND = Command("busiest", "the kernel with the most device time", (TARGET,), busiest)
''')


@pytest.fixture
def busiest(tmp_path, monkeypatch):
    """The made-up command's module, and its one line in COMMANDS (taken out again after)."""
    (tmp_path / "made_up_command.py").write_text(MADE_UP)
    monkeypatch.syspath_prepend(str(tmp_path))
    import made_up_command

    COMMANDS.append(made_up_command.COMMAND)
    yield made_up_command.COMMAND
    COMMANDS.remove(made_up_command.COMMAND)


def mcp_call(server, name: str, arguments: dict) -> tuple[bool, dict | str]:
    """(is_error, JSON document or error text) of a tool called in this process, as the server's
    request handler calls it."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        answer = anyio.run(server.call_tool, name, arguments)
    except ToolError as exc:
        return True, str(exc)
    return answer.is_error, answer.structured_content


def test_a_command_declared_in_one_module_is_in_the_cli_mcp_and_the_magic(busiest, shell, capsys):
    from npumagic.mcp_server import build_server

    trace = str(need(TRACE))
    # GIVEN the made-up command WHEN the CLI runs it, text then JSON THEN it answers as declared
    assert main(["busiest", trace]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"{trace}: busiest kernel ")
    assert main(["busiest", trace, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "busiest" and said.strip().endswith(doc["kernel"])
    # the MCP server lists it as a tool taking the declared argument, and answers the same
    server = build_server(shell.magics_manager.registry["NpuMagics"].output_dir, roots=[str(CUDA)])
    tools = {t.name: t for t in anyio.run(server.list_tools)}
    assert tools["busiest"].input_schema["required"] == ["target"]
    assert mcp_call(server, "busiest", {"target": trace}) == (False, doc)
    # and %npu runs it on the same path
    result = shell.run_line_magic("npu", f"busiest {trace}")
    assert result.to_dict() == doc and str(result) == said.strip()
    assert "busiest" in shell.run_line_magic("npu", "")


def test_the_magic_refuses_a_command_it_does_not_know_or_bad_arguments(shell):
    for line, said in (("nosuch x", "unknown command 'nosuch'"), ("analyze", "required: path"),
                       ("analyze /no/such/trace", "/no/such/trace: no such file or directory"),
                       ("steps x --first z", "invalid int value")):
        with pytest.raises(UsageError, match=said):
            shell.run_line_magic("npu", line)
        assert isinstance(shell.run_cell(f"%npu {line}").error_in_exec, UsageError)


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    """A history of two runs of the real trace (a, b), and two copies of it whose folders have
    the same name (x/trace, y/trace)."""
    from npumagic.session import Session

    root = tmp_path_factory.mktemp("sides")
    for side in ("x", "y"):
        shutil.copytree(need(TRACE), root / side / "trace")
    session = Session(root / "runs")
    session.recorder.load(root / "x" / "trace", name="a")
    session.recorder.load(root / "y" / "trace", name="b")
    return root


def both_shells(root, a: str, b: str, capsys):
    """(exit status, JSON or error line) of ``npumagic compare`` and (is_error, document or text)
    of the MCP tool, on the same two sides."""
    from npumagic.mcp_server import build_server

    status = main(["compare", a, b, "--history", str(root / "runs"), "--json"])
    out, err = capsys.readouterr()
    cli = json.loads(out) if status == 0 else err.strip()
    return (status, cli), mcp_call(build_server(root / "runs", roots=[str(root)]), "compare", {"a": a, "b": b})


@pytest.mark.parametrize("a, b", [("b", "-1"), ("-2", "a")])
def test_the_same_run_on_both_sides_is_refused_by_both_shells(sides, a, b, capsys):
    (status, said), (is_error, text) = both_shells(sides, a, b, capsys)
    run = "b" if "b" in (a, b) else "a"
    assert status == 2 and f"both sides are {run!r}; name two different runs" in said
    assert is_error and f"both sides are {run!r}; name two different runs" in text


def test_two_sides_with_one_name_are_told_apart_by_their_folder(sides, capsys):
    (status, cli), (is_error, mcp_doc) = both_shells(sides, str(sides / "x" / "trace"), str(sides / "y" / "trace"),
                                                     capsys)
    assert status == 0 and not is_error
    assert (cli["name_a"], cli["name_b"]) == ("x/trace", "y/trace") == (mcp_doc["name_a"], mcp_doc["name_b"])


def test_a_run_against_a_path_carries_the_runs_context_in_both_shells(sides, capsys):
    """GIVEN run a (recorded from x/trace, so its record holds how it was loaded) and the path
    y/trace WHEN compared THEN both shells say what changed from the run's record, alike."""
    (status, cli), (is_error, mcp_doc) = both_shells(sides, "a", str(sides / "y" / "trace"), capsys)
    assert status == 0 and not is_error
    assert cli["changed"] and cli["changed"] == mcp_doc["changed"]
    # the same document, but for the sides as each shell was given them and the CLI's gate
    assert {k: v for k, v in cli.items() if k not in ("a", "b", "gate")} == \
        {k: v for k, v in mcp_doc.items() if k not in ("a", "b")}


def test_the_cli_declares_json_once_and_the_magics_translate_errors_in_one_place():
    """--json is one declaration for every subcommand that takes it; npumagic's errors become a
    UsageError in usage_errors() (and in %npuab, whose user steps' own errors must propagate)."""
    from pathlib import Path

    import npumagic

    package = Path(npumagic.__file__).parent
    cli = (package / "cli.py").read_text() + (package / "cli_run.py").read_text()
    assert cli.count('"--json"') == 1
    from npumagic.cli import build_parser

    subcommands = build_parser()._subparsers._group_actions[0].choices
    with_json = {name for name, p in subcommands.items() if "--json" in p._option_string_actions}
    assert with_json == {c.name for c in COMMANDS} | {"check", "show", "run", "trigger", "ab"}
    translations = {name: (package / name).read_text().count("raise UsageError(str(exc)) from None")
                    for name in ("magics.py", "magic_input.py")}
    assert translations == {"magics.py": 1, "magic_input.py": 1}
