"""The other views: step breakdown, top kernels, memory over time, communication per rank.
Each ``plot_*`` draws on an Axes it is given and returns what it drew; ``*_figure`` wraps one
in a standalone Figure."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..analysis.intervals import Spans
from ..analysis.summary import Summary
from ..analysis.schema import Trace
from ..analysis.sources.memory import MODULES
from .colors import BREAKDOWN_COLORS, KIND_COLORS, OTHER, kernel_color, kernel_colors
from .tables import history_unit
from .titles import wrap_title

MIB = 2**20
BREAKDOWN = [("computing_us", "computing"), ("comm_not_overlapped_us", "communication (not overlapped)"),
             ("idle_us", "idle")]


def plot_step_breakdown(ax, steps: pd.DataFrame) -> dict:
    """Stacked bars per step (computing, communication not overlapped, idle), the DataLoader
    wait beside them, and the step time as a line: jitter shows as a ragged line."""
    x = np.arange(len(steps))
    bottom = np.zeros(len(steps))
    bars = {}
    for column, label in BREAKDOWN:
        values = steps[column].to_numpy(dtype=float) / 1000 if len(steps) else np.zeros(0)
        bars[column] = ax.bar(x - 0.15, values, 0.6, bottom=bottom, label=label, color=BREAKDOWN_COLORS[column])
        bottom += values
    data = steps["dataloader_us"].to_numpy(dtype=float) / 1000 if len(steps) else np.zeros(0)
    bars["dataloader_us"] = ax.bar(x + 0.3, data, 0.2, label="waiting on DataLoader", color=BREAKDOWN_COLORS["dataloader_us"])
    wall = steps["wall_us"].to_numpy(dtype=float) / 1000 if len(steps) else np.zeros(0)
    line = ax.plot(x, wall, "k.-", lw=1, label="step time")[0]
    ax.set_xticks(x, [str(s) for s in steps["step"]] if len(steps) else [], fontsize=8)
    ax.set_xlabel("step")
    ax.set_ylabel("ms")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    if not len(steps):
        ax.text(0.5, 0.5, "no steps recorded", transform=ax.transAxes, ha="center")
    return {"bars": bars, "line": line, "steps": len(steps)}


def plot_kernels(ax, kernels: pd.DataFrame, top: int = 15, colored: int = 8, unit: str = "total time") -> dict:
    """Horizontal bars of the top kernels by total time, each labelled 'count x mean', so many
    tiny calls stand out next to a few long ones. The first ``colored`` kernels have their
    timeline colours (the timeline colours the same ones); the rest are grey, as there.
    ``unit`` names what the bars measure on the x axis (``self time`` for CPU operators)."""
    shown = kernels.head(top).iloc[::-1]
    y = np.arange(len(shown))
    palette = kernel_colors(kernels["name"].astype(str).head(colored).tolist())
    colors = [palette.get(n, OTHER) for n in shown["name"].astype(str)]
    bars = ax.barh(y, shown["total_us"].to_numpy(dtype=float) / 1000, color=colors)
    labels = []
    for yi, (_, k) in zip(y, shown.iterrows()):
        labels.append(ax.text(float(k["total_us"]) / 1000, yi, f"  {int(k['count']):,} x {k['mean_us']:,.1f} µs",
                              va="center", fontsize=8))
    ax.set_yticks(y, [_short(str(n)) for n in shown["name"]], fontsize=8)
    ax.set_xlabel(f"{unit} (ms); the top {min(colored, len(shown))} in their timeline colours"
                  if len(shown) and colored else f"{unit} (ms)")
    if len(shown):
        ax.set_xlim(0, float(shown["total_us"].max()) / 1000 * 1.35)
    else:
        ax.text(0.5, 0.5, "no kernels recorded", transform=ax.transAxes, ha="center")
    return {"bars": bars, "labels": labels, "names": list(shown["name"].astype(str))[::-1]}


def plot_memory(ax, timeline: pd.DataFrame, origin_ns: int | None = None) -> dict:
    """Allocated and reserved memory over time per device, the allocated peak marked."""
    lines, peaks = [], []
    origin = origin_ns if origin_ns is not None else (int(timeline["ts_ns"].min()) if len(timeline) else 0)
    for device, m in timeline.groupby(timeline["device"].astype(str)):
        t = (m["ts_ns"].to_numpy() - origin) / 1e6
        alloc = m["allocated_bytes"].to_numpy(dtype=float) / 2**20
        if not np.isfinite(alloc).any():  # memory events without totals (an older Kineto): nothing to draw
            continue
        lines.append(ax.step(t, alloc, where="post", label=f"{device} allocated", lw=1)[0])
        reserved = m["reserved_bytes"].to_numpy(dtype=float) / 2**20
        if np.nan_to_num(reserved).any():
            lines.append(ax.step(t, reserved, where="post", label=f"{device} reserved", lw=1, ls="--")[0])
        i = int(np.nanargmax(alloc))
        peaks.append(ax.annotate(f"peak {alloc[i]:,.1f} MiB", (t[i], alloc[i]), xytext=(0, 8), textcoords="offset points",
                                 ha="center", fontsize=8, arrowprops={"arrowstyle": "-", "lw": 0.5}))
    ax.set_xlabel("time (ms from the first step)" if origin_ns is not None else "time (ms)")
    ax.set_ylabel("MiB")
    if lines:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    else:
        ax.text(0.5, 0.5, "no memory samples (profiled without profile_memory)", transform=ax.transAxes, ha="center")
    return {"lines": lines, "peaks": peaks}


def plot_memory_records(ax, records, view, origin_ns: int | None = None) -> dict:
    """One curve per component of ``records`` (a MemoryRecords) over time: torch_npu's pool (PTA)
    allocated and reserved, every other memory_record.csv component and npu_module_mem.csv module
    by the memory it reserves (its allocated memory where it records none), those always at zero
    left out; Kineto's allocated and reserved per device. ``view``'s peak is marked with the
    operator running at it, the device's capacity drawn where known. x: ms from ``origin_ns``."""
    totals = records.totals
    origin = origin_ns if origin_ns is not None else (int(totals["ts_ns"].min()) if len(totals) else 0)
    lines = {}
    for label, part, column, dashed in _memory_series(records, view):
        part = part.dropna(subset=[column]).sort_values("ts_ns", kind="stable")
        y = part[column].to_numpy(dtype=float) / MIB
        if not len(y) or not np.any(y):
            continue
        lines[label] = ax.step((part["ts_ns"].to_numpy() - origin) / 1e6, y, where="post", label=label, lw=1,
                               ls="--" if dashed else "-")[0]
    peak = None
    if view is not None and view.peak_ts_ns is not None:
        x, y = (view.peak_ts_ns - origin) / 1e6, view.peak_allocated_bytes / MIB
        at = f" at {_short(view.peak_operator, 40)}" if view.peak_operator else ""
        ax.plot([x], [y], "o", color="black", ms=4)
        peak = ax.annotate(f"peak {y:,.1f} MiB{at}", (x, y), xytext=(0, 8), textcoords="offset points", ha="center",
                           fontsize=8, arrowprops={"arrowstyle": "-", "lw": 0.5})
    capacity = _capacity(ax, view, lines) if view is not None and view.capacity_bytes else None
    ax.set_xlabel("time (ms from the first step)")
    ax.set_ylabel("MiB")
    if lines:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    else:
        ax.text(0.5, 0.5, "no memory samples", transform=ax.transAxes, ha="center")
    return {"lines": lines, "peak": peak, "capacity": capacity}


