"""``%npushow RUN --regions`` / ``--modules``: the region or module tree of a run as an icicle
(one row per tree depth, each block as wide as its time per step, its children under it) and the
table under it (median per step: calls, host ms, device ms, self device ms).

The width is the device time launched inside a block where the run has device work, else its host
time (a CPU run); the title says which. Readable at any depth: rows shrink to a capped figure
height, and past :data:`MAX_ROWS` the deeper levels are summed into the last row; siblings too
narrow to see are drawn as one grey block; a label is drawn only where it fits, cut in the middle.
Modules' forward and backward are two icicles side by side, in two colours."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .tables import Column, Table, shorten
from .titles import wrap_title

PLACE_VIEWS = ("regions", "modules")
FIGURE_WIDTH_IN = 11.0
MAX_ROWS = 40  # tree depths drawn; deeper levels are summed into the last row
ROWS_HEIGHT_IN = 8.0  # the rows' height at most: more rows get thinner rows
ROW_IN = (0.16, 0.34)  # a row's height, at least (a 7 pt label still fits) and at most
MIN_SHARE = 0.002  # a block narrower than this share of the whole is merged with its narrow siblings
FONT_PT = 7.0
CHAR_IN = 0.62 * FONT_PT / 72  # about the width of one character of the labels (a little over)
COLORS = {"region": ("#4c8fc9", "#9cc3e6"), "forward": ("#4c8fc9", "#9cc3e6"), "backward": ("#e0803a", "#f2bb8e"), "": ("#c7c7c7", "#c7c7c7"),
          "torch": ("#8f8fb8", "#bdbdd8")}
MERGED = "#e4e4e4"


@dataclass(frozen=True)
class Block:
    """One drawn block: its row (tree depth), left edge and width in ms, label, and colour."""

    depth: int
    left: float
    width: float
    name: str
    color: str
    value: float


def place_table(view: str, trace, rank: int | None):
    """The :class:`~npumagic.analysis.regions.Regions` or :class:`~npumagic.analysis.modules.Modules`
    of one rank of ``trace`` (default the lowest)."""
    if view == "regions":
        from ..analysis.regions import regions

        return regions(trace.events, trace.steps, rank, warn=False)
    from ..analysis.modules import modules, sequence_files

    chosen = rank if rank is not None else (int(trace.events["rank"].min()) if len(trace.events) else None)
    return modules(trace.events, trace.steps, sequence_files(trace.meta, chosen), chosen, warn=False)


def missing(view: str) -> str:
    """What to record where a run has no regions (modules)."""
    from ..commands.modules import record_modules
    from ..commands.regions import RECORD_REGIONS

    return RECORD_REGIONS if view == "regions" else record_modules()


def measure(table) -> tuple[str, str]:
    """(column the width is read from, what it is called in the title)."""
    if table.has_device:
        return "device_ms", "device time launched inside, ms per step (median)"
    return "host_ms", "host time, ms per step (median; no device work recorded: a CPU run)"


def place_view(view: str, trace, summary, title: str) -> tuple[Figure, Table | None, str]:
    """The icicle of ``view`` for the rank of ``summary``, the table under it, and one line (what to
    record where the run has none; why backward is missing; what was skipped)."""
    table = place_table(view, trace, summary.meta.get("rank"))
    if table.empty:
        said = missing(view)
        return _message_figure(title, f"no {view} recorded"), None, said
    notes = [getattr(table, "note", None) or "", _only_torch(table, view)]
    if table.skipped:
        notes.append("skipped: " + ", ".join(f"{n} {why}" for why, n in table.skipped.items()))
    return icicle_figure(table, title), format_places(table, view), "; ".join(n for n in notes if n)


def _only_torch(table, view: str) -> str:
    """Where every region recorded is one torch writes itself: what to record for the user's own."""
    from ..analysis.regions import OUTSIDE, torch_own

    names = table.median.loc[table.median["name"] != OUTSIDE, "name"].astype(str)
    if view != "regions" or not len(names) or not all(torch_own(n) for n in names):
        return ""
    return "only torch's own annotations recorded; " + missing(view).replace("no user annotations recorded: ", "")


