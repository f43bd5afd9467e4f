"""The timeline: one lane per host thread, device stream and communication group, plus a memory
lane and counter lanes (HBM bandwidth, AI Core frequency, host CPU); step windows shaded and labelled, device idle gaps marked with their length, the top
kernels coloured consistently across runs. Drawn by aggregation (merged spans, one
broken_barh per lane and colour, sub-pixel holes closed), so a million events cost about as
much as a few thousand."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ..analysis.intervals import Spans
from ..analysis.schema import DEVICE_WORK, Trace
from ..errors import NpumagicError
from .colors import KIND_COLORS, OTHER, kernel_colors
from .live.lod import GAP_MIN_FRACTION, HOST_KINDS  # the live view's lanes and gaps are these too
from .titles import wrap_title
FIGURE_WIDTH_IN = 11.5  # 1150 CSS pixels: fits a 1200 px notebook cell without scaling down
BAR_HEIGHT = {"annotation": 0.25, "dataloader": 0.8, "sync": 0.8, "host_op": 0.8}
# counter lanes under the memory lane: (counters group, y label), in drawing order
COUNTER_LANES = (("HBM", "HBM GB/s"), ("AI Core Freq", "AI Core MHz"), ("Host", "host CPU %"))
LEVEL_UNITS = ("MHz", "B")  # hold until the next sample; other counters cover the interval before theirs


@dataclass
class TimelineArtists:
    """What :func:`plot_timeline` drew, for callers and tests: lane names top to bottom, one
    shaded span per step, one entry per marked idle gap (lane, start ms, length ms)."""

    lanes: list[str] = field(default_factory=list)
    steps: list = field(default_factory=list)
    gaps: list[tuple[str, float, float]] = field(default_factory=list)
    bars: list = field(default_factory=list)
    colored_kernels: list[str] = field(default_factory=list)
    counter_lanes: list[str] = field(default_factory=list)
    gap_labels: list = field(default_factory=list)


def _lane_order(events: pd.DataFrame) -> list[str]:
    g = events.groupby("lane", observed=True)
    lanes = pd.DataFrame({"device": g["device"].max(), "first": g["ts_ns"].min(),
                          "comm": g["kind"].agg(lambda k: bool((k == "comm").all()))})
    group = np.where(lanes["comm"], 2, np.where(lanes["device"] >= 0, 1, 0))
    return list(lanes.assign(group=group).sort_values(["group", "first"]).index.astype(str))


def _merge_subpixel(start: np.ndarray, end: np.ndarray, pixel_ns: float) -> Spans:
    spans = Spans.union_of(start, np.maximum(end, start + 1))
    if len(spans) < 2:
        return spans
    keep_gap = spans.starts[1:] - spans.ends[:-1] >= pixel_ns  # narrower holes could not be seen
    starts = np.concatenate([spans.starts[:1], spans.starts[1:][keep_gap]])
    ends = np.concatenate([spans.ends[:-1][keep_gap], spans.ends[-1:]])
    return Spans(starts, np.maximum(ends, starts + int(pixel_ns)))  # at least a pixel wide


def _window(mine: Trace, steps: tuple[int, int] | None, window: tuple[float, float] | None):
    """(origin, lo, hi, shown steps) of the view of one rank's trace ``mine``."""
    all_steps = mine.steps
    shown = all_steps if steps is None else all_steps[all_steps["step"].between(*steps)]
    if steps is not None and shown.empty:
        raise ValueError(f"no steps in {steps[0]}..{steps[1]}; the run has steps {all_steps['step'].tolist()}")
    ev = mine.events
    origin = int(all_steps["start_ns"].min()) if len(all_steps) else int(ev["ts_ns"].min()) if len(ev) else 0
    lo = int(shown["start_ns"].min()) if len(shown) else origin
    hi = int(shown["end_ns"].max()) if len(shown) else int((ev["ts_ns"] + ev["dur_ns"]).max()) if len(ev) else origin + 1
    if len(shown) and window is None:  # device work launched in the last step may finish after it
        device = ev[(ev["device"] >= 0) & ev["step"].isin(shown["step"])]
        if len(device):
            hi = max(hi, int((device["ts_ns"] + device["dur_ns"]).max()))
    if window is not None:
        lo, hi = origin + int(window[0] * 1e6), origin + int(window[1] * 1e6)
    return origin, lo, max(hi, lo + 1), shown


