"""Figures and tables for analysis objects. Takes Trace/Summary/Verdict, returns figures or
strings; never parses a trace or computes a metric itself. Uses matplotlib's object API only."""

from .charts import plot_comm, plot_kernels, plot_memory, plot_step_breakdown
from .report import CompareReport, FigureReport, KernelHistory, RunReport
from .timeline import TimelineArtists, plot_timeline, timeline_figure
from .views import TRACE_VIEWS, VIEWS, build_view, render_views

__all__ = ["TRACE_VIEWS", "VIEWS", "CompareReport", "FigureReport", "KernelHistory", "RunReport", "TimelineArtists", "build_view", "plot_comm", "plot_kernels",
           "plot_memory", "plot_step_breakdown", "plot_timeline", "render_views", "timeline_figure"]
