"""Widget or picture: whether this process can show the live timeline, and the display objects
that carry it. A live display still carries the static report as text/html, so a notebook saved
without widget state (nbconvert, GitHub's renderer) shows the PNG timeline instead."""

from __future__ import annotations

import logging
import os
import sys
import threading
from dataclasses import replace
from pathlib import Path

from ...analysis.schema import Trace

log = logging.getLogger(__name__)
STATIC_ENV = "NPUMAGIC_STATIC"  # set to 1: never a widget (e.g. for notebooks meant to be exported)


def widget_frontend() -> bool:
    """True where a widget can be shown: this process is a running Jupyter kernel (ipykernel's
    kernel is up, so comms reach a front end) and anywidget is installed, and ``NPUMAGIC_STATIC``
    is not set. A terminal IPython, a script and ``npumagic show`` get the static figure, as does
    an install without anywidget (a dependency, but ``pip install --no-deps`` leaves it out)."""
    if os.environ.get(STATIC_ENV, "") not in ("", "0"):
        return False
    kernelbase = sys.modules.get("ipykernel.kernelbase")  # imported by every running ipykernel
    if kernelbase is None or not kernelbase.Kernel.initialized():
        return False
    try:
        import anywidget  # noqa: F401
    except ImportError:
        return False
    return True


def timeline_widget(trace: Trace, title: str = "", run: str = ""):
    """A :class:`~.widget.TimelineWidget` over ``trace``, of the history's run ``run`` where it is
    one: its index read from the store beside the run where one matches, else built here. Once the
    first view is answered, on a thread of its own (the view waits for neither): each step's
    critical path is added where the store did not hold it (the widget's lanes grow, and the
    browser asks its view again), then the index is stored there, then what a hover or a click
    reads is made (a reopened index's events frame, the launches the flows are drawn from). What
    that thread is told, or its failure, is said with the widget (``notes``), never as a warning in
    the cell that runs then."""
    from .lod import TimelineIndex
    from .widget import TimelineWidget

    widget = TimelineWidget(TimelineIndex.build(trace, critical_later=True), title=title,
                            source=trace.meta.path or None, run=run)
    if widget.index.critical is None or widget.index.shelf is not None:
        threading.Thread(target=_after_first_view, args=(widget, trace), name=AFTER_FIRST_VIEW, daemon=True).start()
    return widget


AFTER_FIRST_VIEW = "npumagic-timeline-after"  # the thread's name


def _after_first_view(widget, trace: Trace) -> None:
    from .said import said_to

    try:
        with said_to(widget.note):
            if widget.index.add_critical_path(trace):
                widget.grown()
    except Exception as exc:  # noqa: BLE001 - a lane less rather than a traceback from a thread
        log.debug("timeline: the critical path's lane could not be built", exc_info=True)
        widget.note(f"timeline: the critical path's lane could not be built: {type(exc).__name__}: {exc}")
    try:
        widget.index.keep()
    except Exception:  # noqa: BLE001 - the store is a cache: the timeline never fails for it
        log.debug("timeline index not stored", exc_info=True)
    try:  # made now, so that the first hover or click does not wait for them
        widget.index.events  # noqa: B018
        widget.index.launches  # noqa: B018
    except Exception:  # noqa: BLE001 - that hover or click says why instead
        log.debug("timeline: events or launches not made", exc_info=True)


def with_live_timeline(report, trace: Trace, title: str = ""):
    """``report`` (a RunReport or FigureReport) with the live timeline in place of its timeline
    PNG where a widget shows, the PNG kept as its text/html fallback."""
    import ipywidgets

    widget = timeline_widget(trace, title, str(getattr(report.run, "name", report.run) or ""))
    others = [f for f in report.figures if f.view != "timeline"]
    head = replace(report, figures=[])
    parts = [] if not hasattr(head, "_header") else [ipywidgets.HTML(head._repr_html_())]
    parts += [widget] + ([ipywidgets.HTML("\n".join(f.html() for f in others))] if others else [])
    return replace(report, live=widget, live_view=ipywidgets.VBox(parts))


def advice_with_timeline(advice, runs, name: str):
    """``%npuadvise``'s ``advice`` of run ``name`` (of ``runs``, the session's NamedRuns) where a
    widget shows: a click on a finding moves the run's open live view to it, or opens one
    (:mod:`.advice_view`). Unchanged when it has no finding to show."""
    if not advice.findings:
        return advice
    from .advice_view import linked_advice

    return linked_advice(advice, runs.store.get(name).run_dir,
                         lambda: timeline_widget(runs.trace(name), f"{name}: timeline", name))


def timeline(source, *, rank: int | None = None, live: bool | None = None, title: str = "", **static_options):
    """The timeline of a run, a trace, or a profiler output path: a live widget where a widget
    front end is present (``live=None``: :func:`widget_frontend`), else the static figure.

    Parameters
    ----------
    source : a Trace, a RunReport (``r = %%npuprofile ...``), or a path any reader takes.
    rank : the static figure's rank (the widget shows every rank, one group each).
    live : force the widget (True) or the figure (False).
    static_options : the static figure's options (steps, window, lanes), as %npushow's.
    """
    trace = _trace_of(source)
    if live if live is not None else widget_frontend():
        return timeline_widget(trace, title)
    from ..report import FigureReport
    from ..timeline import timeline_figure
    from ..views import RenderedFigure

    figure = RenderedFigure.of("timeline", timeline_figure(trace, rank, title=title or None, **static_options))
    return FigureReport(title or "timeline", [figure])


def _trace_of(source) -> Trace:
    from ...analysis import load
    from ...errors import NpumagicError

    if isinstance(source, Trace):
        return source
    run = getattr(source, "run", None)
    if run is not None and getattr(run, "run_dir", None):
        return load(run.run_dir)
    if isinstance(source, (str, Path)):
        return load(source)
    raise NpumagicError(f"timeline: {type(source).__name__} is not a Trace, a run report or a profiler output path")
