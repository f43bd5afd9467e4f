"""``npumagic mcp``: the CLI's analyses as a Model Context Protocol server over stdio, for coding
assistants (the official ``mcp`` SDK, ``pip install 'npumagic[mcp]'``).

Each tool mirrors a command (``runs``, ``analyze``, ``advise``, ``compare``, the step table of
``%npusteps`` and ``export``'s troubleshooting log) and answers in compact text a model reads
within a few thousand tokens: tables cut to their top rows, saying how many were left out. The
full JSON document (:mod:`npumagic.jsonout`, as ``--json`` prints it) rides along as the result's
structured content. A target is a profiler output path (checked as the CLI checks it) or the name
of a run in the history of the output directory the server was given (or -1, -2: the latest).
The server reads; the only thing it may write is a summary cached into that history, and it
never runs user code (there is no capture tool)."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, Callable

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent

from . import jsonout
from .errors import NpumagicError, TraceError
from .names import DB_NAME

ROWS = 12  # table rows shown in an answer; the JSON has them all
FINDINGS = 6
BUDGET = 12_000  # characters of text in one answer, about 3000 tokens

INSTRUCTIONS = ("npumagic analyses PyTorch profiler outputs (torch.profiler/Kineto traces, torch_npu exports) and "
                "the runs its IPython magics recorded. Start with analyze (step table, top kernels, the checklist "
                "verdict naming the bottleneck), then advise for ranked fixes; compare says whether a change helped "
                "beyond noise. Times are milliseconds in the text, microseconds (_us) in the JSON.")


def _answer(text: str, doc: dict[str, Any]) -> CallToolResult:
    if len(text) > BUDGET:
        cut = text[:BUDGET].rsplit("\n", 1)[0]
        text = f"{cut}\n... ({text.count(chr(10)) - cut.count(chr(10))} more lines left out; the JSON has them all)"
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=doc)


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
        except (NpumagicError, ValueError, OSError) as exc:
            raise ToolError(str(exc)) from None

    return call


class Profiles:
    """Where targets are found: paths, and the runs of one output directory's history (opened on
    first use, and only when it holds one: the server creates no history)."""

    def __init__(self, out: str | Path) -> None:
        self.out = Path(out)
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
        return "/" in target or target in (".", "..") or Path(target).expanduser().exists()

    def summary(self, target: str, rank: int | None = None) -> tuple[str, Any, str | None]:
        """(label, Summary, run name or None) of a path or a run."""
        if self.is_path(target):
            path = Path(target).expanduser()
            if not path.exists():
                raise TraceError(path, "no such file or directory")
            from . import parallel

            return str(path), parallel.analyze(path, rank=rank, progress=False), None
        session = self.session()
        name = session.resolve(target)
        summary = session.summary(name)
        if rank is not None:
            if rank not in summary.per_rank:
                raise NpumagicError(f"rank {rank} not in run {name!r}; ranks: {sorted(summary.per_rank) or [0]}")
            summary = summary.per_rank[rank]
        return name, summary, name


def build_server(out: str | Path = "npumagic_runs") -> MCPServer:
    """The server: one tool per CLI command, over the runs of ``out`` and any profiler output path."""
    from . import __version__

    profiles = Profiles(out)
    server = MCPServer("npumagic", version=__version__, instructions=INSTRUCTIONS)

    @server.tool()
    @_tool
    def runs() -> CallToolResult:
        """List the runs recorded in the history (name, when, status, backend, steps, median step, bottleneck, note)."""
        from .render.tables import format_runs

        table = profiles.session().runs.table()
        shown, left = _rows(table, "older runs", tail=True)
        text = format_runs(shown).to_text() if len(table) else f"no runs in {profiles.out}"
        return _answer("\n".join(filter(None, [text, left])), jsonout.runs_doc(table, str(profiles.out)))

    @server.tool()
    @_tool
    def analyze(target: str, rank: int | None = None, top: int = 10) -> CallToolResult:
        """Analyze a profiler output path or a recorded run (name, or -1 for the latest): step times, top kernels,
        the rank table of a multi-rank job and the checklist verdict naming the bottleneck."""
        from .analysis.checklist import checklist
        from .render.tables import format_kernels, format_ranks, format_steps, kernel_caption, rank_caption
        from .render.text import summary_headline

        label, summary, _ = profiles.summary(target, rank)
        verdict = checklist(summary)
        steps, steps_left = _rows(summary.steps, "steps")
        parts = [f"{label}: {summary_headline(summary)}", format_steps(steps).to_text(), steps_left,
                 format_kernels(summary.kernels, top, kernel_caption(summary)).to_text()]  # it says "top N of M" itself
        if len(summary.ranks) > 1:
            ranks, ranks_left = _rows(summary.ranks, "ranks")
            parts += [format_ranks(ranks, rank_caption(summary)).to_text(), ranks_left]
        parts += ["checklist:", str(verdict)]
        return _answer("\n".join(filter(None, parts)), jsonout.analyze_doc(summary, verdict, label, top))

    @server.tool()
    @_tool
    def advise(target: str, rank: int | None = None, every_rank: bool = False) -> CallToolResult:
        """Ranked findings of a profiler output path or a recorded run, each with its evidence and the fix to try
        next; every_rank: every rank of a multi-rank job, and the low-severity findings."""
        from .analysis.advice import advise_run

        label, summary, name = profiles.summary(target, rank)
        if name is not None:
            advice = profiles.session().advise(name, every_rank=every_rank, low=every_rank)
        else:
            advice = advise_run(summary, label, every_rank=every_rank, low=every_rank)
        shown = dataclasses.replace(advice, findings=advice.findings[:FINDINGS])
        left = len(advice) - len(shown)
        text = str(shown) + (f"\n({left} more findings left out; the JSON has them all)" if left > 0 else "")
        return _answer(text, jsonout.advice_doc(advice, label))

    @server.tool()
    @_tool
    def compare(a: str, b: str) -> CallToolResult:
        """Compare run or path B against the reference A: whether B's step time differs beyond noise (speedup,
        95% CI, p-value), the component that explains it, and the kernels that changed most."""
        from .analysis.compare import compare as compare_summaries

        label_a, sa, name_a = profiles.summary(a)
        label_b, sb, name_b = profiles.summary(b)
        if name_a is not None and name_b is not None:  # two runs: with their history's run-to-run noise
            cmp = profiles.session().compare(name_a, name_b)
        else:
            short_a, short_b = Path(label_a).name, Path(label_b).name
            if short_a == short_b:
                short_a, short_b = label_a, label_b
            cmp = compare_summaries(sa, sb, short_a, short_b)
        kernels, left = _rows(cmp.kernels, "kernels")
        text = str(dataclasses.replace(cmp, kernels=kernels)) + (f"\n{left}" if left else "")
        return _answer(text, jsonout.comparison_doc(cmp, label_a, label_b))

    @server.tool()
    @_tool
    def steps(target: str, first: int | None = None, last: int | None = None, rank: int | None = None) -> CallToolResult:
        """The per-step table (wall, compute, communication, idle, data-loading time, device busy) of a path or run,
        for the steps first..last (ids as in the step column; default all)."""
        from .render.tables import format_steps

        label, summary, _ = profiles.summary(target, rank)
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
        return _answer("\n".join(filter(None, [f"{label}: {len(frame)} steps", format_steps(shown).to_text(), left])),
                       doc)

    @server.tool()
    @_tool
    def export() -> CallToolResult:
        """The troubleshooting log of the history: each run's verdict, findings and the user's note, as Markdown."""
        from .render.export import render_markdown

        runs = profiles.session().runs.records()
        return _answer(render_markdown(runs), jsonout.export_doc(runs, str(profiles.out)))

    return server


def serve(out: str | Path) -> None:
    """Serve over stdin/stdout until the client closes them."""
    from .commands import SHELL

    SHELL.set("cli")  # the assistant's user runs commands, not magics
    build_server(out).run("stdio")


if __name__ == "__main__":  # python -m npumagic.mcp_server [OUT]
    import sys

    serve(sys.argv[1] if len(sys.argv) > 1 else "npumagic_runs")
