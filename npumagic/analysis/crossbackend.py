"""Across hardware: the device time of two runs of one model on different backends (a CUDA run
and a torch_npu run, say) matched by framework operator, as msprof-analyze's compare_tools
matches a GPU and an NPU profile.

Each device task is charged to the outermost ``aten::`` operator around the host call that
launched it (its runtime launch, linked by correlation id), on the thread that made the call.
Why the outermost: the backends decompose an operator differently below it (``aten::linear``
becomes ``aten::addmm`` and a cuBLAS kernel on CUDA, an aclnn operator and AI Core tasks on
torch_npu), but the operator the model called is the same on both. Backward work is found the
same way: autograd's ``evaluate_function`` frames are not ``aten::`` operators, so a backward
kernel is charged to the ``aten::`` operator the backward function ran (``aten::mm``). Device
work launched outside any ``aten::`` operator is charged to ``(collectives)`` (DDP's reducer
launches them) or ``(no aten operator)``, so the rows sum to the device work of the step.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .schema import DEVICE_WORK, LAUNCH_KINDS, kind_in, text_mask

NO_OPERATOR = "(no aten operator)"
COLLECTIVES = "(collectives)"
OPERATOR_COLUMNS = ["operator", "calls", "kernels", "device_us"]
MATCH_COLUMNS = ["operator", "calls_a", "calls_b", "kernels_a", "kernels_b", "device_a_us", "device_b_us", "b_over_a"]


def operator_device_time(events: pd.DataFrame, rank: int | None = None) -> pd.DataFrame:
    """Device time per step by the outermost ``aten::`` operator that launched it.

    Parameters
    ----------
    events : a Trace's events (name, kind, ts_ns, dur_ns, lane, device, rank, step, correlation).
    rank : the rank to read (default the lowest).

    Returns
    -------
    DataFrame :data:`OPERATOR_COLUMNS`, per step (means over the steps): calls of the operator
    at the top of an ``aten::`` nest, device tasks charged to it and their time (us), by time.
    """
    if events.empty:  # typed as a full table is, so that it merges with one
        return pd.DataFrame(columns=OPERATOR_COLUMNS).astype({"operator": str, "calls": float, "kernels": float,
                                                             "device_us": float})
    rank = int(events["rank"].min()) if rank is None else rank
    e = events[(events["rank"] == rank) & (events["step"] >= 0)]
    steps = max(int(e["step"].nunique()), 1)
    host = e["device"].to_numpy() < 0
    name = e["name"].astype(str)
    top = _outermost(e[host & (e["kind"] == "host_op").to_numpy() & name.str.startswith("aten::").to_numpy()])
    calls = top.groupby("operator").size()
    launch = launch_points(e)
    found = _enclosing(launch, top, "operator")
    by_corr = found.drop_duplicates("correlation").set_index("correlation")["operator"].fillna(NO_OPERATOR)
    work = e[~host & kind_in(e["kind"], DEVICE_WORK)]
    charged = work["correlation"].map(by_corr).fillna(NO_OPERATOR)
    # collectives are launched by the communication hooks (DDP's reducer), outside aten operators
    charged = charged.where((charged != NO_OPERATOR) | (work["kind"] != "comm"), COLLECTIVES)
    table = pd.DataFrame({"operator": charged.to_numpy(), "dur": work["dur_ns"].to_numpy()}).groupby("operator").agg(
        kernels=("dur", "size"), device_ns=("dur", "sum"))
    table = table.join(calls.rename("calls"), how="outer").fillna(0)
    out = pd.DataFrame({"operator": table.index.astype(str), "calls": table["calls"].to_numpy() / steps,
                        "kernels": table["kernels"].to_numpy() / steps, "device_us": table["device_ns"].to_numpy() / 1e3 / steps})
    return out.sort_values("device_us", ascending=False, kind="stable").reset_index(drop=True)[OPERATOR_COLUMNS]


def launch_points(e: pd.DataFrame) -> pd.DataFrame:
    """Where the host asked for each device task: (thread, ts, correlation) of the launches of
    ``e`` (one rank's events). torch_npu's task queue: the launch runs inside a Dequeue on a worker
    thread; the operator that asked for it made the Enqueue of the same correlation id on its own
    thread, so the launch is moved there."""
    host = e["device"].to_numpy() < 0
    # the three columns read, not every column of millions of launches (at 10M events, 150 MiB)
    launch = _at(e.loc[host & kind_in(e["kind"], LAUNCH_KINDS) & (e["correlation"] >= 0).to_numpy(),
                       ["lane", "ts_ns", "correlation"]])
    queue = e[host & text_mask(e["name"], lambda n: n == "Enqueue")]
    if not len(queue):  # no task queue (CUDA, ROCm, a CPU run): the launches are where they ran
        return launch
    dequeue = _outermost(e[host & text_mask(e["name"], lambda n: n.str.startswith("Dequeue"))], keep="correlation")
    if len(dequeue):
        inside = _enclosing(launch, dequeue, "correlation", suffix="_queue")
        enqueue = _at(queue).drop_duplicates("correlation").set_index("correlation")
        moved = inside["correlation_queue"].map(enqueue["ts"])
        ok = moved.notna().to_numpy()
        launch = launch.assign(ts=np.where(ok, moved.fillna(0).to_numpy(np.int64), launch["ts"].to_numpy()),
                               thread=np.where(ok, inside["correlation_queue"].map(enqueue["thread"]).fillna("").to_numpy(),
                                               launch["thread"].to_numpy()))
        launch = _text_thread(launch)
    return launch


def match_operators(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Two :func:`operator_device_time` tables side by side (:data:`MATCH_COLUMNS`): per step,
    ``b_over_a`` the ratio of B's device time to A's (NaN where either has none), by the larger
    of the two times."""
    table = pd.merge(a, b, on="operator", how="outer", suffixes=("_a", "_b")).fillna(
        {c: 0.0 for c in ("calls_a", "calls_b", "kernels_a", "kernels_b", "device_us_a", "device_us_b")})
    table = table.rename(columns={"device_us_a": "device_a_us", "device_us_b": "device_b_us"})
    both = (table["device_a_us"] > 0) & (table["device_b_us"] > 0)
    table["b_over_a"] = np.where(both, table["device_b_us"] / table["device_a_us"].where(both, 1.0), np.nan)
    order = np.maximum(table["device_a_us"], table["device_b_us"]).sort_values(ascending=False, kind="stable").index
    return table.loc[order].reset_index(drop=True)[MATCH_COLUMNS]


def _thread(lane: pd.Series) -> np.ndarray:
    """The thread of a host lane ("Python/Thread 7" and "CANN/Thread 7" are one thread)."""
    if isinstance(lane.dtype, pd.CategoricalDtype):  # split each lane name once, not each event's
        return _lane_threads(lane)[lane.cat.codes.to_numpy()]
    return _split_thread(lane)


def _lane_threads(lane: pd.Series) -> np.ndarray:
    """The thread of each category of a categorical ``lane``, then "nan" (no lane): code -1 indexes it."""
    every = np.append(np.arange(len(lane.dtype.categories)), -1)
    return _split_thread(pd.Series(pd.Categorical.from_codes(every, dtype=lane.dtype)))


def _split_thread(lane: pd.Series) -> np.ndarray:
    # no lane reads "nan", as str() of it did; filled first: a categorical without categories (a run
    # with no host lane) has float ones, which the .str methods refuse
    text = lane.astype(object).fillna("nan").astype(str)
    return text.str.rsplit("/", n=1).str[-1].to_numpy(dtype=object)


def _at(events: pd.DataFrame) -> pd.DataFrame:
    """Host calls as (thread, ts, correlation)."""
    return pd.DataFrame({"thread": _thread_text(events["lane"]), "ts": events["ts_ns"].to_numpy(np.int64),
                         "correlation": events["correlation"].to_numpy()}, copy=False)


def _thread_text(lane: pd.Series):
    """:func:`_thread` as text (pandas' ``str``, as :func:`_text_thread` declares it), each lane's
    made once and taken by the codes: no string converted per call (2M launches: 0.1 s)."""
    if not isinstance(lane.dtype, pd.CategoricalDtype):
        return pd.array(_split_thread(lane), dtype=str)
    return pd.array(_lane_threads(lane), dtype=str).take(lane.cat.codes.to_numpy())  # -1: the last, "nan"


def _text_thread(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its ``thread`` column as text, declared: a column built from an array of
    strings is inferred as text, one built from an empty array as object, and pandas refuses to
    match the two in a merge (a CPU run launches no device task: its table of launches is empty)."""
    return frame.astype({"thread": str})


def _outermost(events: pd.DataFrame, keep: str = "name") -> pd.DataFrame:
    """The calls of ``events`` not nested in another of them on their thread: (thread, ts, end,
    operator), ``operator`` taken from column ``keep``, by start."""
    calls = pd.DataFrame({"thread": _thread(events["lane"]), "ts": events["ts_ns"].to_numpy(np.int64),
                          "end": (events["ts_ns"] + events["dur_ns"]).to_numpy(np.int64),
                          "operator": events[keep].astype(str).to_numpy() if keep == "name" else events[keep].to_numpy()})
    calls = _text_thread(calls).sort_values(["thread", "ts", "end"], ascending=[True, True, False], kind="stable")
    reach = calls.groupby("thread", sort=False)["end"].cummax().groupby(calls["thread"], sort=False).shift(1)
    return calls[reach.isna().to_numpy() | (calls["ts"] >= reach).to_numpy()].sort_values("ts", kind="stable")


def _enclosing(at: pd.DataFrame, calls: pd.DataFrame, column: str, suffix: str = "") -> pd.DataFrame:
    """``at`` (sorted or not) with the ``column`` of the call of ``calls`` that encloses each
    point on its thread (NaN where none does), in ``at``'s order, as ``column + suffix``."""
    order = at.sort_values("ts", kind="stable")
    right = calls[["thread", "ts", "end", "operator"]].rename(columns={"operator": column + suffix})
    if column + suffix in order:
        order = order.drop(columns=[column + suffix])
    merged = pd.merge_asof(order.reset_index(), right, on="ts", by="thread", direction="backward")
    merged[column + suffix] = merged[column + suffix].where(merged["ts"] < merged["end"])
    return merged.set_index("index").loc[at.index].drop(columns=["end"])
