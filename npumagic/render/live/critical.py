"""The critical path as a lane of the live timeline: per rank and step, the segments of
:func:`~npumagic.analysis.critical_path.critical_path` as spans of one row (a row below where a
step's path outlasts the next step's start), each named by the
operator or kernel that holds the path there (or by what the path waits on: a launch, the kernel
before, a sync), its kind in the span's path (``gpu_compute_bound: gemm``). Drawn for traces with
launched device work only: on the host alone the path is the host lane again."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from ...analysis.critical_path import critical_path
from ...analysis.schema import DEVICE_WORK
from .nested import COLUMNS, CRITICAL

log = logging.getLogger(__name__)
LANE = "critical path"
# what a segment that no operator or kernel holds reads as
WAITS = {"host_gap": "host, between operators", "launch_delay": "launch delay", "kernel_gap": "kernel gap",
         "sync": "sync wait", "sync_wait": "sync wait"}
# Past this many events the lane is left out: it costs about 0.25 s a million events in the first
# view of a run never opened (issue 44: under 1 s at 2M events); building it after that view would lift this
MAX_EVENTS = 1_000_000


def critical_spans(trace) -> pd.DataFrame:
    """Every step's critical path of every rank of ``trace``, as :data:`~.nested.COLUMNS` rows of
    group :data:`~.nested.CRITICAL`; none without launched device work or past :data:`MAX_EVENTS`."""
    ev, steps = trace.events, trace.steps
    launched = np.isin(ev["kind"].to_numpy(), DEVICE_WORK) & (ev["correlation"].to_numpy() >= 0) \
        & (ev["stream"].to_numpy() >= 0)  # a CPU run's collectives are host spans
    if steps.empty or not launched.any() or len(ev) > MAX_EVENTS:
        return pd.DataFrame(columns=COLUMNS)
    parts, free_at = [], {}  # by rank: where each row's last path ends
    for rank, step in steps.sort_values(["rank", "start_ns"])[["rank", "step"]].itertuples(index=False):
        seg = critical_path(ev, steps, int(step), rank=int(rank)).segments
        if not len(seg):
            continue
        # a step's path runs on past the next one's start where the device lags the host: a row below
        ends = free_at.setdefault(rank, [])
        row = next((r for r, end in enumerate(ends) if end <= seg["start_ns"].iat[0]), len(ends))
        ends[row:row + 1] = [int(seg["end_ns"].iat[-1])]
        kind = seg["kind"].to_numpy(object)
        name = np.where(pd.Series(kind).isin(list(WAITS)).to_numpy() | (seg["name"] == "").to_numpy(),
                        pd.Series(kind).map(WAITS).fillna(pd.Series(kind)).to_numpy(object), seg["name"].to_numpy(object))
        parts.append(pd.DataFrame({
            "rank": int(rank), "group": CRITICAL, "lane": LANE, "thread": "", "ts_ns": seg["start_ns"].to_numpy(np.int64),
            "dur_ns": (seg["end_ns"] - seg["start_ns"]).to_numpy(np.int64), "name": name,
            "path": kind + ": " + seg["name"].to_numpy(object), "step": int(step), "own": False, "depth": row}))
    log.debug("timeline: the critical path of %d steps", len(parts))
    return pd.concat(parts, ignore_index=True)[COLUMNS] if parts else pd.DataFrame(columns=COLUMNS)