CAPACITY_FIT = 1.5  # the capacity is drawn as a line up to this many times the curves' top


def _capacity(ax, view, lines: dict):
    """The device's capacity: a line where it fits above the curves (they keep two thirds of the
    height), else said above the axes' top right, so a 2.5 GiB curve under an 80 GiB capacity keeps
    the y axis fitted to it."""
    cap = view.capacity_bytes
    used = f", peak uses {_share(view.peak_allocated_bytes / cap)}" if view.peak_allocated_bytes else ""
    top = max((np.nanmax(line.get_ydata()) for line in lines.values()), default=0.0) * MIB
    if cap <= CAPACITY_FIT * top:
        return ax.axhline(cap / MIB, color="#888888", ls=":", lw=1, label=f"capacity {cap / 2**30:,.1f} GiB{used}")
    return ax.annotate(f"\u2191 capacity {cap / 2**30:,.1f} GiB, off the scale{used}", (1, 1), xycoords="axes fraction",
                       xytext=(0, 3), textcoords="offset points", ha="right", va="bottom", fontsize=8, color="#555555")


def _share(share: float) -> str:
    return f"{share:.0%}" if share >= 0.005 else "<1%"


def _memory_series(records, view):
    """(label, rows, column, dashed) of each curve of :func:`plot_memory_records`."""
    totals = records.totals
    if not str(records.source).startswith("torch_npu"):  # Kineto, or the history's samples: per device
        pool = totals[totals["component"] == records.pool]
        for device, mine in pool.groupby(pool["device"].astype(str)):
            yield f"{device} allocated", mine, "allocated_bytes", False
            yield f"{device} reserved", mine, "reserved_bytes", True
        return
    mine = totals[totals["device"].astype(str) == str(view.device)] if view is not None and view.device else totals
    files = mine["file"] if "file" in mine else pd.Series("", index=mine.index)
    both = set(mine.loc[files == MODULES, "component"]) & set(mine.loc[files != MODULES, "component"])
    for (file, component), part in mine.groupby([files, mine["component"].astype(str)], sort=False):
        label = f"{component} ({file})" if component in both else component
        if component == records.pool and file != MODULES:
            yield f"{label} allocated", part, "allocated_bytes", False
            yield f"{label} reserved", part, "reserved_bytes", True
        else:
            reserved = part["reserved_bytes"].fillna(0).to_numpy(float).any()
            yield label, part, "reserved_bytes" if reserved else "allocated_bytes", False


