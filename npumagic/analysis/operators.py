"""Kernel and host-operator tables of one rank: self time of nested host operators, totals
per kernel (with the vendor's types and shapes where torch_npu recorded them)."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from .schema import AI_CORE_RATIOS

# median_us: a kernel's typical call, which a few calls stretched by preemption (a busy host: a
# 3 us CPU operator caught by a 16 ms time slice) do not move as they move mean_us
KERNEL_COLUMNS = ["name", "type", "core", "count", "total_us", "mean_us", "median_us", "min_us", "max_us", "share",
                  "shapes"]

HOST_OP_COLUMNS = ["name", "count", "total_us", "mean_us", "max_us", "share"]


def self_time_ns(ops: pd.DataFrame) -> np.ndarray:
    """Each operator's own time: its duration minus that of its direct children on its thread.

    Vectorised: nesting depth from counts of starts and ends (ops on a thread nest properly),
    the parent is the latest earlier op one level up, and children's durations are summed per
    parent with bincount.
    """
    n = len(ops)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    lane = ops["lane"].cat.codes.to_numpy().astype(np.int64)
    start = ops["ts_ns"].to_numpy()
    dur = ops["dur_ns"].to_numpy()
    order = np.lexsort((-dur, start, lane))  # parents before children at equal starts
    lane, start, dur = lane[order], start[order], dur[order]
    end = start + dur
    # depth = ops of this lane still open when this one starts (opened earlier, not yet ended)
    lane_first = np.searchsorted(lane, lane, side="left")
    opened_before = np.arange(n) - lane_first
    end_key = np.lexsort((end, lane))
    sorted_end_lane, sorted_end = lane[end_key], end[end_key]
    closed = np.empty(n, dtype=np.int64)
    for code in np.unique(lane):  # per lane: a few threads
        sel = sorted_end_lane == code
        ends_here = sorted_end[sel]
        mine = lane == code
        closed[mine] = np.searchsorted(ends_here, start[mine], side="right")
    depth = opened_before - closed
    parent = np.full(n, -1, dtype=np.int64)
    position = np.arange(n)
    for d in range(1, int(depth.max()) + 1 if n else 1):
        up = position[depth == d - 1]
        here = position[depth == d]
        if here.size == 0 or up.size == 0:
            continue
        k = np.searchsorted(up, here, side="right") - 1
        ok = k >= 0
        candidate = up[np.maximum(k, 0)]
        ok &= lane[candidate] == lane[here]
        parent[here[ok]] = candidate[ok]
    child = np.bincount(parent[parent >= 0], weights=dur[parent >= 0], minlength=n)
    own = np.maximum(dur - child.astype(np.int64), 0)
    out = np.empty(n, dtype=np.int64)
    out[order] = own
    return out


def kernel_table(ev: pd.DataFrame, device_mode: bool, total_wall_us: float,
                 kernel_metrics: pd.DataFrame | None = None,
                 modules: Callable[[pd.DataFrame], np.ndarray] | None = None) -> pd.DataFrame:
    """Kernels (on the CPU: operators by self time) by name, type and core, with each kernel's mean
    AI Core ratios (:data:`~npumagic.analysis.schema.AI_CORE_RATIOS`) where ``kernel_metrics``
    (:data:`~npumagic.analysis.schema.KERNEL_METRIC_COLUMNS`) recorded them. ``modules``: where
    the run recorded nn.Modules, each kernel row's module ("path, forward|backward", ""
    outside every module; :func:`.where.kernel_modules`), and the table gains a ``module``
    column: the module holding the largest share of the kernel's time."""
    if device_mode:
        kernels = ev[ev["kind"] == "kernel"]
    else:  # on the CPU an operator's work is its self time (a leaf's is all of it)
        ops = ev[(ev["kind"] == "host_op") & (ev["device"] < 0)]
        kernels = ops.assign(dur_ns=self_time_ns(ops))
        kernels = kernels[kernels["dur_ns"] > 0]
    if kernels.empty:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    # grouped by the category codes (the text of each group, not of each row, is made below)
    frame = pd.DataFrame({"name": kernels["name"], "type": kernels["type"], "core": kernels["core"],
                          "shapes": kernels["shapes"], "dur_us": kernels["dur_ns"] / 1000.0})
    keys = ["name", "type", "core"]
    grouped = frame.groupby(keys, observed=True, sort=False, dropna=False)
    table = _as_text(grouped["dur_us"].agg(count="count", total_us="sum", mean_us="mean", median_us="median",
                                           min_us="min", max_us="max").reset_index(), keys)
    # each kernel's most frequent shapes (the first in order on a tie, as Series.mode gives)
    counts = _as_text(frame.groupby([*keys, "shapes"], observed=True, sort=False, dropna=False).size()
                      .reset_index(name="n"), [*keys, "shapes"])
    mode = counts.sort_values(["n", "shapes"], ascending=[False, True], kind="stable").drop_duplicates(keys)
    table = table.merge(mode[[*keys, "shapes"]], on=keys, how="left")
    table["share"] = table["total_us"] / total_wall_us if total_wall_us > 0 else np.nan
    table = table.sort_values("total_us", ascending=False, kind="stable").reset_index(drop=True)
    m = kernel_metrics
    extra = [c for c in AI_CORE_RATIOS if m is not None and m[c].notna().any()]
    if modules is not None:
        placed = _as_text(pd.DataFrame({"name": frame["name"], "type": frame["type"], "core": frame["core"],
                                        "module": modules(kernels), "dur_us": frame["dur_us"]}), keys)
        sums = placed[placed["module"] != ""].groupby([*keys, "module"], sort=False)["dur_us"].sum().reset_index()
        top = sums.sort_values("dur_us", ascending=False, kind="stable").drop_duplicates(keys)
        table = table.merge(top[[*keys, "module"]], on=keys, how="left").fillna({"module": ""})
    if extra:
        table = table.join(m[extra].groupby(m["name"].astype(str)).mean(), on="name")
    return table[KERNEL_COLUMNS + (["module"] if modules is not None else []) + extra]


