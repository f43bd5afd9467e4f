"""``npumagic mcp``: the CLI's analyses as a Model Context Protocol server over stdio, for coding
assistants (the official ``mcp`` SDK, ``pip install 'npumagic[mcp]'``).

Each tool is a command of :data:`npumagic.commands.COMMANDS` (``runs``, ``analyze``, ``advise``,
``compare``, ``steps`` and ``export``'s troubleshooting log), its parameters the command's declared
arguments, as the CLI's subcommands are; it answers in compact text a model reads
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

import copy
import dataclasses
import functools
import inspect
import logging
import warnings
from pathlib import Path
from typing import Annotated, Any, Callable
from urllib.parse import unquote, urlparse

import anyio
import anyio.from_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from .commands import COMMANDS, ERRORS, Command, Places
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
                "beyond noise; query runs read-only SQL over every stored run's tables (SHOW TABLES lists them). "
                "Times are milliseconds in the text, microseconds (_us) in the JSON.")


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
        except ERRORS as exc:  # their text names paths, runs, kernels
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


class Profiles(Places):
    """Where targets are found: paths below the roots, and the runs of one output directory's
    history (opened on first use, and only when it holds one: the server creates no history).
    :meth:`for_client` is the same places with the roots a client declared."""

    def __init__(self, out: str | Path, roots: list[str | Path] | None = None) -> None:
        super().__init__(out=Path(out))
        self.roots = Roots(roots, out)
        self.client: list[Path] | None = None
        self._opened: dict[str, Any] = {}  # the session, shared with every copy for a client

    def for_client(self, client: list[Path] | None) -> "Profiles":
        places = copy.copy(self)
        places.client = client
        return places

    @property
    def session(self):
        if "session" not in self._opened:
            if not (self.out / DB_NAME).is_file():
                raise NpumagicError(f"{self.out}: no history here (the output directory %%npuprofile wrote its runs "
                                    "to); give a profiler output path, or start the server with --out DIR")
            from .session import Session

            self._opened["session"] = Session(self.out)
        return self._opened["session"]

    @property
    def runs(self):
        return self.session.runs

    def has_history(self) -> bool:
        return (self.out / DB_NAME).is_file()

    def check(self, ref: str) -> Path:
        path = self.roots.check(ref, self.client)
        if not path.exists():
            raise TraceError(Path(ref).expanduser(), "no such file or directory")
        return path

    def label(self, ref: str) -> str:
        return str(Path(ref).expanduser())

    def destination(self, ref: str) -> Path:
        """A file the server writes: in its output directory (a relative name is taken there), nowhere else."""
        out = self.out.expanduser().resolve()
        path = (out / Path(ref).expanduser()).resolve()
        if path == out or not path.is_relative_to(out):
            raise NpumagicError(f"{ref}: the server writes files only in its output directory {out}")
        out.mkdir(parents=True, exist_ok=True)
        return super().destination(str(path))

    def unknown(self, ref: str) -> Exception | None:
        try:
            self.session.runs.resolve(ref)  # no history here, or an unknown run listing the known ones
        except NpumagicError as exc:
            return exc
        return None


def _analysis_text(result) -> str:
    from .render.tables import format_kernels, format_ranks, format_steps, kernel_caption, rank_caption
    from .render.text import summary_headline

    summary = result.summary
    steps, steps_left = _rows(summary.steps, "steps")
    kernels = format_kernels(_inert(summary.kernels), result.top, _inert(kernel_caption(summary)))  # "top N of M"
    parts = [_inert(f"{result.label}: {summary_headline(summary)}", cut=2 * TEXT_CHARS),
             format_steps(steps).to_text(), steps_left, kernels.to_text()]
    if len(summary.ranks) > 1:
        ranks, ranks_left = _rows(summary.ranks, "ranks")
        parts += [format_ranks(_inert(ranks), _inert(rank_caption(summary))).to_text(), ranks_left]
    parts += ["checklist:", str(_inert(result.verdict))]
    return "\n".join(filter(None, parts))


def _advice_text(result) -> str:
    advice = result.advice
    shown = _inert(dataclasses.replace(advice, findings=advice.findings[:FINDINGS]))
    left = len(advice) - len(shown)
    return str(shown) + (f"\n({left} more findings left out; the JSON has them all)" if left > 0 else "")


def _comparison_text(result) -> str:
    cmp = result.comparison
    kernels, left = _rows(cmp.kernels, "kernels")
    # a diff keeps its lines (each one inert, after its +/- mark); every other string is one line
    diffs = {_inert(k): "\n".join(_inert(line) for line in diff.splitlines()) for k, diff in cmp.diffs.items()}
    shown = dataclasses.replace(_inert(dataclasses.replace(cmp, kernels=kernels, diffs={})), diffs=diffs)
    from .calibration import fix_line  # fix=RULE: the predicted saving against the achieved one

    fixed = fix_line(result.verification, result.kept).strip()
    from .analysis.compare_parts import parts_text  # by_region / by_module: each line inert

    parts = "".join("\n\n" + "\n".join(_inert(line) for line in parts_text(p).splitlines()) for p in result.parts)
    return str(shown) + (f"\n{left}" if left else "") + (f"\n\n{_inert(fixed)}" if fixed else "") + parts


def _steps_text(result) -> str:
    from .analysis.finding import plural
    from .render.tables import format_steps

    shown, left = _rows(result.frame, "steps")
    return "\n".join(filter(None, [f"{_inert(result.label)}: {plural(len(result.frame), 'step', 'steps')}",
                                   format_steps(shown).to_text(), left]))


def _runs_text(result) -> str:
    from .render.tables import format_runs

    table = result.table
    shown, left = _rows(table, "older runs", tail=True)
    text = format_runs(_inert(shown)).to_text() if len(table) else f"no runs in {_inert(result.out)}"
    return "\n".join(filter(None, [text, left]))


def _export_text(result) -> str:
    # render_markdown makes each string of a run one inert Markdown line (md); the cell source
    # keeps its lines inside a fence no line of it can close
    return result.text()


def _plain_text(result) -> str:
    """A command's text, each line of it inert (a command without a compact form of its own)."""
    return "\n".join(_inert(line) for line in result.text().splitlines())