def ordered(median: pd.DataFrame) -> pd.DataFrame:
    """Tree order: forward before backward, each parent before its children, outside last."""
    from ..commands.regions import _ordered

    return _ordered(median)


def format_places(table, view: str) -> Table:
    """The median table in tree order: name indented by depth, pass, calls, host, device, self device."""
    from ..analysis.regions import torch_own
    from ..commands.regions import TORCH_MARK

    rows = ordered(table.median).copy()
    rows["shown"] = ["  " * int(d) + str(n) + TORCH_MARK * (view == "regions" and torch_own(n))
                     for d, n in zip(rows["depth"], rows["name"])]
    cols = [Column("shown", "module" if view == "modules" else "region", "text")]
    if "pass" in rows:
        cols.append(Column("pass", "pass", "text"))
    cols += [Column("calls", "calls", fmt=_calls), Column("host_ms", "host (ms)", "float")]
    if table.has_device:
        cols += [Column("device_ms", "device (ms)", "float"), Column("self_device_ms", "self device (ms)", "float")]
    else:
        cols.append(Column("self_host_ms", "self host (ms)", "float"))
    steps = table.per_step["step"].nunique()
    return Table(rows, cols, f"{view}: median of {steps} step{'s' if steps != 1 else ''}")


def _calls(value, row) -> str:
    return "–" if value != value else f"{float(value):g}"  # a median of call counts may fall between two


def blocks(table) -> tuple[list[Block], list[tuple[str, float, float]], int]:
    """The blocks of ``table``'s icicle, each part's (pass, left, right) span, and the rows drawn."""
    from ..analysis.regions import OUTSIDE

    column, _ = measure(table)
    med = table.median.copy()
    med["value"] = pd.to_numeric(med[column], errors="coerce").fillna(0.0).clip(lower=0.0)
    med["part"] = med["pass"].astype(str) if "pass" in med else np.where(med["name"] == OUTSIDE, "", "region")
    outside = med[med["part"] == ""]
    inside = med[med["part"] != ""]
    parts = [p for p in ("region", "forward", "backward") if (inside["part"] == p).any()]
    roots_value = {p: float(inside.loc[(inside["part"] == p) & (inside["depth"] == 0), "value"].sum()) for p in parts}
    rest = float(outside["value"].sum())
    if "backward" in parts:  # the step's time outside every forward span holds the backward too
        rest = max(rest - roots_value["backward"], 0.0)
    total = sum(roots_value.values()) + rest
    if total <= 0:
        return [], [], 0
    out: list[Block] = []
    spans = []
    left = 0.0
    for part in parts:
        rows = inside[inside["part"] == part]
        children: dict[tuple[str, str], list] = {}
        for r in rows.itertuples(index=False):
            path = str(r.path)
            parent = path.rsplit("/", 1)[0] if "/" in path else ""
            children.setdefault((str(r.lane), parent), []).append(r)
        start = left
        roots = sorted((r for (lane, parent), rs in children.items() if parent == "" for r in rs),
                       key=lambda r: -r.value)
        left = _lay(roots, children, left, None, 0, total, part, out)
        spans.append((part, start, left))
    if rest > 0:
        out.append(Block(0, left, rest, str(outside["name"].iloc[0]), COLORS[""][0], rest))
        spans.append(("", left, left + rest))
    rows = 1 + max((b.depth for b in out), default=0)
    return out, spans, rows


def _lay(siblings, children, left: float, room: float | None, depth: int, total: float, part: str,
         out: list[Block]) -> float:
    """Lay ``siblings`` from ``left`` (scaled into ``room`` where their sum exceeds it: medians of
    parts need not add up to the median of the whole) and their children under them; returns
    the right edge."""
    values = np.array([float(r.value) for r in siblings])
    if not len(values):
        return left
    scale = room / values.sum() if room is not None and values.sum() > room > 0 else 1.0
    narrow = values * scale < MIN_SHARE * total
    x = left
    for r, v in zip(siblings, values * scale):
        if v <= 0 or (narrow.sum() > 1 and v < MIN_SHARE * total):
            continue
        if depth >= MAX_ROWS - 1 and _has_children(r, children):
            deeper = _depth_below(r, children)
            out.append(Block(depth, x, v, f"{r.name} (+{deeper} level{'s' if deeper != 1 else ''} below)",
                             _color(part, depth, str(r.name)), v))
        else:
            out.append(Block(depth, x, v, str(r.name), _color(part, depth, str(r.name)), v))
            _lay(sorted(children.get((str(r.lane), str(r.path)), []), key=lambda c: -c.value), children, x, v,
                 depth + 1, total, part, out)
        x += v
    merged = values[narrow] * scale if narrow.sum() > 1 else np.zeros(0)
    if merged.sum() > 0:
        out.append(Block(depth, x, float(merged.sum()), f"{len(merged)} smaller", MERGED, float(merged.sum())))
        x += float(merged.sum())
    return x


