"""The host's launch calls the live timeline draws its flows from (not drawn themselves): each
with its correlation id and, on torch_npu, the Enqueue of its task queue that asked for it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...analysis.schema import LAUNCH_KINDS


def launches(events: pd.DataFrame, origin: int) -> pd.DataFrame:
    """The host's launch calls (kernel launches, copies, syncs) that carry a correlation id; on
    torch_npu, where the launch runs in a Dequeue of its task queue on a worker thread, the
    Enqueue that asked for it (``queued_lane``, ``queued_ns`` from origin; "" and -1 elsewhere)."""
    mine = (events["kind"].isin(LAUNCH_KINDS) & (events["device"] < 0) & (events["correlation"] >= 0)).to_numpy()
    ev = events[mine]
    out = pd.DataFrame({"rank": ev["rank"].to_numpy(), "lane": ev["lane"].astype(str).to_numpy(),
                        "name": ev["name"].astype(str).to_numpy(), "start_ns": ev["ts_ns"].to_numpy() - origin,
                        "end_ns": ev["ts_ns"].to_numpy() + np.maximum(ev["dur_ns"].to_numpy(), 0) - origin,
                        "correlation": ev["correlation"].to_numpy()})
    queued_lane, queued_ns = _queued(ev)
    out = out.assign(queued_lane=queued_lane, queued_ns=np.where(queued_ns >= 0, queued_ns - origin, -1))
    queue = (out["name"] == "Enqueue") | out["name"].str.startswith("Dequeue")  # the task queue's own calls
    return out[~queue.to_numpy()].reset_index(drop=True)


def thread_of(lanes: np.ndarray) -> np.ndarray:
    """A host lane's thread ("Python/Thread 7" and "CANN/Thread 7" are one thread)."""
    return np.array([lane.rpartition("/")[2] for lane in lanes], dtype=object)


def _queued(ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per launch of ``ev`` (launch calls), the lane and ns (trace clock) of the Enqueue whose
    Dequeue (the same correlation id, on the launch's thread) encloses it; "" and -1 where none."""
    lanes, times = np.full(len(ev), "", dtype=object), np.full(len(ev), -1, dtype=np.int64)
    names = ev["name"].astype(str)
    enqueue, dequeue = ev[(names == "Enqueue").to_numpy()], ev[names.str.startswith("Dequeue").to_numpy()]
    if enqueue.empty or dequeue.empty:
        return lanes, times
    asked = enqueue.drop_duplicates(["rank", "correlation"]).set_index(["rank", "correlation"])
    thread = thread_of(ev["lane"].astype(str).to_numpy())
    ts, rank = ev["ts_ns"].to_numpy(), ev["rank"].to_numpy()
    d_thread = thread_of(dequeue["lane"].astype(str).to_numpy())
    for (r, t), rows in pd.DataFrame({"r": dequeue["rank"].to_numpy(), "t": d_thread}).groupby(["r", "t"]).groups.items():
        part = dequeue.iloc[np.asarray(rows)].sort_values("ts_ns", kind="stable")
        start = part["ts_ns"].to_numpy()
        end = start + np.maximum(part["dur_ns"].to_numpy(), 0)
        mine = np.flatnonzero((rank == r) & (thread == t))
        k = np.searchsorted(start, ts[mine], side="right") - 1
        inside = (k >= 0) & (ts[mine] <= end[np.maximum(k, 0)])
        key = pd.MultiIndex.from_arrays([np.full(int(inside.sum()), r), part["correlation"].to_numpy()[k[inside]]])
        found = asked.reindex(key)
        ok = found["ts_ns"].notna().to_numpy()
        at = mine[inside][ok]
        lanes[at] = found["lane"].astype(str).to_numpy()[ok]
        times[at] = found["ts_ns"].to_numpy()[ok].astype(np.int64)
    return lanes, times