# each command's answer in compact text: tables cut to their top rows, strings from traces inert
PRESENT = {"analyze": _analysis_text, "advise": _advice_text, "compare": _comparison_text, "steps": _steps_text,
           "runs": _runs_text, "export": _export_text}


def _described(arg) -> inspect.Parameter:
    """The argument's parameter, its help as the description the tool's schema gives it."""
    parameter = arg.parameter()
    return parameter.replace(annotation=Annotated[parameter.annotation, Field(description=arg.help)])


def _command_tool(command: Command, profiles: Profiles) -> Callable[..., CallToolResult]:
    """The tool of ``command``: its arguments as the tool's parameters, its answer the compact
    text and the JSON document."""
    present = PRESENT.get(command.name, _plain_text)

    def call(ctx: Context, **values: Any) -> CallToolResult:
        result = command.run(profiles.for_client(Roots.of_client(ctx)), **values)
        return _answer(present(result), result.to_dict())

    params = [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)]
    params += [_described(arg) for arg in command.args]
    call.__signature__ = inspect.Signature(params, return_annotation=CallToolResult)
    call.__annotations__ = {**{p.name: p.annotation for p in params}, "return": CallToolResult}
    call.__name__ = call.__qualname__ = command.name
    call.__doc__ = command.description
    return _tool(call)


def build_server(out: str | Path = "npumagic_runs", roots: list[str | Path] | None = None) -> MCPServer:
    """The server: one tool per command of :data:`~npumagic.commands.COMMANDS`, over the runs of
    ``out`` and the profiler output paths below ``roots`` (default the working directory and
    ``out``; see :class:`Roots`)."""
    from . import __version__

    profiles = Profiles(out, roots)
    server = MCPServer("npumagic", version=__version__, instructions=INSTRUCTIONS)
    for command in COMMANDS:
        server.tool(name=command.name, description=command.description)(_command_tool(command, profiles))
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
