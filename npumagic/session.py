"""Session: one per kernel, the one object the magics, the CLI and the MCP server use. It composes
the kernel's named runs (:mod:`npumagic.named_runs`: names, baseline, summaries, comparisons) and
the recorder (:mod:`npumagic.recorder`: capture, import, analysis), and draws their figures."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

import pandas as pd

from . import analysis, run_files
from .analysis.advice import Advice, advise_run
from .analysis.compare import Comparison
from .analysis.summary import Summary
from .capture import CaptureOptions, CaptureResult
from .named_runs import NamedRuns
from .names import file_stem
from .recorder import Recorder, RunOutcome
from .records import Run

if TYPE_CHECKING:
    from .capture.launch import Ended
    from .render.views import RenderedFigure


class Session:
    """One per kernel: the runs of the history in ``output_dir`` (:class:`NamedRuns`) and what
    records new ones (:class:`Recorder`, with the backend choice, made once)."""

    def __init__(self, output_dir: str | Path = "npumagic_runs", backend: str | None = None) -> None:
        self.output_dir = Path(output_dir).resolve()
        self.runs = NamedRuns(self.output_dir)
        self.store = self.runs.store
        self.recorder = Recorder(self.runs, backend)

    @property
    def prefer_backend(self) -> str | None:
        return self.recorder.prefer_backend

    @property
    def scheduler(self) -> str:
        return self.recorder.scheduler

    @scheduler.setter
    def scheduler(self, value: str) -> None:
        self.recorder.scheduler = value

    @property
    def baseline(self) -> str | None:
        return self.runs.baseline

    # -- recording: see Recorder ------------------------------------------------------------------
    def profile(self, body: Callable[[], object], options: CaptureOptions, name: str | None = None,
                source: str = "", arguments: dict | None = None, out: str | Path | None = None,
                replace: bool = False) -> RunOutcome:
        return self.recorder.profile(body, options, name, source, arguments, out, replace)

    def run_command(self, argv: list[str], options: CaptureOptions, name: str | None = None,
                    output=None, forward_interrupt: bool = False) -> tuple[RunOutcome, "Ended"]:
        return self.recorder.run_command(argv, options, name, output, forward_interrupt)

    def record_processes(self, name: str, result: CaptureResult, found: list[dict]) -> RunOutcome:
        return self.recorder.record_processes(name, result, found)

    def load(self, path: str | Path, name: str | None = None, every_rank: bool = False,
             rank: int | None = None) -> RunOutcome:
        return self.recorder.load(path, name, every_rank, rank)

    def settle(self) -> None:
        self.recorder.settle()

    # -- reading: see NamedRuns -------------------------------------------------------------------
    def resolve(self, name: str | None) -> str:
        return self.runs.resolve(name)

    def trace(self, name: str) -> "analysis.Trace":
        return self.runs.trace(name)

    def summary(self, name: str) -> Summary:
        return self.runs.summary(name)

    def compare_pair(self, a: str | None, b: str | None) -> tuple[str, str]:
        return self.runs.compare_pair(a, b)

    def compare(self, a: str, b: str, summary_b: Summary | None = None) -> Comparison:
        return self.runs.compare(a, b, summary_b)

    def kernel_history(self, kernel: str) -> tuple[str, pd.DataFrame]:
        return self.runs.kernel_history(kernel)

    def set_baseline(self, name: str) -> None:
        self.runs.set_baseline(name)

    def note(self, name: str, text: str) -> str | None:
        return self.runs.note(name, text)

    def remove(self, name: str, files: bool = False) -> Run:
        return self.runs.remove(name, files)

    # -- figures and advice -----------------------------------------------------------------------
    def writable_figure_dir(self, run: Run) -> Path | None:
        return run_files.writable_figure_dir(run, self.output_dir)

    def compare_figure(self, comparison: Comparison, fmt: str = "png") -> "RenderedFigure":
        """The comparison chart, saved as ``output_dir/compare_A_vs_B.FMT`` (shown even when the
        output directory cannot be written)."""
        from .render.charts import comparison_figure
        from .render.views import RenderedFigure

        path = self.output_dir / f"compare_{file_stem(comparison.a)}_vs_{file_stem(comparison.b)}.{fmt}"
        return RenderedFigure.of("compare", comparison_figure(comparison), fmt, path)

    def figures(self, name: str, views: list[str], rank: int | None = None, svg: bool = False,
                **options) -> list["RenderedFigure"]:
        """Draw ``views`` of run ``name`` (of one ``rank`` when given) and save them beside the run
        (:func:`~npumagic.run_files.figure_dir`; unsaved, still returned, where that cannot be written)."""
        from .render.views import TRACE_VIEWS, render_views

        needs_trace = rank is not None or bool(TRACE_VIEWS.intersection(views))
        trace = self.trace(name) if needs_trace else None  # the rest is in the history
        summary = self.summary(name) if rank is None else analysis.summarize(trace, rank=rank)
        memory = self._memory_read(name, trace, summary) if "memory" in views else None
        return render_views(views, trace, summary, self.writable_figure_dir(self.store.get(name)), name, "svg" if svg else "png", rank=rank,
                            memory=memory, **{k: v for k, v in options.items() if v is not None})

    def _memory_read(self, name: str, trace, summary: Summary):
        """Run ``name``'s memory records for its memory figure, read again from its profiler output
        as ``npumagic memory RUN`` reads them (the history keeps only PyTorch's pool over time): its
        components and allocations. Where they cannot be read, the line saying so (none where the
        run recorded no memory at all)."""
        from .commands.places import Places
        from .commands.memory import read_records
        from .errors import NpumagicError
        from .render.charts import MemoryRead

        ranks = sorted(trace.ranks if trace is not None else summary.per_rank)
        rank = summary.meta.get("rank")
        try:
            _, records, view = read_records(Places(runs=self.runs), name, ranks.index(rank) if rank in ranks else None)
        except (NpumagicError, OSError) as exc:
            said = "" if summary.memory_timeline.empty else ("PyTorch's pool from the history only; the components and "
                                                             f"the top allocators table need the run's profiler output: {exc}")
            return MemoryRead(missing=said)
        peaks = summary.memory[summary.memory["peak_allocated_bytes"].notna()]  # a run overwritten since, another rank
        if len(peaks) and view.peak_allocated_bytes is not None and not (
                (peaks["device"].astype(str) == str(view.device))
                & ((peaks["peak_allocated_bytes"] - view.peak_allocated_bytes).abs() < 1.0)).any():
            return MemoryRead(missing=f"PyTorch's pool from the history only: the profiler output at {view.read} holds "
                                      f"another peak ({view.device}) than this run's")
        return MemoryRead(records, view)

    def advise(self, name: str, every_rank: bool = False, low: bool = True) -> Advice:
        """Findings of a run, most important first (see :func:`~npumagic.analysis.advice.advise_run`)."""
        return advise_run(self.summary(name), name, every_rank=every_rank, low=low,
                          facts=self.runs.facts(name))