def plot_comm(ax, trace: Trace) -> dict:
    """Per rank: compute (blue) and collectives (red, translucent) over time; where they
    overlap the bar turns purple, so poor overlap is visible at a glance."""
    rows = []
    origin = int(trace.steps["start_ns"].min()) if len(trace.steps) else 0
    for y, rank in enumerate(trace.ranks):
        ev = trace.events[(trace.events["rank"] == rank) & (trace.events["step"] >= 0)]
        for kind, alpha in (("kernel", 1.0), ("comm", 0.55)):
            part = ev[ev["kind"] == kind]
            start = part["ts_ns"].to_numpy()
            spans = Spans.union_of(start, start + part["dur_ns"].to_numpy())
            ax.broken_barh(list(zip((spans.starts - origin) / 1e6, (spans.ends - spans.starts) / 1e6)), (y - 0.35, 0.7),
                           facecolors=KIND_COLORS[kind], alpha=alpha, linewidth=0,
                           label=("compute" if kind == "kernel" else "collectives") if y == 0 else None)
        rows.append(f"rank {rank}")
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_ylim(max(len(rows), 1) - 0.5, -0.5)
    ax.set_xlabel("time (ms from the first step)")
    if not (trace.events["kind"] == "comm").any():
        ax.text(0.5, 0.5, "no collectives recorded (single device)", transform=ax.transAxes, ha="center")
    if rows:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return {"ranks": rows}


MATRIX_LABELS = 32  # rank labels per axis of the communication matrix
MATRIX_RANKS = 256  # ranks per axis drawn in the communication matrix figure


