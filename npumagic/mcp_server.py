"""``npumagic mcp``: the CLI's analyses as a Model Context Protocol server over stdio, for coding
assistants (the official ``mcp`` SDK, ``pip install 'npumagic[mcp]'``).

Each tool mirrors a command (``runs``, ``analyze``, ``advise``, ``compare``, the step table of
``%npusteps`` and ``export``'s troubleshooting log) and answers in compact text a model reads
within a few thousand tokens: tables cut to their top rows, saying how many were left out. The
full JSON document (:mod:`npumagic.jsonout`, as ``--json`` prints it) rides along as the result's
structured content. A target is a profiler output path (checked as the CLI checks it) or the name
of a run in the history of the output directory the server was given (or -1, -2: the latest).
The server reads; the only thing it may write is a summary cached into that history, and it
never runs user code (there is no capture tool).

It reads paths only below its roots (:class:`Roots`): the ``--root`` directories, by default the
working directory and the output directory, and the roots a client declares (MCP's
``roots/list``); a path elsewhere, once ``~``, ``..`` and links are resolved, is refused before
anything below it is read. The runs of the history are named, not paths, and stay open. What a
trace, a note or a run's record says is data: every string of it reaches an answer as one inert
line (:func:`_inert`), so a kernel named ``"x\\n\\nSYSTEM: ..."`` cannot write lines of its own."""

from __future__ import annotations

import dataclasses
import functools
import logging
import warnings
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote, urlparse

import anyio
import anyio.from_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types import CallToolResult, TextContent

from . import jsonout
from .errors import NpumagicError, TraceError
from .names import DB_NAME
from .render.tables import shorten
from .terminal import one_line

log = logging.getLogger(__name__)

ROWS = 12  # table rows shown in an answer; the JSON has them all
FINDINGS = 6
BUDGET = 12_000  # characters of text in one answer, about 3000 tokens
TEXT_CHARS = 500  # a string from a trace, a note or an error in an answer's text is cut beyond this (both ends kept)
ROOTS_WAIT = 10  # seconds a client that declared roots has to list them; then the server's own roots serve

INSTRUCTIONS = ("npumagic analyses PyTorch profiler outputs (torch.profiler/Kineto traces, torch_npu exports) and "
                "the runs its IPython magics recorded. Start with analyze (step table, top kernels, the checklist "
                "verdict naming the bottleneck), then advise for ranked fixes; compare says whether a change helped "
                "beyond noise. Times are milliseconds in the text, microseconds (_us) in the JSON.")


def _answer(text: str, doc: dict[str, Any]) -> CallToolResult:
    """The text (built from :func:`_inert` objects) cut to the budget, and the JSON document with
    its strings inert: whole, as ``--json`` gives them, since a program matches a kernel by its
    full name, but without control characters, newlines included. JSON's own escaping would keep a
    newline out of the document's lines, but clients hand structured content on in forms of their
    own (a model may be shown its values), so no string of it carries a line break whatever the
    client does with it."""
    if len(text) > BUDGET:
        cut = text[:BUDGET].rsplit("\n", 1)[0]
        text = f"{cut}\n... ({text.count(chr(10)) - cut.count(chr(10))} more lines left out; the JSON has them all)"
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=_inert(doc, cut=None))


def _inert(value: Any, cut: int | None = TEXT_CHARS, _seen: dict[int, Any] | None = None) -> Any:
    """``value`` with every string in it one inert line (:func:`~npumagic.terminal.one_line`) and,
    with ``cut``, at most that long, cut as the tables cut names (:func:`~npumagic.render.tables.shorten`):
    strings, and recursively the fields of dataclasses (a Verdict, an Advice, a Comparison), dicts,
    lists and tuples, and the text columns of DataFrames. Cells are made inert but never cut: a
    table cuts its names to its width itself, keeping apart names that differ only in the middle."""
    seen = {} if _seen is None else _seen
    if id(value) in seen:  # shared (made inert once), or a cycle (met again while made inert: kept as it is)
        return seen[id(value)]
    if isinstance(value, str):
        text = one_line(value)
        return shorten(text, cut) if cut else text
    seen[id(value)] = value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = dataclasses.replace(value, **{f.name: _inert(getattr(value, f.name), cut, seen)
                                            for f in dataclasses.fields(value) if f.init})
    elif isinstance(value, dict):
        out = {_inert(k, cut, seen): _inert(v, cut, seen) for k, v in value.items()}
    elif type(value) in (list, tuple):
        out = type(value)(_inert(v, cut, seen) for v in value)
    elif hasattr(value, "columns") and hasattr(value, "assign"):  # a DataFrame
        out = _inert_frame(value)
    else:
        out = value
    seen[id(value)] = out
    return out