def plot_timeline(ax, trace: Trace, rank: int | None = None, *, top_kernels: list[str] = (),
                  steps: tuple[int, int] | None = None, window: tuple[float, float] | None = None,
                  lanes: list[str] | None = None, width_px: int = 1600, min_gap_ms: float | None = None,
                  memory_ax=None, counter_axes: dict | None = None) -> TimelineArtists:
    """Draw one rank of ``trace`` on ``ax``; x is ms from the first step.

    Parameters
    ----------
    top_kernels : kernel names to colour (stable colours); other kernels are grey.
    steps : (first, last) step ids to show. window : (start_ms, end_ms) zoom.
    lanes : substrings; only lanes containing one of them are drawn.
    min_gap_ms : mark device idle gaps at least this long (default 2% of the view).
    memory_ax : an Axes for the allocated/reserved memory lane (shares the time axis).
    counter_axes : {counters group: Axes} for counter lanes (see :data:`COUNTER_LANES`).
    """
    rank = trace.ranks[0] if rank is None and trace.ranks else (rank or 0)
    mine = trace.for_rank(rank)
    origin, lo, hi, shown_steps = _window(mine, steps, window)
    ev = mine.events[mine.events["kind"].isin(HOST_KINDS + DEVICE_WORK)]
    ev = ev[(ev["kind"] != "annotation") | ~ev["name"].astype(str).str.startswith("ProfilerStep#")]
    ev = ev[(ev["ts_ns"] + ev["dur_ns"] >= lo) & (ev["ts_ns"] <= hi)]
    order = _lane_order(ev) if len(ev) else []
    if lanes:
        chosen = [name for name in order if any(sub in name for sub in lanes)]
        if not chosen:
            raise NpumagicError(f"--lanes {','.join(lanes)}: no lane's name holds it; the lanes are "
                                + ", ".join(order[:12]) + (" ..." if len(order) > 12 else ""))
        order = chosen
    pixel_ns = (hi - lo) / width_px
    ms = lambda ns: (np.asarray(ns, dtype=np.float64) - origin) / 1e6  # noqa: E731
    top = set(top_kernels)
    palette = kernel_colors(list(top_kernels))
    out = TimelineArtists(lanes=order, colored_kernels=[k for k in top_kernels])
    for y, lane in enumerate(order):
        on_lane = ev[ev["lane"] == lane]
        for key, group in _colour_groups(on_lane, top):
            start = group["ts_ns"].to_numpy()
            spans = _merge_subpixel(start, start + group["dur_ns"].to_numpy(), pixel_ns)
            kind = group["kind"].iat[0]
            h = BAR_HEIGHT.get(kind, 0.8)
            color = palette[key] if key in top else KIND_COLORS.get(key, OTHER)
            out.bars.append(ax.broken_barh(list(zip(ms(spans.starts), (spans.ends - spans.starts) / 1e6)),
                                           (y - 0.4, h), facecolors=color, linewidth=0, label=key))
        if (on_lane["device"] >= 0).any():
            gaps, labels = _mark_gaps(ax, lane, on_lane, y, (lo, hi), min_gap_ms, ms, width_px)
            out.gaps += gaps
            out.gap_labels += labels
    for i, (_, s) in enumerate(shown_steps.iterrows()):
        out.steps.append(ax.axvspan(float(ms(s["start_ns"])), float(ms(s["end_ns"])), color="0.93" if i % 2 else "0.86",
                                    zorder=0, linewidth=0))
        ax.text(float(ms(s["start_ns"])), -0.55, f" step {s['step']}", fontsize=8, va="bottom", clip_on=True)
    ax.set_yticks(range(len(order)), [_short(name) for name in order], fontsize=8)
    ax.set_ylim(len(order) - 0.4 if order else 1, -0.9)
    ax.set_xlim(float(ms(lo)), float(ms(hi)))
    ax.set_xlabel("time (ms from the first step)")
    _legend(ax, out, top_kernels)
    if memory_ax is not None:
        _memory_lane(memory_ax, mine, lo, hi, ms)
    for group, axis in (counter_axes or {}).items():
        _counter_lane(axis, mine, group, lo, hi, ms)
        out.counter_lanes.append(group)
    return out


def _colour_groups(on_lane: pd.DataFrame, top: set[str]):
    """(colour key, events) per lane: each top kernel alone, then kinds."""
    names = on_lane["name"].astype(str)
    is_top = (on_lane["kind"] == "kernel") & names.isin(top)
    for kind in ("host_op", "annotation", "dataloader", "sync", "memcpy", "comm", "kernel"):
        rest = on_lane[(on_lane["kind"] == kind) & ~is_top]
        if len(rest):
            yield (kind if kind != "kernel" else "other kernels"), rest
    if is_top.any():
        for name, group in on_lane[is_top].groupby(names[is_top], sort=False):
            yield name, group


