"""The timeline: one lane per host thread, device stream and communication group, plus a memory
lane; step windows shaded and labelled, device idle gaps marked with their length, the top
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
from ..analysis.schema import Trace
from .colors import KIND_COLORS, OTHER, kernel_color

HOST_KINDS = ("host_op", "annotation", "dataloader", "sync")
DEVICE_KINDS = ("kernel", "memcpy", "comm")
GAP_MIN_FRACTION = 0.02  # device idle gaps longer than this share of the view are marked
BAR_HEIGHT = {"annotation": 0.25, "dataloader": 0.8, "sync": 0.8, "host_op": 0.8}


@dataclass
class TimelineArtists:
    """What :func:`plot_timeline` drew, for callers and tests: lane names top to bottom, one
    shaded span per step, one entry per marked idle gap (lane, start ms, length ms)."""

    lanes: list[str] = field(default_factory=list)
    steps: list = field(default_factory=list)
    gaps: list[tuple[str, float, float]] = field(default_factory=list)
    bars: list = field(default_factory=list)
    colored_kernels: list[str] = field(default_factory=list)


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


def _window(trace: Trace, rank: int, steps: tuple[int, int] | None, window: tuple[float, float] | None):
    all_steps = trace.steps[trace.steps["rank"] == rank]
    shown = all_steps if steps is None else all_steps[all_steps["step"].between(*steps)]
    if steps is not None and shown.empty:
        raise ValueError(f"no steps in {steps[0]}..{steps[1]}; the run has steps {all_steps['step'].tolist()}")
    ev = trace.events[trace.events["rank"] == rank]
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
                  memory_ax=None) -> TimelineArtists:
    """Draw one rank of ``trace`` on ``ax``; x is ms from the first step.

    Parameters
    ----------
    top_kernels : kernel names to colour (stable colours); other kernels are grey.
    steps : (first, last) step ids to show. window : (start_ms, end_ms) zoom.
    lanes : substrings; only lanes containing one of them are drawn.
    min_gap_ms : mark device idle gaps at least this long (default 2% of the view).
    memory_ax : an Axes for the allocated/reserved memory lane (shares the time axis).
    """
    rank = trace.ranks[0] if rank is None and trace.ranks else (rank or 0)
    origin, lo, hi, shown_steps = _window(trace, rank, steps, window)
    ev = trace.events[(trace.events["rank"] == rank) & trace.events["kind"].isin(HOST_KINDS + DEVICE_KINDS)]
    ev = ev[(ev["kind"] != "annotation") | ~ev["name"].astype(str).str.startswith("ProfilerStep#")]
    ev = ev[(ev["ts_ns"] + ev["dur_ns"] >= lo) & (ev["ts_ns"] <= hi)]
    order = _lane_order(ev) if len(ev) else []
    if lanes:
        order = [name for name in order if any(sub in name for sub in lanes)]
    pixel_ns = (hi - lo) / width_px
    ms = lambda ns: (np.asarray(ns, dtype=np.float64) - origin) / 1e6  # noqa: E731
    top = set(top_kernels)
    out = TimelineArtists(lanes=order, colored_kernels=[k for k in top_kernels])
    for y, lane in enumerate(order):
        on_lane = ev[ev["lane"] == lane]
        for key, group in _colour_groups(on_lane, top):
            start = group["ts_ns"].to_numpy()
            spans = _merge_subpixel(start, start + group["dur_ns"].to_numpy(), pixel_ns)
            kind = group["kind"].iat[0]
            h = BAR_HEIGHT.get(kind, 0.8)
            color = kernel_color(key) if key in top else KIND_COLORS.get(key, OTHER)
            out.bars.append(ax.broken_barh(list(zip(ms(spans.starts), (spans.ends - spans.starts) / 1e6)),
                                           (y - 0.4, h), facecolors=color, linewidth=0, label=key))
        if (on_lane["device"] >= 0).any():
            out.gaps += _mark_gaps(ax, lane, on_lane, y, lo, hi, min_gap_ms, ms)
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
        _memory_lane(memory_ax, trace, rank, lo, hi, ms)
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


def _mark_gaps(ax, lane: str, lane_events: pd.DataFrame, y: int, lo: int, hi: int, min_gap_ms, ms) -> list:
    busy = lane_events[lane_events["kind"].isin(DEVICE_KINDS)]
    if busy.empty:
        return []
    start = busy["ts_ns"].to_numpy()
    end = start + busy["dur_ns"].to_numpy()
    holes = Spans.union_of(start, end).gaps(max(lo, int(start.min())), min(hi, int(end.max())))
    threshold = min_gap_ms * 1e6 if min_gap_ms is not None else GAP_MIN_FRACTION * (hi - lo)
    big = (holes.ends - holes.starts) >= threshold
    marks = []
    for s, e in zip(holes.starts[big], holes.ends[big]):
        ax.broken_barh([(float(ms(s)), (e - s) / 1e6)], (y - 0.4, 0.8), facecolors="none", edgecolors="black",
                       hatch="///", linewidth=0.5)
        ax.text(float(ms((s + e) / 2)), y + 0.1, f"idle {(e - s) / 1e6:.2f} ms", ha="center", va="center", fontsize=7,
                bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8}, clip_on=True)
        marks.append((lane, float(ms(s)), (e - s) / 1e6))
    return marks


def _legend(ax, out: TimelineArtists, top_kernels) -> None:
    seen, handles = set(), []
    for bars in out.bars:
        label = bars.get_label()
        if label not in seen:
            seen.add(label)
            handles.append(Patch(facecolor=bars.get_facecolor()[0], label=_short(label, 40)))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)


def _memory_lane(ax, trace: Trace, rank: int, lo: int, hi: int, ms) -> None:
    mem = trace.memory[(trace.memory["rank"] == rank)]
    mem = mem[(mem["ts_ns"] >= lo) & (mem["ts_ns"] <= hi)]
    for device, m in mem.groupby(mem["device"].astype(str)):
        ax.step(ms(m["ts_ns"]), m["allocated_bytes"] / 2**20, where="post", label=f"{device} allocated", lw=1)
        if m["reserved_bytes"].fillna(0).gt(0).any():
            ax.step(ms(m["ts_ns"]), m["reserved_bytes"] / 2**20, where="post", label=f"{device} reserved", lw=1, ls="--")
    ax.set_ylabel("MiB", fontsize=8)
    if len(mem):
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    else:
        ax.text(0.5, 0.5, "no memory samples (profile with --memory)", transform=ax.transAxes, ha="center", fontsize=8)


def _short(lane: str, limit: int = 30) -> str:
    return lane if len(lane) <= limit else lane[: limit // 2 - 1] + "…" + lane[-(limit // 2):]


def timeline_figure(trace: Trace, rank: int | None = None, *, top_kernels: list[str] = (), title: str | None = None,
                    memory: bool | None = None, **options) -> Figure:
    """A standalone timeline Figure (object API, no pyplot state). ``memory`` adds the memory
    lane (default: when the trace has memory samples)."""
    rank = trace.ranks[0] if rank is None and trace.ranks else (rank or 0)
    n_lanes = trace.events.loc[trace.events["rank"] == rank, "lane"].nunique()
    with_memory = bool(memory if memory is not None else (trace.memory["rank"] == rank).any())
    height = 1.3 + 0.32 * max(min(n_lanes, 30), 3) + (1.3 if with_memory else 0)
    fig = Figure(figsize=(13, height), layout="constrained")
    if with_memory:
        ax, mem_ax = fig.subplots(2, 1, sharex=True, height_ratios=[max(n_lanes, 2), 2.2])
    else:
        ax, mem_ax = fig.add_subplot(), None
    plot_timeline(ax, trace, rank, top_kernels=top_kernels, memory_ax=mem_ax, **options)
    if mem_ax is not None:
        ax.set_xlabel("")
        mem_ax.set_xlabel("time (ms from the first step)")
    ax.set_title(title or f"{trace.meta.get('backend', '?')} timeline, rank {rank}", fontsize=10, loc="left")
    return fig
