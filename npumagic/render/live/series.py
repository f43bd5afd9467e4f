"""The live timeline's memory and counter lines: each a sorted (ts, values) series per rank,
answered per pixel column (its maximum, else the last sample before it) or, zoomed in on a
memory line, as its allocations and frees one by one."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from ...analysis.schema import Trace

# a memory line sends its allocations and frees one by one below min(this, pixels / 4) in the view
MEMORY_EVENTS_MAX = 250
# counter lanes, as the static timeline draws them (the host's: the profiled process's CPU share)
COUNTER_GROUPS = ("HBM", "AI Core Freq", "Host")
HOST_COUNTER = "Process/CPU"
# the host sampler's other CPU lines, each a lane of its own: the cell's thread, each DataLoader
# worker (competing with it for cores), each core (up to CORE_LANES: beyond, a lane a core is noise)
HOST_LINES = ((re.compile(r"Main thread/CPU"), "main thread CPU"), (re.compile(r"Worker (\d+)/CPU"), "DataLoader worker {} CPU"),
              (re.compile(r"Core (\d+)/CPU"), "core {} CPU"))
CORE_LANES = 16


def series_of(trace: Trace, origin: int) -> list[dict]:
    """Memory (allocated MiB per device) and counter lines (one per counters group: bandwidths
    summed, in GB/s; other units averaged over their names), sorted by time."""
    out = []
    for (rank, device), m in trace.memory.groupby(["rank", trace.memory["device"].astype(str)], observed=True):
        m = m.sort_values("ts_ns")
        out.append({"rank": int(rank), "lane": "memory", "label": f"{device} allocated", "unit": "MiB",
                    "ts": m["ts_ns"].to_numpy() - origin, "values": m["allocated_bytes"].to_numpy() / 2**20})
    c = trace.counters
    host_lines = _host_lines(c, origin)
    c = c[c["group"].astype(str).isin(COUNTER_GROUPS).to_numpy()]
    c = c[((c["group"].astype(str) != "Host") | (c["name"].astype(str) == HOST_COUNTER)).to_numpy()]
    for (rank, group), part in c.groupby(["rank", c["group"].astype(str)], observed=True):
        unit = str(part["unit"].iat[0])
        part = part[part["unit"].astype(str) == unit]
        per_ts = part.groupby("ts_ns", sort=True)["value"]
        values = per_ts.sum() / 2**30 if unit == "B/s" else per_ts.mean()
        out.append({"rank": int(rank), "lane": group, "label": group, "unit": "GB/s" if unit == "B/s" else unit,
                    "ts": values.index.to_numpy() - origin, "values": values.to_numpy(dtype=np.float64)})
    return out + host_lines


def _host_lines(counters: pd.DataFrame, origin: int) -> list[dict]:
    """The host sampler's CPU lines beyond the process's (:data:`HOST_LINES`), in %, per rank:
    the main thread, then the workers, then the cores (numbered in order)."""
    host = counters[(counters["group"].astype(str) == "Host").to_numpy()]
    out = []
    for (rank, name), part in host.groupby(["rank", host["name"].astype(str)], observed=True, sort=False):
        for order, (pattern, label) in enumerate(HOST_LINES):
            m = pattern.fullmatch(name)
            if m is None or (order == 2 and int(m.group(1)) >= CORE_LANES):
                continue
            part = part[part["value"].notna().to_numpy()].sort_values("ts_ns")  # the first reading has no interval
            number = int(m.group(1)) if m.groups() else 0
            out.append({"rank": int(rank), "lane": "Host CPU", "label": label.format(*m.groups()), "unit": "%",
                        "ts": part["ts_ns"].to_numpy() - origin, "values": part["value"].to_numpy(dtype=np.float64),
                        "order": (int(rank), order, number)})
    out.sort(key=lambda s: s.pop("order"))
    return out


def series_columns(series: dict, edges: np.ndarray) -> list:
    """The series' maximum within each column; empty columns hold the last sample before them."""
    ts, values = series["ts"], series["values"]
    width = edges.size - 1
    if ts.size == 0:
        return [None] * width
    a = np.searchsorted(ts, edges[:-1], side="left")
    b = np.searchsorted(ts, edges[1:], side="left")
    out = np.full(width, np.nan)
    has = b > a
    if has.any():
        out[has] = _reduce_max(values, a[has], b[has])
    before = a - 1
    carry = (~has) & (before >= 0)
    out[carry] = values[before[carry]]
    # NaN (no sample yet) as null, and an infinite sample too: answers are strict JSON
    return [v if math.isfinite(v) else None for v in np.round(out, 4).tolist()]


def memory_events(series: dict, t0: float, t1: float, limit: int) -> dict | None:
    """A memory line's samples from ``t0`` to ``t1`` (ns from the origin) one by one, where they are
    at most ``limit``: ``t`` (ms), ``change`` (MiB: the sample's total less the one before, an
    allocation above zero and a free below; None for the line's first sample) and ``total`` (MiB).
    None for other lines and where there are more (the columns serve)."""
    if series["lane"] != "memory":
        return None
    ts, values = series["ts"], series["values"]
    a, b = (int(i) for i in np.searchsorted(ts, [t0, t1], side="left"))
    if b - a > limit:
        return None
    window = values[max(a - 1, 0):b]
    change = np.diff(window) if a > 0 else np.concatenate([[np.nan], np.diff(window)])
    keep = np.isfinite(values[a:b])  # samples without a total (an older Kineto) are not drawn
    finite = lambda x: [round(float(v), 6) if math.isfinite(v) else None for v in x]  # noqa: E731
    return {"t": np.round(ts[a:b][keep] / 1e6, 6).tolist(), "change": finite(change[keep]),
            "total": finite(values[a:b][keep])}


def _reduce_max(values: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """max(values[a[k]:b[k]]) for non-empty, sorted, non-overlapping segments."""
    bounds = np.unique(np.concatenate([a, b]))
    bounds = bounds[bounds < values.size]
    maxima = np.maximum.reduceat(values, bounds)
    return maxima[np.searchsorted(bounds, a)]