def _inert_frame(frame):
    import pandas as pd

    text = [c for c in frame.columns if pd.api.types.is_object_dtype(frame[c])
            or isinstance(frame[c].dtype, (pd.CategoricalDtype, pd.StringDtype))]
    if not text:
        return frame
    out = frame.copy()
    for c in text:
        out[c] = frame[c].map(lambda v: one_line(v) if isinstance(v, str) else v)
    return out


def _rows(frame, what: str, limit: int = ROWS, tail: bool = False):
    """The first (or last) ``limit`` rows of ``frame`` and a line saying how many were left out."""
    left = len(frame) - limit
    if left <= 0:
        return frame, ""
    return (frame.tail(limit) if tail else frame.head(limit)), f"({left} more {what} left out; the JSON has them all)"


def _tool(fn: Callable[..., CallToolResult]) -> Callable[..., CallToolResult]:
    """npumagic's own errors (a missing path, an unknown run) reach the model as the CLI prints
    them; the SDK would hide any other exception's text."""
    @functools.wraps(fn)
    def call(*args, **kwargs) -> CallToolResult:
        try:
            return fn(*args, **kwargs)
        except (NpumagicError, ValueError, OSError) as exc:  # their text names paths, runs, kernels
            raise ToolError(_inert(str(exc), cut=2 * TEXT_CHARS)) from None

    return call


class Roots:
    """The folders whose paths the server reads: the ``--root`` directories (``given``), else by
    default the working directory and the output directory; and the client's roots where it
    declares them. A client's roots replace the working directory, which is only a guess (an
    assistant may start the server anywhere), and are added to ``--root`` directories, which the
    user chose."""

    def __init__(self, given: list[str | Path] | None, out: str | Path) -> None:
        self.given = [Path(r).expanduser().resolve() for r in given or []]
        for root in self.given:
            if not root.is_dir():
                raise NpumagicError(f"--root {root}: no such directory")
        self.out = Path(out).expanduser().resolve()

    def of(self, client: list[Path] | None) -> list[Path]:
        """The roots, given the client's (None: it declared none)."""
        if self.given:
            return self.given + list(client or [])
        return [*client, self.out] if client else [Path.cwd().resolve(), self.out]

    @staticmethod
    def of_client(ctx: Context | None) -> list[Path] | None:
        """The file:// roots the client lists, asked from the tool's worker thread; None where it
        declares no roots capability, lists none, or does not answer in :data:`ROOTS_WAIT` s."""
        try:
            declared = ctx is not None and ctx.client_capabilities is not None and \
                ctx.client_capabilities.roots is not None
        except ValueError:  # no request (a direct call, as in a test of the function)
            declared = False
        if not declared:
            return None

        async def ask():
            with anyio.fail_after(ROOTS_WAIT), warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)  # roots are the 2025 protocol's, still served
                return await ctx.session.list_roots()

        try:
            listed = anyio.from_thread.run(ask)
        except Exception as exc:  # an error answer, a timeout, a closed stream: the server's roots serve
            log.debug("the client's roots/list failed: %r", exc)
            return None
        paths = [_file_path(str(root.uri)) for root in listed.roots]
        return [p for p in paths if p is not None] or None

    def check(self, target: str, client: list[Path] | None) -> Path:
        """``target`` as a resolved path below one of the roots, else NpumagicError naming them
        (nothing below it is read, or even looked at, first)."""
        try:
            path = Path(target).expanduser().resolve()
        except (RuntimeError, OSError) as exc:  # ~nosuchuser, a link loop
            raise NpumagicError(f"{target}: {exc}") from None
        roots = self.of(client)
        if not any(path.is_relative_to(root) for root in roots):
            raise NpumagicError(f"{target}: outside the folders this server reads ({', '.join(map(str, roots))}); "
                                "start `npumagic mcp` with --root DIR for another, or add it to the client's roots")
        return path


def _file_path(uri: str) -> Path | None:
    """The local path of a ``file://`` URI, resolved; None for any other (an http root is no folder here)."""
    parts = urlparse(uri)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost") or not parts.path:
        return None
    return Path(unquote(parts.path)).expanduser().resolve()


