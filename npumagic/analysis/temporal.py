"""A rank's events -> its temporal breakdown: how the device's time from its first activity to its
last splits into idle, compute and non-compute (memory copies, collectives, device syncs).

The semantics are HolisticTraceAnalysis's ``get_temporal_breakdown`` (hta 0.5.0), so the two
can be compared on the same trace: the window runs from the first device activity to the last;
compute is the union of compute kernels, idle the window minus the union of all device
activity, non-compute the rest. With two or more ProfilerStep marks, only device work launched
before the last step began counts (HTA drops the last, often truncated, step by default), and
device work whose launch is not in the trace is left out, as HTA does. On nanosecond-resolution
traces HTA first rounds every event inward to whole microseconds (start up, end down: PyTorch
#122425 made such events overlap); so does this table, so the two stay comparable. A rank
profiled in several cycles (a repeating schedule, one file each) is each cycle's breakdown
summed: the gap between two cycles is no device time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .breakdown import cycle_of
from .intervals import Spans
from .schema import LAUNCH_KINDS, kind_in

TEMPORAL_COLUMNS = ["rank", "window_us", "idle_us", "compute_us", "non_compute_us", "idle_pct", "compute_pct",
                    "non_compute_pct"]
# Device activity HTA counts: kernels, collectives, memcpy/memset and device-side sync records.
_DEVICE_KINDS = ("kernel", "comm", "memcpy", "sync")


def rank_temporal(ev: pd.DataFrame, steps: pd.DataFrame, rank: int, steps_inferred: bool = False,
                  bounds: np.ndarray | None = None) -> pd.DataFrame:
    """The temporal breakdown of one rank's events (a one-row frame; empty without device work);
    ``steps_inferred``: its steps are not ProfilerStep marks (all its device work counts);
    ``bounds``: where its later profiling cycles begin (:func:`~.breakdown.cycle_bounds`)."""
    steps = steps.iloc[:0] if steps_inferred else steps
    if bounds is None or not bounds.size:
        row = _rank_breakdown(ev, steps)
    else:
        ev_cycle = cycle_of(ev["ts_ns"].to_numpy(), bounds)
        step_cycle = cycle_of(steps["start_ns"].to_numpy(), bounds)
        rows = [r for c in range(bounds.size + 1)
                if (r := _rank_breakdown(ev[ev_cycle == c], steps[step_cycle == c])) is not None]
        row = {k: sum(r[k] for r in rows) for k in rows[0]} if rows else None
    out = pd.DataFrame([{"rank": rank, **row}] if row is not None else [], columns=TEMPORAL_COLUMNS)
    for part in ("idle", "compute", "non_compute"):
        out[f"{part}_pct"] = (100.0 * out[f"{part}_us"] / out["window_us"]).where(out["window_us"] > 0)
    return out[TEMPORAL_COLUMNS]


def _rank_breakdown(ev: pd.DataFrame, steps: pd.DataFrame) -> dict | None:
    # the four columns read, not copies of every column of the device work and the launches
    on_device = ev["device"].to_numpy() >= 0
    # a device sync record without a stream (CUPTI's Event Sync and Context Sync: the host waits,
    # no stream does) is no device time; HTA keeps only device events with a stream
    # (hta/analyzers/breakdown_analysis.py, get_temporal_breakdown: trace_df["stream"].ne(-1))
    streamless = (ev["kind"] == "sync").to_numpy() & (ev["stream"].to_numpy() < 0)
    device = ev.loc[on_device & kind_in(ev["kind"], _DEVICE_KINDS) & ~streamless,
                    ["kind", "ts_ns", "dur_ns", "correlation"]]
    if len(steps) >= 2:
        correlation = ev["correlation"].to_numpy()
        host = ~on_device & kind_in(ev["kind"], LAUNCH_KINDS) & (correlation >= 0)
        launched = correlation[host & (ev["ts_ns"].to_numpy() < steps["start_ns"].max())]
        device = device[device["correlation"].isin(launched)]
    if device.empty:
        return None
    start = device["ts_ns"].to_numpy()
    end = start + device["dur_ns"].to_numpy()
    if (start % 1000).any() or (end % 1000).any():
        start, end = -(-start // 1000) * 1000, end // 1000 * 1000
    busy = Spans.union_of(start, end)
    is_compute = (device["kind"] == "kernel").to_numpy()
    compute = Spans.union_of(start[is_compute], end[is_compute])
    window = int(busy.ends[-1] - busy.starts[0]) if len(busy) else 0
    idle = window - busy.total
    return {"window_us": window / 1e3, "idle_us": idle / 1e3, "compute_us": compute.total / 1e3,
            "non_compute_us": (window - idle - compute.total) / 1e3}
