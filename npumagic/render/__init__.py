"""Figures and tables for analysis objects. Takes Trace/Summary/Verdict, returns figures or
strings; never parses a trace or computes a metric itself. Uses matplotlib's object API only."""

from .report import RunReport
from .timeline import plot_timeline, timeline_figure

__all__ = ["RunReport", "plot_timeline", "timeline_figure"]
