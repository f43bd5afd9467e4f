"""Flows between the host and the device in the live timeline, from the trace's correlation
ids: a click on a kernel (or a copy, a collective) gives the launch that started it and the host
operator that made that launch; a click on a host operator gives the device work its launches
started. On torch_npu the launch runs in a Dequeue of the task queue on a worker thread: the
flow goes through it to the Enqueue of the same correlation id, made by the operator on its own
thread. Answered in the kernel, as arrows between lanes (times in ms from the first step)."""

from __future__ import annotations

import numpy as np

from ...analysis.schema import DEVICE_WORK
from ..tables import shorten
from .launches import thread_of
from .lod import DEVICE_GROUPS, duration

NAME_CHARS = 60  # a name in the lines (the arrows keep it whole)

MAX_ARROWS = 64  # a host operator launching more draws this many (the lines say how many in all)


def flows(index, row: int) -> dict:
    """The arrows of one event (an ``id`` of an events answer): ``arrows``, each ``{from: {lane,
    t}, to: {lane, t}, name}`` from a launch (its host lane, -1 where its thread draws no lane) to
    the device work it started; ``count`` of them in all and ``lines`` saying what they join."""
    ev = index.events
    lane_of = _lane_of(index)
    lane = index.lanes[lane_of[row]]
    name, kind = str(ev["name"].iat[row]), str(ev["kind"].iat[row])
    launches = index.launches
    if launches.empty:
        return {"arrows": [], "count": 0, "lines": [f"{name}: the trace holds no launch with a correlation id"]}
    rank, corr = lane.rank, int(ev["correlation"].iat[row])
    if lane.group in DEVICE_GROUPS and kind in DEVICE_WORK:
        found = launches[((launches["rank"] == rank) & (launches["correlation"] == corr)).to_numpy()] if corr >= 0 \
            else launches.iloc[:0]
        pairs = [(launch, row) for launch in found.itertuples()]
        if not pairs:
            return {"arrows": [], "count": 0, "lines": [f"{shorten(name, NAME_CHARS)}: no launch of it in the trace"]}
        launch = pairs[0][0]
        lane_name, t = _asked(launch)
        caller = _caller(index, rank, lane_name, t)
        lines = [f"{shorten(name, NAME_CHARS)}: launched by {launch.name} at {launch.start_ns / 1e6:,.3f} ms on {launch.lane}"
                 + (f", in {caller}" if caller and lane_name == launch.lane else "")]
        if lane_name != launch.lane:  # torch_npu: through the task queue, from the operator's Enqueue
            lines.append(f"dequeued there from the task queue; enqueued at {t / 1e6:,.3f} ms on {lane_name}"
                         + (f", in {caller}" if caller else ""))
    else:
        start = int(ev["ts_ns"].iat[row]) - index.origin
        end = start + max(int(ev["dur_ns"].iat[row]), 0)
        asked = launches["queued_lane"].to_numpy() if "queued_lane" in launches else np.full(len(launches), "")
        at = launches["queued_ns"].to_numpy() if "queued_ns" in launches else np.full(len(launches), -1)
        if row >= index.nested_from:  # a region's or module's span: the launches of its thread inside it
            thread = index.threads[row - index.nested_from]
            mine, mine_asked = thread_of(launches["lane"].to_numpy()) == thread, thread_of(asked) == thread
        else:
            mine, mine_asked = (launches["lane"] == lane.name).to_numpy(), asked == lane.name
        own = mine & (launches["start_ns"] >= start).to_numpy() & (launches["start_ns"] < end).to_numpy()
        queued = mine_asked & (at >= start) & (at < end)  # torch_npu: its Enqueues' launches
        found = launches[(launches["rank"] == rank).to_numpy() & (own | queued)]
        device = _device_rows(index, rank, found["correlation"].to_numpy())
        by_corr = {int(c): r for r, c in zip(device, ev["correlation"].to_numpy()[device])}
        pairs = [(launch, by_corr[launch.correlation]) for launch in found.itertuples() if launch.correlation in by_corr]
        lines = [f"{name}: {len(found)} launches, {len(pairs)} with their device work in the trace"]
        names = ev["name"].astype(str).to_numpy()[[r for _, r in pairs]] if pairs else np.array([])
        if names.size:
            kinds, counts = np.unique(names, return_counts=True)
            top = np.argsort(-counts, kind="stable")[:3]
            started = ", ".join(f"{shorten(str(kinds[k]), NAME_CHARS)} x{counts[k]}" for k in top)
            lines.append(f"started {started}" + (" …" if kinds.size > 3 else ""))
    arrows = []
    for launch, target in pairs[:MAX_ARROWS]:
        t = (int(ev["ts_ns"].iat[target]) - index.origin) / 1e6
        lane_name, t0 = _asked(launch)
        arrows.append({"from": {"lane": _lane_named(index, rank, lane_name), "t": t0 / 1e6},
                       "to": {"lane": int(lane_of[target]), "t": t}, "name": str(ev["name"].iat[target]),
                       "delay": duration((t - t0 / 1e6) * 1e3)})
    return {"arrows": arrows, "count": len(pairs), "lines": lines}


def _asked(launch) -> tuple[str, int]:
    """Where a launch was asked for: its Enqueue's lane and ns on torch_npu, else its own."""
    lane = getattr(launch, "queued_lane", "")
    return (lane, int(launch.queued_ns)) if lane else (launch.lane, int(launch.start_ns))


def _lane_of(index) -> np.ndarray:
    """Each event row's lane (an index into ``index.lanes``), made once per index (again once it
    grew: its critical path's lanes, added after the first view)."""
    cached = getattr(index, "_lane_of", None)
    if cached is None or len(cached) != len(index.events):
        cached = np.full(len(index.events), -1, dtype=np.int64)
        for k, lane in enumerate(index.lanes):
            cached[lane.rows] = k
        index._lane_of = cached
    return cached


def _lane_named(index, rank: int, name: str) -> int:
    return next((k for k, lane in enumerate(index.lanes) if lane.rank == rank and lane.name == name), -1)


def _caller(index, rank: int, lane_name: str, t: int) -> str:
    """The innermost host operator of that thread running at ``t`` (ns from origin), "" where none."""
    k = _lane_named(index, rank, lane_name)
    if k < 0:
        return ""
    lane = index.lanes[k]
    i, j = lane.window(t, t + 1)
    inside = np.flatnonzero((lane.starts[i:j] <= t) & (lane.ends[i:j] > t))
    if not inside.size:
        return ""
    deepest = i + inside[np.argmax(lane.depth[i:j][inside])]
    return str(index.names[lane.codes[deepest]])


def _device_rows(index, rank: int, correlations: np.ndarray) -> np.ndarray:
    """Rows of the device work of ``rank`` with those correlation ids."""
    ev = index.events
    if not correlations.size:
        return np.empty(0, np.int64)
    device_lane = np.array([lane.group in DEVICE_GROUPS and lane.rank == rank for lane in index.lanes])
    mine = device_lane[_lane_of(index)] & ev["kind"].isin(DEVICE_WORK).to_numpy() \
        & np.isin(ev["correlation"].to_numpy(), correlations)
    return np.flatnonzero(mine)