def _has_children(r, children) -> bool:
    return bool(children.get((str(r.lane), str(r.path))))


def _depth_below(r, children) -> int:
    kids = children.get((str(r.lane), str(r.path)), [])
    return 1 + max((_depth_below(k, children) for k in kids), default=0) if kids else 0


def _color(part: str, depth: int, name: str) -> str:
    from ..analysis.regions import torch_own

    shades = COLORS["torch"] if part == "region" and torch_own(name) else COLORS[part]
    return shades[depth % 2]


def icicle_figure(table, title: str = "") -> Figure:
    """The icicle of a Regions or Modules table (see the module's doc)."""
    drawn, spans, rows = blocks(table)
    row_in = min(max(ROWS_HEIGHT_IN / max(rows, 1), ROW_IN[0]), ROW_IN[1])
    fig = Figure(figsize=(FIGURE_WIDTH_IN, rows * row_in + 1.3), layout="constrained")
    ax = fig.add_subplot()
    _, said = measure(table)
    ax.set_title(wrap_title(f"{title} — width: {said}" if title else f"width: {said}", FIGURE_WIDTH_IN - 2.5, 9),
                 fontsize=9, loc="left")
    total = max((b.left + b.width for b in drawn), default=1.0)
    if drawn:
        ax.barh([-b.depth for b in drawn], [b.width for b in drawn], left=[b.left for b in drawn], height=0.92,
                color=[b.color for b in drawn], edgecolor="white", linewidth=0.4)
    axes_in = FIGURE_WIDTH_IN - 0.9
    for b in drawn:
        chars = int(b.width / total * axes_in / CHAR_IN) - 1
        text = _label(b, chars)
        if text and row_in >= ROW_IN[0]:
            ax.text(b.left + b.width / 2, -b.depth, text, ha="center", va="center", fontsize=FONT_PT, clip_on=True)
    for part, a, z in spans[1:]:
        ax.axvline(a, color="k", lw=0.8)
    ax.set_xlim(0, total)
    ax.set_ylim(-rows + 0.5, 0.5)
    ax.set_yticks([-d for d in range(rows)], [str(d) for d in range(rows)], fontsize=6 if rows > 20 else 8)
    ax.set_ylabel("depth")
    ax.set_xlabel("ms per step")
    ax.tick_params(axis="x", labelsize=8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    legend = [Patch(color=COLORS[p][0], label=p or "outside") for p, _, _ in spans
              if p != "region" or any(b.color in COLORS["region"] for b in drawn)]
    if any(b.color == MERGED for b in drawn):
        legend.append(Patch(color=MERGED, label="narrow blocks merged"))
    if any(b.color in COLORS["torch"] for b in drawn):
        legend.append(Patch(color=COLORS["torch"][0], label="torch's own annotation"))
    fig.legend(handles=legend, fontsize=7, loc="outside upper right", ncol=len(legend), frameon=False)
    return fig


def _label(b: Block, chars: int) -> str:
    """The block's name and time, or the name cut in the middle, or nothing where 4 characters do not fit."""
    full = f"{b.name} {b.value:.0f}" if b.value >= 100 else f"{b.name} {b.value:.3g}"
    if len(full) <= chars:
        return full
    return shorten(b.name, chars) if chars >= 4 else ""


def _message_figure(title: str, text: str) -> Figure:
    fig = Figure(figsize=(FIGURE_WIDTH_IN, 0.6))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.axis("off")
    ax.text(0.01, 0.5, f"{title}: {text}" if title else text, fontsize=9, va="center", transform=ax.transAxes)
    return fig
