"""The shells only parse, call and present: no two places in the CLI, the MCP server and the
magics share six or more lines of the same shape (the same tokens with other names, strings and
numbers), as a command's logic would if one shell composed it again. Read from the source."""

from __future__ import annotations

import io
import keyword
import tokenize
from pathlib import Path

from .test_sizes import PACKAGE

SHELLS = ["cli.py", "cli_run.py", "mcp_server.py", "magics.py", "magic_input.py"]
RUN = 6
SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def shape_lines(text: str) -> list[tuple[int, str]]:
    """(line number, shape) of each line of code: names as N, strings as S, numbers as 0; imports,
    blank lines, comments and lone closing brackets or strings (a docstring's end) passed over."""
    words: dict[int, list[str]] = {}
    for t in tokenize.generate_tokens(io.StringIO(text).readline):
        if t.type in SKIPPED:
            continue
        word = ("N" if t.type == tokenize.NAME and not keyword.iskeyword(t.string) else
                "S" if t.type == tokenize.STRING or tokenize.tok_name[t.type].startswith("FSTRING") else
                "0" if t.type == tokenize.NUMBER else t.string)
        words.setdefault(t.start[0], []).append(word)
    lines = [(n, " ".join(w)) for n, w in sorted(words.items())]
    return [(n, s) for n, s in lines if not s.startswith(("import ", "from ")) and s not in (")", "]", "}", "S")]


def repeated_runs(files: dict[str, str], run: int = RUN) -> list[list[tuple[str, int]]]:
    """The places (file, first line) of each run of ``run`` same-shape lines found in two files or more."""
    seen: dict[tuple[str, ...], list[tuple[str, int]]] = {}
    for name, text in files.items():
        lines = shape_lines(text)
        for i in range(len(lines) - run + 1):
            seen.setdefault(tuple(s for _, s in lines[i:i + run]), []).append((name, lines[i][0]))
    return [places for places in seen.values() if len({name for name, _ in places}) > 1]


def test_a_block_written_again_with_other_names_is_found():
    block = '''
def {f}(args, store):
    name = store.resolve(args.{a})
    if name is None:
        raise {e}("no run {a}")
    summary = store.summary(name, rank=args.rank)
    text = render(summary, top=args.top)
    return {{"name": name, "text": text}}
'''
    found = repeated_runs({"cli.py": block.format(f="analyze", a="run", e="UsageError"),
                           "mcp_server.py": "x = 1\n" + block.format(f="tool_analyze", a="target", e="ToolError")})
    assert found and {name for name, _ in found[0]} == {"cli.py", "mcp_server.py"}
    assert not repeated_runs({"cli.py": block.format(f="a", a="b", e="C"), "mcp_server.py": "x = 1\n"})


def test_no_two_shells_share_six_lines_of_the_same_shape():
    files = {name: (PACKAGE / name).read_text() for name in SHELLS}
    assert repeated_runs(files) == []