LABEL_CHAR_PX = 6.5  # an 8 pt character, in the pixels of ``width_px``


def _mark_gaps(ax, lane: str, lane_events: pd.DataFrame, y: int, window: tuple[int, int], min_gap_ms, ms,
               width_px: int) -> tuple[list, list]:
    """Hatch the device idle gaps of one lane within ``window`` (ns); label those wide enough to hold
    their label (labels never overlap each other or run past the window)."""
    lo, hi = window
    busy = lane_events[lane_events["kind"].isin(DEVICE_WORK)]
    if busy.empty:
        return [], []
    start = busy["ts_ns"].to_numpy()
    end = start + busy["dur_ns"].to_numpy()
    holes = Spans.union_of(start, end).gaps(max(lo, int(start.min())), min(hi, int(end.max())))
    threshold = min_gap_ms * 1e6 if min_gap_ms is not None else GAP_MIN_FRACTION * (hi - lo)
    big = (holes.ends - holes.starts) >= threshold
    marks, labels = [], []
    ns_per_px = (hi - lo) / width_px
    last_end = lo
    for s, e in zip(holes.starts[big], holes.ends[big]):
        ax.broken_barh([(float(ms(s)), (e - s) / 1e6)], (y - 0.4, 0.8), facecolors="none", edgecolors="black",
                       hatch="///", linewidth=0.5)
        marks.append((lane, float(ms(s)), (e - s) / 1e6))
        text = f"idle {(e - s) / 1e6:.2f} ms"
        half = (len(text) + 1) * LABEL_CHAR_PX / 2 * ns_per_px
        centre = (s + e) / 2
        if e - s < 2 * half or centre - half < max(lo, last_end) or centre + half > hi:
            continue  # the hatch alone marks it: its label would not fit
        labels.append(ax.text(float(ms(centre)), y + 0.1, text, ha="center", va="center", fontsize=7.5,
                              bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8},
                              clip_on=True))
        last_end = centre + half
    return marks, labels


def _legend(ax, out: TimelineArtists, top_kernels) -> None:
    seen, handles = set(), []
    for bars in out.bars:
        label = bars.get_label()
        if label not in seen:
            seen.add(label)
            handles.append(Patch(facecolor=bars.get_facecolor()[0], label=_short(label, 40)))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)


def _memory_lane(ax, mine: Trace, lo: int, hi: int, ms) -> None:
    mem = mine.memory
    mem = mem[(mem["ts_ns"] >= lo) & (mem["ts_ns"] <= hi)]
    for device, m in mem.groupby(mem["device"].astype(str)):
        ax.step(ms(m["ts_ns"]), m["allocated_bytes"] / 2**20, where="post", label=f"{device} allocated", lw=1)
        if m["reserved_bytes"].fillna(0).gt(0).any():
            ax.step(ms(m["ts_ns"]), m["reserved_bytes"] / 2**20, where="post", label=f"{device} reserved", lw=1, ls="--")
    ax.set_ylabel("MiB", fontsize=8)
    if len(mem):
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    else:
        ax.text(0.5, 0.5, "no memory samples in this window", transform=ax.transAxes, ha="center", va="center", fontsize=8)


def counter_groups(mine: Trace) -> list[str]:
    """The counter lanes one rank's trace ``mine`` has samples for, in :data:`COUNTER_LANES` order."""
    present = set(mine.counters["group"].astype(str))
    return [group for group, _ in COUNTER_LANES if group in present]