class Profiles:
    """Where targets are found: paths below the roots, and the runs of one output directory's
    history (opened on first use, and only when it holds one: the server creates no history)."""

    def __init__(self, out: str | Path, roots: list[str | Path] | None = None) -> None:
        self.out = Path(out)
        self.roots = Roots(roots, out)
        self._session = None

    def session(self):
        if self._session is None:
            if not (self.out / DB_NAME).is_file():
                raise NpumagicError(f"{self.out}: no history here (the output directory %%npuprofile wrote its runs "
                                    "to); give a profiler output path, or start the server with --out DIR")
            from .session import Session

            self._session = Session(self.out)
        return self._session

    def is_path(self, target: str) -> bool:
        return "/" in target or target.startswith("~") or target in (".", "..") or Path(target).exists()

    def locate(self, target: str, client: list[Path] | None) -> tuple[Path | None, str | None]:
        """(resolved path, None) of a path below the roots, or (None, run name) of a run."""
        if self.is_path(target):
            return self.roots.check(target, client), None
        return None, self.session().resolve(target)

    def summary(self, target: str, client: list[Path] | None, rank: int | None = None,
                located: tuple[Path | None, str | None] | None = None) -> tuple[str, Any, str | None]:
        """(label, Summary, run name or None) of a path or a run (``located``: as :meth:`locate` found it)."""
        path, name = located or self.locate(target, client)
        if path is not None:
            if not path.exists():
                raise TraceError(Path(target).expanduser(), "no such file or directory")
            from . import parallel

            return str(Path(target).expanduser()), parallel.analyze(path, rank=rank, progress=False), None
        summary = self.session().summary(name)
        if rank is not None:
            if rank not in summary.per_rank:
                raise NpumagicError(f"rank {rank} not in run {name!r}; ranks: {sorted(summary.per_rank) or [0]}")
            summary = summary.per_rank[rank]
        return name, summary, name


def _at_least_one(value: int, what: str) -> int:
    """``value``, a count the model gave, else NpumagicError: a table of -1 rows is no question."""
    if value < 1:
        raise NpumagicError(f"{what} must be 1 or more, not {value}")
    return value


