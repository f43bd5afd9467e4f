"""The timeline: one lane per host thread, device stream and communication group, step windows
shaded, device idle gaps marked. Drawn by aggregation (merged spans, one broken_barh per lane),
so a million events cost about as much as a thousand."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..analysis.intervals import Spans
from ..analysis.schema import Trace

KIND_COLORS = {"kernel": "#1f77b4", "comm": "#d62728", "memcpy": "#9467bd", "host_op": "#2ca02c",
               "dataloader": "#ff7f0e", "sync": "#8c564b", "runtime": "#7f7f7f", "python": "#bcbd22"}
DRAWN_KINDS = ("host_op", "dataloader", "sync", "kernel", "memcpy", "comm")
GAP_MIN_FRACTION = 0.02  # device idle gaps longer than this share of the view are marked


def _lane_order(events: pd.DataFrame) -> list[str]:
    lanes = events.groupby("lane", observed=True).agg(device=("device", "max"), first=("ts_ns", "min"),
                                                      comm=("kind", lambda k: (k == "comm").any()))
    lanes = lanes.assign(group=np.where(lanes["comm"], 2, np.where(lanes["device"] >= 0, 1, 0)))
    return list(lanes.sort_values(["group", "first"]).index.astype(str))


def plot_timeline(ax, trace: Trace, rank: int | None = None, window: tuple[float, float] | None = None,
                  width_px: int = 1400) -> dict[str, object]:
    """Draw ``trace`` (one rank) on ``ax``; times in ms relative to the first step.

    Returns the artists by role: ``lanes`` (names), ``steps`` (shaded spans), ``gaps``
    (annotated idle holes on device lanes).
    """
    rank = trace.ranks[0] if rank is None and trace.ranks else (rank or 0)
    ev = trace.events[(trace.events["rank"] == rank) & trace.events["kind"].isin(DRAWN_KINDS)]
    steps = trace.steps[trace.steps["rank"] == rank]
    origin = int(steps["start_ns"].min()) if len(steps) else (int(ev["ts_ns"].min()) if len(ev) else 0)
    lo_ns = origin if window is None else origin + int(window[0] * 1e6)
    hi_ns = (int(steps["end_ns"].max()) if len(steps) else int((ev["ts_ns"] + ev["dur_ns"]).max()) if len(ev) else 1) \
        if window is None else origin + int(window[1] * 1e6)
    if len(ev):  # device work may run past the host's last step
        dev = ev[ev["device"] >= 0]
        if window is None and len(dev):
            hi_ns = max(hi_ns, int((dev["ts_ns"] + dev["dur_ns"]).max()))
    span_ns = max(hi_ns - lo_ns, 1)
    pixel_ns = span_ns / width_px
    ev = ev[(ev["ts_ns"] + ev["dur_ns"] >= lo_ns) & (ev["ts_ns"] <= hi_ns)]
    lanes = _lane_order(ev) if len(ev) else []
    ms = lambda ns: (np.asarray(ns, dtype=np.float64) - origin) / 1e6  # noqa: E731
    out: dict[str, object] = {"lanes": lanes, "steps": [], "gaps": [], "bars": []}
    for y, lane in enumerate(lanes):
        on_lane = ev[ev["lane"] == lane]
        for kind, group in on_lane.groupby("kind", observed=True):
            spans = _merge_subpixel(group, pixel_ns)
            if not len(spans):
                continue
            bars = ax.broken_barh(list(zip(ms(spans.starts), (spans.ends - spans.starts) / 1e6)), (y - 0.4, 0.8),
                                  facecolors=KIND_COLORS.get(str(kind), "grey"), linewidth=0, label=str(kind))
            out["bars"].append(bars)
        if on_lane["device"].max() >= 0 and (on_lane["kind"] != "comm").any():
            out["gaps"] += _mark_gaps(ax, on_lane, y, lo_ns, hi_ns, span_ns, ms)
    for _, s in steps.iterrows():
        shade = ax.axvspan(ms(s["start_ns"]), ms(s["end_ns"]), color="0.9" if len(out["steps"]) % 2 else "0.82",
                           zorder=0, linewidth=0)
        ax.text(float(ms(s["start_ns"])), -0.45, f" step {s['step']}",
                fontsize=8, va="top")
        out["steps"].append(shade)
    ax.set_yticks(range(len(lanes)), [_short(lane) for lane in lanes], fontsize=8)
    ax.set_ylim(-0.7, max(len(lanes), 1) + 0.3)
    ax.set_xlim(float(ms(lo_ns)), float(ms(hi_ns)))
    ax.invert_yaxis()
    ax.set_xlabel("time (ms from the first step)")
    handles = {}
    for bars in out["bars"]:
        handles.setdefault(bars.get_label(), bars)
    if handles:
        ax.legend(handles.values(), handles.keys(), loc="upper right", fontsize=7, ncols=min(len(handles), 6))
    return out


def _merge_subpixel(group: pd.DataFrame, pixel_ns: float) -> Spans:
    start = group["ts_ns"].to_numpy()
    spans = Spans.union_of(start, start + np.maximum(group["dur_ns"].to_numpy(), 1))
    if len(spans) < 2:
        return spans
    # Close holes narrower than a pixel: they could not be seen anyway.
    keep_gap = spans.starts[1:] - spans.ends[:-1] >= pixel_ns
    starts = np.concatenate([spans.starts[:1], spans.starts[1:][keep_gap]])
    ends = np.concatenate([spans.ends[:-1][keep_gap], spans.ends[-1:]])
    widen = np.maximum(ends, starts + int(pixel_ns))  # at least a pixel wide
    return Spans(starts, widen)


def _mark_gaps(ax, lane_events: pd.DataFrame, y: int, lo_ns: int, hi_ns: int, span_ns: int, ms) -> list:
    busy = lane_events[lane_events["kind"].isin(["kernel", "memcpy", "comm"])]
    if busy.empty:
        return []
    start = busy["ts_ns"].to_numpy()
    first, last = int(start.min()), int((start + busy["dur_ns"].to_numpy()).max())
    holes = Spans.union_of(start, start + busy["dur_ns"].to_numpy()).gaps(max(lo_ns, first), min(hi_ns, last))
    big = (holes.ends - holes.starts) >= GAP_MIN_FRACTION * span_ns
    marks = []
    for s, e in zip(holes.starts[big], holes.ends[big]):
        marks.append(ax.annotate("", xy=(float(ms(e)), y), xytext=(float(ms(s)), y),
                                 arrowprops={"arrowstyle": "<->", "color": "black", "lw": 0.8}))
        ax.text(float(ms((s + e) / 2)), y - 0.45, f"idle {(e - s) / 1e6:.2f} ms", ha="center", fontsize=7)
    return marks


def _short(lane: str, limit: int = 28) -> str:
    return lane if len(lane) <= limit else "…" + lane[-(limit - 1):]


def timeline_figure(trace: Trace, rank: int | None = None, window: tuple[float, float] | None = None,
                    title: str | None = None) -> Figure:
    """A standalone timeline Figure (no pyplot state)."""
    rank = trace.ranks[0] if rank is None and trace.ranks else (rank or 0)
    n_lanes = trace.events.loc[trace.events["rank"] == rank, "lane"].nunique()
    fig = Figure(figsize=(12, 1.2 + 0.35 * max(min(n_lanes, 30), 3)), layout="constrained")
    ax = fig.add_subplot()
    plot_timeline(ax, trace, rank, window)
    ax.set_title(title or f"{trace.meta.get('backend', '?')} timeline, rank {rank}", fontsize=10)
    return fig
