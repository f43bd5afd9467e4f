"""Figures and tables for analysis objects. Takes Trace/Summary/Verdict, returns figures or
strings; never parses a trace or computes a metric itself. Uses matplotlib's object API only.

Attributes load lazily: the tables and text (:mod:`.tables`, :mod:`.text`) are pure pandas, so
analysis objects display themselves without importing matplotlib."""

from __future__ import annotations

import importlib

_WHERE = {
    "plot_comm": "charts", "plot_kernels": "charts", "plot_memory": "charts", "plot_step_breakdown": "charts",
    "CompareReport": "report", "FigureReport": "report", "KernelHistory": "report", "RunReport": "report",
    "TimelineArtists": "timeline", "plot_timeline": "timeline", "timeline_figure": "timeline",
    "TRACE_VIEWS": "views", "VIEWS": "views", "build_view": "views", "render_views": "views",
    "Table": "tables", "Column": "tables",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value
    return value
