"""The named views (%npushow, ``npumagic show``, the report under %%npuprofile) and how a
figure becomes PNG or SVG bytes. The same functions serve the magics and the CLI."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, replace
from html import escape as html_escape
from pathlib import Path
from typing import Callable

from matplotlib.figure import Figure

from ..analysis.summary import Summary
from ..analysis.schema import Trace
from ..names import file_stem
from ..safeio import write_atomic
from .charts import MemoryRead, comm_figure, kernels_figure, matrix_figure, memory_figure, steps_figure
from .tables import Table, format_allocators
from .icicle import PLACE_VIEWS, place_view
from .timeline import timeline_figure

VIEWS = ("timeline", "steps", "kernels", "memory", "comm", "matrix", "regions", "modules")
# drawn from events; the others from the Summary alone
TRACE_VIEWS = frozenset({"timeline", "comm", "regions", "modules"})
TOP_KERNELS = 8
TOP_ALLOCATORS = 10  # rows of the table under the memory figure


def build_view(view: str, trace: Trace | None, summary: Summary, title: str = "", memory: MemoryRead | None = None,
               **options) -> Figure:
    """The Figure of one view of a run (``trace`` may be None for views not in TRACE_VIEWS;
    ``memory``: the run's memory records for the memory view, read again from its output)."""
    if trace is None and view in TRACE_VIEWS:
        raise ValueError(f"the {view} view needs the run's trace files")
    if view in PLACE_VIEWS:
        return place_view(view, trace, summary, title)[0]
    if view == "timeline":
        top = summary.kernels["name"].astype(str).head(TOP_KERNELS).tolist() if summary.meta.get("device_mode") else []
        return timeline_figure(trace, summary.meta.get("rank"), top_kernels=top, title=title or None, **options)
    builders: dict[str, Callable[[], Figure]] = {
        "steps": lambda: steps_figure(summary, title),
        "kernels": lambda: kernels_figure(summary, title=title),
        "memory": lambda: memory_figure(summary, title, memory),
        "comm": lambda: comm_figure(trace, title),
        "matrix": lambda: matrix_figure(summary, title),
    }
    if view not in builders:
        raise ValueError(f"unknown view {view!r}; views: {', '.join(VIEWS)}")
    return builders[view]()


# A figure is laid out for CSS pixels (DISPLAY_DPI per inch, so 11 inches fill a 1100 px cell) and
# encoded with twice as many pixels, so lines and 8 pt labels stay sharp on high-DPI screens.
DISPLAY_DPI = 100
PIXEL_RATIO = 2


def figure_bytes(fig: Figure, fmt: str = "png", dpi: int = DISPLAY_DPI * PIXEL_RATIO) -> bytes:
    """The figure encoded as ``fmt`` (png, svg, pdf); PNGs at ``dpi`` (2x the display size)."""
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi)
    return buf.getvalue()


def display_width(fig: Figure) -> int:
    """The width the figure is laid out for, in CSS pixels."""
    return int(round(fig.get_figwidth() * DISPLAY_DPI))


@dataclass(frozen=True)
class RenderedFigure:
    """One drawn view: its bytes, their format, the file they were saved to (if any) and the
    CSS width it is shown at (PNGs carry twice as many pixels)."""

    view: str
    data: bytes
    fmt: str = "png"
    path: Path | None = None
    width: int | None = None
    table: Table | None = None  # shown under the figure (the memory view's top allocators)
    note: str = ""  # one line under the figure (what it could not show)

    @classmethod
    def of(cls, view: str, fig: Figure, fmt: str = "png", path: Path | None = None) -> "RenderedFigure":
        """Encode ``fig`` (and save it to ``path`` when given; unwritable paths are left out)."""
        data = figure_bytes(fig, fmt)
        if path is not None:
            try:
                write_atomic(path, data)  # a link planted at the name is replaced, not written through
            except OSError:
                path = None
        return cls(view, data, fmt, path, display_width(fig))

    def text(self) -> str:
        """The note and the table under the figure, as text ("" where there are none)."""
        return "\n".join(([self.note] if self.note else []) + ([self.table.to_text()] if self.table is not None else []))

    def html(self) -> str:
        """The figure, then its note and table."""
        under = (f"<p style='color:#777;margin:0'>{html_escape(self.note)}</p>" if self.note else "") \
            + (self.table._repr_html_() if self.table is not None else "")
        return self._image_html() + (("\n" + under) if under else "")

    def _image_html(self) -> str:
        style = "max-width:100%;height:auto;display:block"
        if self.fmt == "svg":
            text = self.data.decode("utf-8")
            start = text.find("<svg")
            return f"<div style='max-width:100%;overflow:hidden'>{text[start:] if start >= 0 else text}</div>"
        import base64

        width = f" width='{self.width}'" if self.width else ""
        return (f"<img alt='{self.view}'{width} style='{style}' "
                f"src='data:image/png;base64,{base64.b64encode(self.data).decode()}'/>")


def render_views(views: list[str], trace: Trace | None, summary: Summary, save_dir: Path | None, prefix: str,
                 fmt: str = "png", rank: int | None = None, memory: MemoryRead | None = None,
                 **options) -> list[RenderedFigure]:
    """Draw ``views`` (``rank``: the rank the user asked for, named in the file) and, when ``save_dir`` is given, save each there as
    ``{prefix}_{view}{suffix}.{fmt}``, the suffix naming the rank and timeline options (so a
    zoomed or other-rank view never overwrites the default one). ``memory``: see :func:`build_view`;
    the memory figure then carries the top allocators table, or the line saying why it has none."""
    out = []
    for view in views:
        shown = options if view == "timeline" else {}
        under = None
        if view in PLACE_VIEWS and trace is not None:  # the icicle, and its table and note under it
            fig, *under = place_view(view, trace, summary, f"{prefix}: {view}")
        else:
            fig = build_view(view, trace, summary, title=f"{prefix}: {view}", memory=memory, **shown)
        path = None
        if save_dir is not None:
            path = save_dir / f"{file_stem(prefix)}_{view}{figure_suffix(rank, shown)}.{fmt}"
        drawn = RenderedFigure.of(view, fig, fmt, path)
        if view == "memory" and memory is not None:
            drawn = replace(drawn, table=allocators_table(memory), note=memory.missing)
        if under:
            drawn = replace(drawn, table=under[0], note=under[1])
        out.append(drawn)
    return out


def allocators_table(memory: MemoryRead) -> Table | None:
    """The top allocators under the memory figure (None where no allocation was recorded)."""
    view = memory.view
    if view is None or view.operators.empty:
        return None
    read = f" ({Path(str(view.read)).name})" if view.read else ""
    return format_allocators(view.operators, TOP_ALLOCATORS, f"top allocators by bytes on {view.device}{read}")


def figure_suffix(rank: int | None, options: dict) -> str:
    """``_rank1_steps3-4_zoom10-20_lanes-Stream`` for the options that change what a view shows."""
    parts = [] if rank is None else [f"rank{rank}"]
    if options.get("steps"):
        parts.append("steps{}-{}".format(*options["steps"]))
    if options.get("window"):
        parts.append("zoom{:g}-{:g}".format(*options["window"]))
    if options.get("lanes"):
        parts.append("lanes-" + "+".join(re.sub(r"[^\w.-]", "", x) for x in options["lanes"]))
    return "".join("_" + p for p in parts)