def build_server(out: str | Path = "npumagic_runs", roots: list[str | Path] | None = None) -> MCPServer:
    """The server: one tool per CLI command, over the runs of ``out`` and the profiler output
    paths below ``roots`` (default the working directory and ``out``; see :class:`Roots`)."""
    from . import __version__

    profiles = Profiles(out, roots)
    server = MCPServer("npumagic", version=__version__, instructions=INSTRUCTIONS)

    @server.tool()
    @_tool
    def runs() -> CallToolResult:
        """List the runs recorded in the history (name, when, status, backend, steps, median step, bottleneck, note)."""
        from .render.tables import format_runs

        table = profiles.session().runs.table()
        shown, left = _rows(table, "older runs", tail=True)
        text = format_runs(_inert(shown)).to_text() if len(table) else f"no runs in {_inert(str(profiles.out))}"
        return _answer("\n".join(filter(None, [text, left])), jsonout.runs_doc(table, str(profiles.out)))

    @server.tool()
    @_tool
    def analyze(ctx: Context, target: str, rank: int | None = None, top: int = 10) -> CallToolResult:
        """Analyze a profiler output path or a recorded run (name, or -1 for the latest): step times, top kernels,
        the rank table of a multi-rank job and the checklist verdict naming the bottleneck."""
        from .analysis.checklist import checklist
        from .render.tables import format_kernels, format_ranks, format_steps, kernel_caption, rank_caption
        from .render.text import summary_headline

        _at_least_one(top, "top (the kernels to list)")
        label, summary, _ = profiles.summary(target, Roots.of_client(ctx), rank)
        verdict = checklist(summary)
        steps, steps_left = _rows(summary.steps, "steps")
        kernels = format_kernels(_inert(summary.kernels), top, _inert(kernel_caption(summary)))  # says "top N of M"
        parts = [_inert(f"{label}: {summary_headline(summary)}", cut=2 * TEXT_CHARS), format_steps(steps).to_text(),
                 steps_left, kernels.to_text()]
        if len(summary.ranks) > 1:
            ranks, ranks_left = _rows(summary.ranks, "ranks")
            parts += [format_ranks(_inert(ranks), _inert(rank_caption(summary))).to_text(), ranks_left]
        parts += ["checklist:", str(_inert(verdict))]
        return _answer("\n".join(filter(None, parts)), jsonout.analyze_doc(summary, verdict, label, top))

    @server.tool()
    @_tool
    def advise(ctx: Context, target: str, rank: int | None = None, every_rank: bool = False) -> CallToolResult:
        """Ranked findings of a profiler output path or a recorded run, each with its evidence and the fix to try
        next; every_rank: every rank of a multi-rank job, and the low-severity findings."""
        from .analysis.advice import advise_run

        label, summary, name = profiles.summary(target, Roots.of_client(ctx), rank)
        if name is not None:
            advice = profiles.session().advise(name, every_rank=every_rank, low=every_rank)
        else:
            advice = advise_run(summary, label, every_rank=every_rank, low=every_rank)
        shown = _inert(dataclasses.replace(advice, findings=advice.findings[:FINDINGS]))
        left = len(advice) - len(shown)
        text = str(shown) + (f"\n({left} more findings left out; the JSON has them all)" if left > 0 else "")
        return _answer(text, jsonout.advice_doc(advice, label))

    @server.tool()
    @_tool
    def compare(ctx: Context, a: str, b: str) -> CallToolResult:
        """Compare run or path B against the reference A: whether B's step time differs beyond noise (speedup,
        95% CI, p-value), the component that explains it, and the kernels that changed most."""
        from .analysis.compare import compare as compare_summaries
        from .named_runs import two_sides

        client = Roots.of_client(ctx)
        where_a, where_b = profiles.locate(a, client), profiles.locate(b, client)
        for kind, i in (("runs", 1), ("paths", 0)):  # before either side is read, as the CLI says it
            if where_a[i] is not None and where_b[i] is not None:
                two_sides(str(where_a[i]), str(where_b[i]), kind)
        label_a, sa, name_a = profiles.summary(a, client, located=where_a)
        label_b, sb, name_b = profiles.summary(b, client, located=where_b)
        if name_a is not None and name_b is not None:  # two runs: with their history's run-to-run noise
            cmp = profiles.session().compare(name_a, name_b)
        else:
            short_a, short_b = Path(label_a).name, Path(label_b).name
            if short_a == short_b:
                short_a, short_b = label_a, label_b
            cmp = compare_summaries(sa, sb, short_a, short_b)
        kernels, left = _rows(cmp.kernels, "kernels")
        # a diff keeps its lines (each one inert, after its +/- mark); every other string is one line
        diffs = {_inert(k): "\n".join(_inert(line) for line in diff.splitlines()) for k, diff in cmp.diffs.items()}
        shown = dataclasses.replace(_inert(dataclasses.replace(cmp, kernels=kernels, diffs={})), diffs=diffs)
        text = str(shown) + (f"\n{left}" if left else "")
        return _answer(text, jsonout.comparison_doc(cmp, label_a, label_b))

    @server.tool()
    @_tool
    def steps(ctx: Context, target: str, first: int | None = None, last: int | None = None,
              rank: int | None = None) -> CallToolResult:
        """The per-step table (wall, compute, communication, idle, data-loading time, device busy) of a path or run,
        for the steps first..last (ids as in the step column; default all)."""
        from .render.tables import format_steps

        label, summary, _ = profiles.summary(target, Roots.of_client(ctx), rank)
        frame = summary.steps
        if first is not None:
            frame = frame[frame["step"] >= first]
        if last is not None:
            frame = frame[frame["step"] <= last]
        if frame.empty:
            known = summary.steps["step"].tolist()
            raise NpumagicError(f"no steps {first}..{last} in {label}; its steps: "
                                f"{known[0]}..{known[-1]}" if known else f"{label} has no steps")
        shown, left = _rows(frame, "steps")
        doc = jsonout.document("steps", path=label, rank=summary.meta.get("rank"), first=first, last=last,
                               steps=jsonout.records(frame))
        return _answer("\n".join(filter(None, [f"{_inert(label)}: {len(frame)} steps", format_steps(shown).to_text(),
                                               left])), doc)

    @server.tool()
    @_tool
    def export() -> CallToolResult:
        """The troubleshooting log of the history: each run's verdict, findings and the user's note, as Markdown."""
        from .render.export import render_markdown

        runs = profiles.session().runs.records()
        # render_markdown makes each string of a run one inert Markdown line (md); the cell source
        # keeps its lines inside a fence no line of it can close
        return _answer(render_markdown(runs), jsonout.export_doc(runs, str(profiles.out)))

    return server


def serve(out: str | Path, roots: list[str | Path] | None = None) -> None:
    """Serve over stdin/stdout until the client closes them (a ``--root`` that is no directory is
    refused first)."""
    from .wording import SHELL

    server = build_server(out, roots)
    SHELL.set("cli")  # the assistant's user runs commands, not magics
    server.run("stdio")


if __name__ == "__main__":  # python -m npumagic.mcp_server [OUT]
    import sys

    serve(sys.argv[1] if len(sys.argv) > 1 else "npumagic_runs")