def _lines(group: str, counters: pd.DataFrame) -> list[tuple[str, pd.DataFrame, dict]]:
    """(label, samples, line style) of each line a counter lane draws."""
    names = counters["name"].astype(str)
    if group == "HBM":
        bw = counters[counters["unit"].astype(str) == "B/s"]
        bw_names = names[bw.index]
        out = []
        for side in ("Read", "Write"):
            part = bw[bw_names.str.endswith("/" + side)]
            if len(part):
                summed = part.groupby("ts_ns", sort=True)["value"].sum() / 2**30  # all channels
                out.append((f"{side.lower()} (all channels)", summed.reset_index().assign(unit="B/s"), {}))
        return out
    if group == "Host":
        out = []
        for label, name, style in (("process", "Process/CPU", {"lw": 1.2}), ("main thread", "Main thread/CPU", {"lw": 1})):
            part = counters[names == name]
            if len(part):
                out.append((label, part, style))
        workers = counters[names.str.startswith("Worker ")]
        for i, (name, part) in enumerate(workers.groupby(names[workers.index], sort=True)):
            out.append((name.removesuffix("/CPU").lower() if i < 4 else "_nolegend_", part, {"lw": 0.7, "alpha": 0.8}))
        cores = counters[names.str.startswith("Core ")]
        if len(cores):
            mean = cores.groupby("ts_ns", sort=True)["value"].mean().reset_index().assign(unit="%")
            out.append((f"all {cores['name'].nunique()} cores (mean)", mean, {"lw": 1, "ls": "--", "color": "0.3"}))
        return out
    return [(name, part, {}) for name, part in counters.groupby(names, sort=True)]


def _counter_lane(ax, mine: Trace, group: str, lo: int, hi: int, ms) -> None:
    c = mine.counters
    c = c[c["group"].astype(str) == group]
    # keep one sample either side of the view so the lines reach its edges
    for label, samples, style in _lines(group, c):
        samples = samples.sort_values("ts_ns")
        ts = samples["ts_ns"].to_numpy()
        first = max(int(np.searchsorted(ts, lo, side="right")) - 1, 0)
        samples = samples.iloc[first:int(np.searchsorted(ts, hi, side="left")) + 1]
        if samples.empty:
            continue
        where = "post" if str(samples["unit"].iat[0]) in LEVEL_UNITS else "pre"
        ax.step(ms(samples["ts_ns"]), samples["value"], where=where, label=label, **style)
    ax.set_ylabel(dict(COUNTER_LANES).get(group, group), fontsize=8)
    ax.tick_params(labelsize=7)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    if group == "Host":
        ax.set_ylim(bottom=0)


def _short(lane: str, limit: int = 30) -> str:
    return lane if len(lane) <= limit else lane[: limit // 2 - 1] + "…" + lane[-(limit // 2):]


LEGEND_ROW_IN = 0.2  # one 8 pt legend entry, in inches


def timeline_figure(trace: Trace, rank: int | None = None, *, top_kernels: list[str] = (), title: str | None = None,
                    memory: bool | None = None, counters: list[str] | None = None, **options) -> Figure:
    """A standalone timeline Figure (object API, no pyplot state). ``memory`` adds the memory
    lane (default: when the trace has memory samples); ``counters`` names the counter lanes
    to draw (counters groups, default every one of :data:`COUNTER_LANES` with samples)."""
    rank = trace.ranks[0] if rank is None and trace.ranks else (rank or 0)
    mine = trace.for_rank(rank)
    n_lanes = mine.events["lane"].nunique()
    with_memory = bool(memory if memory is not None else len(mine.memory))
    groups = [g for g in counter_groups(mine) if counters is None or g in counters]
    height = 1.3 + 0.32 * max(min(n_lanes, 30), 3) + (1.3 if with_memory else 0) + 1.1 * len(groups)
    fig = Figure(figsize=(FIGURE_WIDTH_IN, height), layout="constrained")
    ratios = [max(n_lanes, 2)] + ([2.2] if with_memory else []) + [1.8] * len(groups)
    axes = list(np.atleast_1d(fig.subplots(len(ratios), 1, sharex=True, height_ratios=ratios)))
    ax = axes.pop(0)
    mem_ax = axes.pop(0) if with_memory else None
    drawn = plot_timeline(ax, mine, rank, top_kernels=top_kernels, memory_ax=mem_ax,
                          counter_axes=dict(zip(groups, axes)), **options)
    # the legend beside the lanes: a few lanes and many coloured kernels need more height than the lanes
    entries = len({bars.get_label() for bars in drawn.bars})
    legend_in = 0.9 + LEGEND_ROW_IN * entries + (1.3 if with_memory else 0) + 1.1 * len(groups)
    if legend_in > height:
        fig.set_size_inches(FIGURE_WIDTH_IN, legend_in)
    if mem_ax is not None or groups:
        ax.set_xlabel("")
        for lower in ([mem_ax] if mem_ax is not None else []) + axes[:-1]:
            lower.set_xlabel("")
        (axes[-1] if axes else mem_ax).set_xlabel("time (ms from the first step)")
    ax.set_title(wrap_title(title or f"{trace.meta.backend or '?'} timeline, rank {rank}", FIGURE_WIDTH_IN, 10),
                 fontsize=10, loc="left")
    return fig