def _as_text(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``columns`` as plain text (as ``astype(str)`` of each row would give: a missing value is "nan")."""
    return frame.assign(**{c: frame[c].astype(object).astype(str) for c in columns})


def kernel_types(kernels: pd.DataFrame) -> pd.DataFrame:
    """Kernels aggregated by operator type: type, core, count, total_us, mean_us, min_us, max_us."""
    if kernels.empty:
        return pd.DataFrame(columns=["type", "core", "count", "total_us", "mean_us", "min_us", "max_us"])
    g = kernels.groupby(["type", "core"], sort=False)
    out = g.agg(count=("count", "sum"), total_us=("total_us", "sum"), min_us=("min_us", "min"), max_us=("max_us", "max"))
    out["mean_us"] = out["total_us"] / out["count"]
    out = out.reset_index().sort_values("total_us", ascending=False, kind="stable").reset_index(drop=True)
    return out[["type", "core", "count", "total_us", "mean_us", "min_us", "max_us"]]


def host_op_table(ev: pd.DataFrame, total_wall_us: float, rows: np.ndarray | None = None) -> pd.DataFrame:
    """The host operators of ``ev`` (of its ``rows``, a mask, where given) by name."""
    mask = ((ev["kind"] == "host_op") & (ev["device"] < 0)).to_numpy()
    if rows is not None:
        mask = mask & rows
    if not mask.any():
        return pd.DataFrame(columns=HOST_OP_COLUMNS)
    # the two columns it reads, not a copy of every column of the host operators (on a large trace
    # that copy was the peak of the whole summary)
    frame = pd.DataFrame({"name": ev["name"].array[mask], "dur_us": ev["dur_ns"].to_numpy()[mask] / 1000.0})
    table = frame.groupby("name", sort=False, observed=True)["dur_us"].agg(
        count="count", total_us="sum", mean_us="mean", max_us="max").reset_index()
    table["name"] = table["name"].astype(str)
    table["share"] = table["total_us"] / total_wall_us if total_wall_us > 0 else np.nan
    return table.sort_values("total_us", ascending=False, kind="stable").reset_index(drop=True)[HOST_OP_COLUMNS]