def plot_matrix(ax, table: pd.DataFrame) -> dict:
    """Heatmap of the communication matrix: source rank (rows) x destination rank (columns),
    bandwidth in GB/s, each cell labelled; pairs without a recorded transfer stay blank."""
    if table is None or table.empty:
        ax.text(0.5, 0.5, "no communication matrix recorded (torch_npu writes it from profiler level 1, "
                "communication_matrix.json, or in the db export)", transform=ax.transAxes, ha="center", fontsize=8)
        ax.set_axis_off()
        return {"image": None, "cells": 0}
    values = table.to_numpy(dtype=float)
    image = ax.imshow(np.ma.masked_invalid(values), cmap="viridis", aspect="auto")
    # every rank labelled up to MATRIX_LABELS of them; beyond, evenly spaced ones (thousands of
    # labels cost minutes of layout)
    columns = range(0, values.shape[1], -(-values.shape[1] // MATRIX_LABELS))
    rows = range(0, values.shape[0], -(-values.shape[0] // MATRIX_LABELS))
    ax.set_xticks(columns, [str(table.columns[j]) for j in columns], fontsize=8)
    ax.set_yticks(rows, [str(table.index[i]) for i in rows], fontsize=8)
    ax.set_xlabel("destination rank")
    ax.set_ylabel("source rank")
    labels = []
    if values.size <= 256:
        finite = values[np.isfinite(values)]
        middle = float(np.nanmean(finite)) if finite.size else 0.0
        for (i, j), v in np.ndenumerate(values):
            if np.isfinite(v):
                labels.append(ax.text(j, i, f"{v:.1f}", ha="center", va="center", fontsize=7,
                                      color="black" if v > middle else "white"))
    ax.figure.colorbar(image, ax=ax, label="bandwidth (GB/s)", shrink=0.9)
    return {"image": image, "cells": int(np.isfinite(values).sum()), "labels": labels}


def _short(name: str, limit: int = 48) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


FIGURE_WIDTH_IN = 11  # 1100 CSS pixels: fits a 1200 px notebook cell without scaling down


def _figure(height: float) -> Figure:
    return Figure(figsize=(FIGURE_WIDTH_IN, height), layout="constrained")


def _title(fig: Figure, text: str, fontsize: float = 10) -> None:
    fig.suptitle(wrap_title(text, fig.get_figwidth(), fontsize), fontsize=fontsize, x=0.01, ha="left")


def steps_figure(summary: Summary, title: str = "") -> Figure:
    """Standalone figure of :func:`plot_step_breakdown`."""
    fig = _figure(3.2)
    plot_step_breakdown(fig.add_subplot(), summary.steps)
    _title(fig, title or "step breakdown")
    return fig


def kernels_figure(summary: Summary, top: int = 15, title: str = "") -> Figure:
    """Standalone figure of :func:`plot_kernels`; on the CPU, operators by self time, uncoloured
    (the CPU timeline does not colour operators by name)."""
    fig = _figure(0.8 + 0.28 * max(min(top, len(summary.kernels)), 3))
    device = bool(summary.meta.get("device_mode", True))
    plot_kernels(fig.add_subplot(), summary.kernels, top, colored=8 if device else 0,
                 unit="total time" if device else "self time")
    cpu = "CPU operators by self time (without the operators they call)"
    _title(fig, (title or "top kernels by total time") if device else f"{title} — {cpu}" if title else f"top {cpu}")
    return fig


@dataclass(frozen=True)
class MemoryRead:
    """What the memory figure draws beyond the history's samples: the run's memory records read
    again from its profiler output (``records``, their ``view``), or why they could not be
    (``missing``, one line; the history's samples of PyTorch's pool are drawn then)."""

    records: object = None  # MemoryRecords
    view: object = None  # MemoryView of them
    missing: str = ""


def memory_origin(summary: Summary, records=None) -> int | None:
    """The first step's start on the clock of the memory samples and the timeline (the steps' host
    windows the Summary keeps, else the records' own steps); None where no step is known."""
    windows = summary.meta.get("step_windows_ns") or []
    if windows:
        return int(min(w[1] for w in windows))
    steps = getattr(records, "steps", None)
    return int(steps["start_ns"].min()) if steps is not None and len(steps) else None


def memory_figure(summary: Summary, title: str = "", memory: MemoryRead | None = None) -> Figure:
    """The memory records' curves (:func:`plot_memory_records`) where ``memory`` holds them, else
    :func:`plot_memory` of the history's samples; one line of text when there are none."""
    records = memory.records if memory is not None else None
    if records is None and summary.memory_timeline.empty:
        fig = Figure(figsize=(FIGURE_WIDTH_IN, 0.45))
        ax = fig.add_axes((0, 0, 1, 1))
        ax.axis("off")
        ax.text(0.01, 0.5, f"{title + ': ' if title else ''}no memory samples in this run (it was profiled without profile_memory)",
                va="center", fontsize=10)
        return fig
    fig = _figure(3.4)
    origin = memory_origin(summary, records)
    if records is not None:
        plot_memory_records(fig.add_subplot(), records, memory.view, origin)
    else:
        plot_memory(fig.add_subplot(), summary.memory_timeline, origin)
    _title(fig, title or "memory")
    return fig


def matrix_figure(summary: Summary, title: str = "") -> Figure:
    """Standalone figure of :func:`plot_matrix` for ``summary.comm_matrix``."""
    whole = summary.comm_matrix
    table = whole.iloc[:MATRIX_RANKS, :MATRIX_RANKS]  # a heatmap of thousands of ranks is unreadable and costs GBs
    cut = (f" (first {len(table)} of {len(whole)} source, {len(table.columns)} of {len(whole.columns)} destination "
           "ranks; all in summary.comm_matrix)") if table.shape != whole.shape else ""
    # grows with the ranks up to a screen's size: 3000 rank pairs asked for a 1650-inch canvas
    size = ((min(2.5 + 0.55 * max(len(table.columns), 4), FIGURE_WIDTH_IN), min(1.5 + 0.45 * max(len(table), 2), FIGURE_WIDTH_IN))
            if not table.empty else (FIGURE_WIDTH_IN, 1.5))  # room for the line saying there is none
    fig = Figure(figsize=size, layout="constrained")
    plot_matrix(fig.add_subplot(), table)
    fig.suptitle((title or "communication matrix (GB/s)") + cut, fontsize=10, x=0.01, ha="left")
    return fig


def comm_figure(trace: Trace, title: str = "") -> Figure:
    """Standalone figure of :func:`plot_comm`."""
    fig = _figure(1.2 + 0.5 * max(len(trace.ranks), 2))
    plot_comm(fig.add_subplot(), trace)
    _title(fig, title or "compute vs collectives per rank")
    return fig


def plot_step_distributions(ax, comparison) -> dict:
    """Both runs' step times as strip + box plots, medians marked."""
    data = [comparison.steps_a / 1000, comparison.steps_b / 1000]
    boxes = ax.boxplot(data, showfliers=False, widths=0.5)
    rng = np.random.default_rng(0)
    for i, values in enumerate(data, 1):
        ax.plot(i + rng.uniform(-0.12, 0.12, len(values)), values, "o", ms=3, alpha=0.7)
    ax.set_xticks([1, 2], [comparison.a, comparison.b])
    ax.set_ylabel("step time (ms)")
    return {"boxes": boxes}


def plot_breakdown_delta(ax, comparison) -> dict:
    """Per-step medians of each breakdown component, A beside B."""
    rows = comparison.breakdown[comparison.breakdown["metric"].str.endswith("(ms/step)")]
    y = np.arange(len(rows))
    bars_a = ax.barh(y + 0.2, rows["a"], 0.4, label=comparison.a, color="#9ecae1")
    bars_b = ax.barh(y - 0.2, rows["b"], 0.4, label=comparison.b, color="#3182bd")
    ax.set_yticks(y, [m.replace(" (ms/step)", "") for m in rows["metric"]], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms per step")
    ax.legend(fontsize=8, frameon=False)
    return {"a": bars_a, "b": bars_b}


def comparison_figure(comparison) -> Figure:
    """Step distributions (left) and breakdown medians (right) of a Comparison."""
    fig = Figure(figsize=(FIGURE_WIDTH_IN, 3.4), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.6])
    plot_step_distributions(left, comparison)
    plot_breakdown_delta(right, comparison)
    _title(fig, comparison.sentence(), 9)
    return fig


def kernel_history_figure(history: pd.DataFrame, kernel: str) -> Figure:
    """One kernel's total and mean time across runs, both in one unit (ms when the totals
    reach 10 ms, else µs), so the two axes read alike."""
    fig = Figure(figsize=(9, 2.8), layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(len(history))
    unit = history_unit(history)  # the unit of the table beside it
    scale = 1000.0 if unit == "ms" else 1.0
    ax.bar(x, history["total_us"] / scale, color=kernel_color(kernel), label=f"total ({unit})")
    ax.set_xticks(x, history["run"], fontsize=8)
    ax.set_ylabel(f"total per run ({unit})")
    twin = ax.twinx()
    twin.plot(x, history["mean_us"] / scale, "k.-", label=f"mean per call ({unit})")
    twin.set_ylabel(f"mean per call ({unit})")
    ax.set_title(wrap_title(_short(kernel, 160), 9, 9), fontsize=9, loc="left")
    return fig
