"""Sizes a reader can hold: no module of the package over 600 lines, no function over 80 lines
and none taking more than 8 parameters by position (keyword-only options, named at every call as
matplotlib's are, do not count), and in the shells (the CLI, the MCP server, the magics and the
core of commands under them) none with more than 8 parameters at all. Read from the source, as
tests/test_layers.py reads the imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "npumagic"
MODULE_LINES = 600
FUNCTION_LINES = 80
PARAMETERS = 8
# modules allowed over MODULE_LINES, each with its owner's reason (none today: add one here, named,
# rather than raise the limit)
LONG_MODULES: dict[str, str] = {}
# functions allowed over FUNCTION_LINES or PARAMETERS positional parameters, "module:function" with
# its owner's reason
LONG_FUNCTIONS: dict[str, str] = {}
SHELLS = ["cli.py", "cli_run.py", "mcp_server.py", "magics.py", "magic_input.py", "commands"]


def shell_files() -> list[Path]:
    found = []
    for name in SHELLS:
        path = PACKAGE / name
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return found


def functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def positional(node: ast.FunctionDef) -> int:
    """Parameters that can be passed by position (self and cls left out)."""
    names = [a.arg for a in node.args.posonlyargs + node.args.args]
    return len(names) - (names[:1] in (["self"], ["cls"])) + (node.args.vararg is not None)


def parameters(node: ast.FunctionDef) -> int:
    a = node.args
    return len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)


def test_the_shells_are_all_found():
    assert all(path.is_file() for path in shell_files()) and len(shell_files()) >= len(SHELLS)


def test_no_module_is_over_600_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MODULE_LINES}
    assert {name: n for name, n in long.items() if name not in LONG_MODULES} == {}


@pytest.mark.parametrize("path", shell_files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_shell_function_fits_a_screen_and_takes_at_most_8_parameters(path):
    too_long = [f"{f.name}: {f.end_lineno - f.lineno + 1} lines" for f in functions(path)
                if f.end_lineno - f.lineno + 1 > FUNCTION_LINES]
    too_many = [f"{f.name}: {parameters(f)} parameters" for f in functions(path) if parameters(f) > PARAMETERS]
    assert too_long + too_many == []


def test_no_function_of_the_package_is_over_80_lines_or_takes_more_than_8_by_position():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for f in functions(path):
            key = f"{path.relative_to(PACKAGE)}:{f.name}"
            lines = f.end_lineno - f.lineno + 1
            if lines > FUNCTION_LINES:
                found[key] = f"{lines} lines"
            elif positional(f) > PARAMETERS:
                found[key] = f"{positional(f)} positional parameters"
    assert {key: why for key, why in found.items() if key not in LONG_FUNCTIONS} == {}
