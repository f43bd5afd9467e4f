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
from .said import say

log = logging.getLogger(__name__)
LANE = "critical path"
# what a segment that no operator or kernel holds reads as
WAITS = {"host_gap": "host, between operators", "launch_delay": "launch delay", "kernel_gap": "kernel gap",
         "sync": "sync wait", "sync_wait": "sync wait"}
# A step's events are its window's and those sharing their correlation ids: each event falls in one
# or two steps' (its own, its launch's). Past this many times a rank's events in all its steps', its
# ids repeat from step to step (a trace stitched from copies of one): each step would walk every
# copy's device work, hours at 10M events, so the lane is left out (said)
LINKED_MAX = 4


def critical_spans(trace) -> pd.DataFrame:
    """Every step's critical path of every rank of ``trace``, as :data:`~.nested.COLUMNS` rows of
    group :data:`~.nested.CRITICAL`; none without launched device work. Each step's path is
    walked over that step's events only (:class:`_StepEvents`): linear in the trace, not steps times it."""
    ev, steps = trace.events, trace.steps
    kinds = ev["kind"].cat
    device_work = np.append(kinds.categories.astype(str).isin(DEVICE_WORK), False)[kinds.codes.to_numpy()]  # by code
    launched = device_work & (ev["correlation"].to_numpy() >= 0) \
        & (ev["stream"].to_numpy() >= 0)  # a CPU run's collectives are host spans
    if steps.empty or not launched.any():
        return pd.DataFrame(columns=COLUMNS)
    ordered = steps.sort_values(["rank", "start_ns"])[["rank", "step", "start_ns", "end_ns"]]
    of_rank = {int(rank): _StepEvents(ev, int(rank)) for rank in ordered["rank"].unique()}
    for rank, mine in of_rank.items():
        windows = ordered.loc[ordered["rank"] == rank, ["start_ns", "end_ns"]].to_numpy()
        taken = sum(mine.count(int(a), int(b)) for a, b in windows)
        if taken > LINKED_MAX * max(len(mine.rows), 1):
            say(f"timeline: no critical path lane for {trace.meta.path or 'this trace'}: rank {rank}'s "
                f"steps link {taken:,} events through their correlation ids, {taken / len(mine.rows):.0f} "
                f"times its {len(mine.rows):,} (ids repeat from step to step)", stacklevel=2)
            return pd.DataFrame(columns=COLUMNS)
    parts, free_at, texts = [], {}, {}  # by rank: where each row's last path ends; each path text once
    for rank, step, start, end in ordered.itertuples(index=False):
        seg = critical_path(of_rank[int(rank)].of(int(start), int(end)), steps, int(step), rank=int(rank)).segments
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
            "path": _texts(kind, seg["name"].to_numpy(object), texts), "step": int(step), "own": False, "depth": row}))
    log.debug("timeline: the critical path of %d steps", len(parts))
    return pd.concat(parts, ignore_index=True)[COLUMNS] if parts else pd.DataFrame(columns=COLUMNS)


class _StepEvents:
    """One rank's events, sorted by start and by correlation id, so that a step's are taken out
    in time that depends on the step's: those starting inside its window (its host calls) and
    every event sharing a correlation id with one of them (the device tasks they launched, the
    sync records of their syncs), in the trace's order. That is all the path of a step reads
    (:func:`~npumagic.analysis.critical_path.critical_path`): the same path as from the whole trace."""

    def __init__(self, ev: pd.DataFrame, rank: int) -> None:
        self.ev = ev
        self.rows = np.flatnonzero(ev["rank"].to_numpy() == rank)
        ts = ev["ts_ns"].to_numpy()[self.rows]
        self.by_ts = np.argsort(ts, kind="stable")
        self.ts = ts[self.by_ts]
        self.correlation = ev["correlation"].to_numpy()[self.rows]
        self.by_corr = np.argsort(self.correlation, kind="stable")
        self.corr = self.correlation[self.by_corr]

    def of(self, start: int, end: int) -> pd.DataFrame:
        """The events of the step from ``start`` to ``end`` (ns, the trace's clock)."""
        inside, lo, hi = self._parts(start, end)
        count = hi - lo
        linked = self.by_corr[np.repeat(lo - np.cumsum(count) + count, count) + np.arange(count.sum())]
        return self.ev.iloc[self.rows[np.union1d(inside, linked)]]

    def count(self, start: int, end: int) -> int:
        """About how many events :meth:`of` takes out (those both inside and linked counted twice)."""
        inside, lo, hi = self._parts(start, end)
        return int(inside.size + (hi - lo).sum())

    def _parts(self, start: int, end: int):
        """The positions of the events starting inside the window, and the ranges in :attr:`corr`
        of those sharing their correlation ids."""
        a, b = np.searchsorted(self.ts, start, side="left"), np.searchsorted(self.ts, end, side="right")
        inside = self.by_ts[a:b]
        ids = self.correlation[inside]
        ids = np.unique(ids[ids >= 0])
        return inside, np.searchsorted(self.corr, ids, side="left"), np.searchsorted(self.corr, ids, side="right")


def _texts(kind: np.ndarray, name: np.ndarray, texts: dict) -> np.ndarray:
    """"kind: name" of each segment, each made once per distinct pair (a path of millions of spans
    holds a few thousand)."""
    codes, pairs = pd.factorize(pd.MultiIndex.from_arrays([kind, name]))
    made = [texts.setdefault(pair, f"{pair[0]}: {pair[1]}") for pair in pairs]
    return np.array(made + [None], dtype=object)[codes]
