"""Session: one per kernel, the one object the magics, the CLI and the MCP server hold. It owns the
kernel's named runs (``.runs``, :mod:`npumagic.named_runs`: names, baseline, summaries,
comparisons) and the recorder that adds to them (``.recorder``, :mod:`npumagic.recorder`: capture,
import, analysis); callers use those two directly. What needs both, or the output directory, is
here: a run's figures and its advice with its record's facts."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from . import analysis, run_files
from .analysis.advice import Advice, advise_run
from .analysis.compare import Comparison
from .named_runs import NamedRuns
from .names import file_stem
from .recorder import Recorder
from .records import Run

if TYPE_CHECKING:
    from .render.views import RenderedFigure


class Session:
    """One per kernel: the runs of the history in ``output_dir`` (:class:`NamedRuns`) and what
    records new ones (:class:`Recorder`, with the backend choice, made once)."""

    def __init__(self, output_dir: str | Path = "npumagic_runs", backend: str | None = None) -> None:
        self.output_dir = Path(output_dir).resolve()
        self.runs = NamedRuns(self.output_dir)
        self.store = self.runs.store
        self.recorder = Recorder(self.runs, backend)

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
        from .commands.memory import figure_records
        from .commands.places import Places
        from .render.views import TRACE_VIEWS, render_views

        needs_trace = rank is not None or bool(TRACE_VIEWS.intersection(views))
        trace = self.runs.trace(name) if needs_trace else None  # the rest is in the history
        summary = self.runs.summary(name) if rank is None else analysis.summarize(trace, rank=rank)
        memory = figure_records(Places(runs=self.runs), name, trace, summary) if "memory" in views else None
        return render_views(views, trace, summary, self.writable_figure_dir(self.store.get(name)), name,
                            "svg" if svg else "png", rank=rank, memory=memory,
                            **{k: v for k, v in options.items() if v is not None})

    def outcome_figures(self, outcome, views: list[str], fmt: str = "png") -> list["RenderedFigure"]:
        """The figures under a run just recorded (``outcome``: a RunOutcome), saved beside it; its
        memory figure drawn from its memory records as :meth:`figures` draws it."""
        from .commands.memory import figure_records
        from .commands.places import Places
        from .render.views import render_views

        name = outcome.run.name
        memory = (figure_records(Places(runs=self.runs), name, outcome.trace, outcome.summary)
                  if "memory" in views else None)
        return render_views(views, outcome.trace, outcome.summary, self.writable_figure_dir(outcome.run), name, fmt,
                            memory=memory)

    def advise(self, name: str, every_rank: bool = False, low: bool = True) -> Advice:
        """Findings of a run, most important first (see :func:`~npumagic.analysis.advice.advise_run`)."""
        return advise_run(self.runs.summary(name), name, every_rank=every_rank, low=low,
                          facts=self.runs.facts(name))

