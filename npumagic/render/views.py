"""The named views (%npushow, ``npumagic show``, the report under %%npuprofile) and how a
figure becomes PNG or SVG bytes. The same functions serve the magics and the CLI."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from matplotlib.figure import Figure

from ..analysis.metrics import Summary
from ..analysis.schema import Trace
from ..names import file_stem
from .charts import comm_figure, kernels_figure, matrix_figure, memory_figure, steps_figure
from .timeline import timeline_figure

VIEWS = ("timeline", "steps", "kernels", "memory", "comm", "matrix")
TRACE_VIEWS = frozenset({"timeline", "comm"})  # drawn from events; the others from the Summary alone
TOP_KERNELS = 8


def build_view(view: str, trace: Trace | None, summary: Summary, title: str = "", **options) -> Figure:
    """The Figure of one view of a run (``trace`` may be None for views not in TRACE_VIEWS)."""
    if trace is None and view in TRACE_VIEWS:
        raise ValueError(f"the {view} view needs the run's trace files")
    if view == "timeline":
        top = summary.kernels["name"].astype(str).head(TOP_KERNELS).tolist() if summary.meta.get("device_mode") else []
        return timeline_figure(trace, summary.meta.get("rank"), top_kernels=top, title=title or None, **options)
    builders: dict[str, Callable[[], Figure]] = {
        "steps": lambda: steps_figure(summary, title),
        "kernels": lambda: kernels_figure(summary, title=title),
        "memory": lambda: memory_figure(summary, title),
        "comm": lambda: comm_figure(trace, title),
        "matrix": lambda: matrix_figure(summary, title),
    }
    if view not in builders:
        raise ValueError(f"unknown view {view!r}; views: {', '.join(VIEWS)}")
    return builders[view]()


def figure_bytes(fig: Figure, fmt: str = "png", dpi: int = 100) -> bytes:
    """The figure encoded as ``fmt`` (png, svg, pdf)."""
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi)
    return buf.getvalue()


@dataclass(frozen=True)
class RenderedFigure:
    """One drawn view: its bytes, their format, and the file they were saved to (if any)."""

    view: str
    data: bytes
    fmt: str = "png"
    path: Path | None = None

    def html(self) -> str:
        if self.fmt == "svg":
            return self.data.decode("utf-8")
        import base64

        return f"<img alt='{self.view}' src='data:image/png;base64,{base64.b64encode(self.data).decode()}'/>"


def render_views(views: list[str], trace: Trace | None, summary: Summary, save_dir: Path | None, prefix: str,
                 fmt: str = "png", **options) -> list[RenderedFigure]:
    """Draw ``views`` and, when ``save_dir`` is given, save each as ``{prefix}_{view}.{fmt}`` there."""
    out = []
    for view in views:
        fig = build_view(view, trace, summary, title=f"{prefix}: {view}", **(options if view == "timeline" else {}))
        data = figure_bytes(fig, fmt)
        path = None
        if save_dir is not None:
            path = save_dir / f"{file_stem(prefix)}_{view}.{fmt}"
            try:
                path.write_bytes(data)
            except OSError:
                path = None
        out.append(RenderedFigure(view, data, fmt, path))
    return out
