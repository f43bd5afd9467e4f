"""Where the findings are on a run's time axis: the device's idle gaps inside the steps with
their cause (what the host did meanwhile), the blocking syncs, each rank's wait in collectives
for a slower rank, and each device's memory peak. One table of marks, drawn by the live timeline
in a lane of its own and written by the Perfetto export as tracks of their own; ``rule`` is the
finding category a mark belongs to, so a finding can be shown where its marks are."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .blocking import blocking_units, device_busy
from .intervals import Spans

MARK_COLUMNS = ["rank", "kind", "rule", "start_ns", "end_ns", "label", "ms"]
GAP = "idle gap"
SYNC = "blocking sync"
WAIT = "slow rank wait"
PEAK = "memory peak"
KINDS = (GAP, SYNC, WAIT, PEAK)
GAP_MIN_NS = 20_000  # device idle shorter than this (a launch's latency) is no gap worth a mark
MAX_PER_KIND = 500  # per rank and kind, the largest marks (a lane of 100k gaps says nothing more)
# what the host did while the device idled, the first covering over half the gap naming it
# (else the one covering most): the categories of findings that name that cause
CAUSES = (("dataloader", "DataLoader wait", "dataloader"), ("sync", "sync", "sync"),
          ("host_op", "host operators", "host_bound"))
UNTRACED = ("nothing traced", "host_bound")


def marks(trace) -> pd.DataFrame:
    """The marks of ``trace`` (:data:`MARK_COLUMNS`; times in the trace's ns clock, ``ms`` the
    mark's size: the gap, the wait, the blocked time, or the peak in MiB), by rank, kind, start."""
    parts = []
    ev = trace.events
    module = "npu" if trace.meta.backend == "npu" else "cuda"  # the synchronize() a sync names
    ranks = ev["rank"].unique()
    # one rank (the usual run): its events as they are, not a copy of them by groupby
    for rank, mine in [(ranks[0], ev)] if len(ranks) == 1 else ev.groupby("rank", observed=True, sort=True):
        steps = trace.steps[trace.steps["rank"] == rank]
        busy = device_busy(mine)
        parts += [_gaps(int(rank), mine, steps, busy), _syncs(int(rank), mine, busy, module)]
    parts += [_waits(trace.comm), _peaks(trace.memory)]
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(MARK_COLUMNS, _TYPES)})
    out = pd.concat(parts, ignore_index=True).astype(dict(zip(MARK_COLUMNS, _TYPES)))
    return out.sort_values(["rank", "kind", "start_ns"], kind="stable").reset_index(drop=True)


_TYPES = ("int64", "object", "object", "int64", "int64", "object", "float64")


def _largest(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.nlargest(MAX_PER_KIND, "ms", keep="first") if len(frame) > MAX_PER_KIND else frame


def _gaps(rank: int, ev: pd.DataFrame, steps: pd.DataFrame, busy: Spans) -> pd.DataFrame:
    """The device's idle holes inside the steps (a rank without device work has none: its host is the run)."""
    if not len(busy) or steps.empty:
        return pd.DataFrame()
    idle = Spans.union_of(steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy()) - busy
    keep = (idle.ends - idle.starts) >= GAP_MIN_NS
    lo, hi = idle.starts[keep], idle.ends[keep]
    if not lo.size:
        return pd.DataFrame()
    host = ev[(ev["device"] < 0).to_numpy()]
    covered = []
    for kind, _, _ in CAUSES:
        part = host[(host["kind"] == kind).to_numpy()]
        start = part["ts_ns"].to_numpy()
        covered.append(Spans.union_of(start, start + part["dur_ns"].to_numpy()).covered(lo, hi))
    covered = np.vstack(covered) if covered else np.zeros((0, lo.size))
    length = hi - lo
    over_half = covered * 2 > length
    first_half = np.where(over_half.any(axis=0), over_half.argmax(axis=0), -1)
    most = np.where(covered.max(axis=0) > 0, covered.argmax(axis=0), -1)
    cause = np.where(first_half >= 0, first_half, most)
    words = np.array([c[1] for c in CAUSES] + [UNTRACED[0]], dtype=object)[cause]
    rules = np.array([c[2] for c in CAUSES] + [UNTRACED[1]], dtype=object)[cause]
    ms = length / 1e6
    return _largest(pd.DataFrame({"rank": rank, "kind": GAP, "rule": rules, "start_ns": lo, "end_ns": hi,
                                  "label": [f"device idle {m:,.3f} ms: {w}" for m, w in zip(ms, words)], "ms": ms}))


def _syncs(rank: int, ev: pd.DataFrame, busy: Spans, module: str) -> pd.DataFrame:
    """The host calls that blocked until the device caught up (:func:`~.blocking.blocking_units`)."""
    units = blocking_units(ev, busy if len(busy) else None, module)
    if units.empty:
        return pd.DataFrame()
    start = units["ts_ns"].to_numpy(np.int64)
    blocked = units["blocked_ns"].to_numpy(np.int64)
    ms = blocked / 1e6
    return _largest(pd.DataFrame({"rank": rank, "kind": SYNC, "rule": "sync", "start_ns": start,
                                  "end_ns": start + np.maximum(blocked, 1),
                                  "label": [f"blocking sync {m:,.3f} ms: {c}" for m, c in zip(ms, units["call"])],
                                  "ms": ms}))


def _waits(comm: pd.DataFrame) -> pd.DataFrame:
    """Each collective's wait for the other ranks to arrive (torch_npu's wait time), from its start."""
    if comm is None or comm.empty:
        return pd.DataFrame()
    waits = comm[(comm["wait_us"] * 1e3 >= GAP_MIN_NS).to_numpy()]
    if waits.empty:
        return pd.DataFrame()
    out = []
    for rank, part in waits.groupby("rank", observed=True, sort=True):
        part = part.drop_duplicates(["op", "ts_ns"])  # a collective's row per link type
        start = part["ts_ns"].to_numpy(np.int64)
        wait = (part["wait_us"].to_numpy() * 1e3).astype(np.int64)
        ms = wait / 1e6
        out.append(_largest(pd.DataFrame({
            "rank": int(rank), "kind": WAIT, "rule": "communication", "start_ns": start, "end_ns": start + wait,
            "label": [f"waits {m:,.3f} ms for the other ranks in {op}" for m, op in zip(ms, part["op"].astype(str))],
            "ms": ms})))
    return pd.concat(out, ignore_index=True)


def _peaks(memory: pd.DataFrame) -> pd.DataFrame:
    """Each device's highest allocated sample (the first, where it is reached more than once)."""
    if memory is None or memory.empty:
        return pd.DataFrame()
    rows = []
    for (rank, device), part in memory.groupby(["rank", memory["device"].astype(str)], observed=True, sort=True):
        values = part["allocated_bytes"].to_numpy()
        if not np.isfinite(values).any():
            continue
        k = int(np.nanargmax(values))
        ts, mib = int(part["ts_ns"].iat[k]), float(values[k]) / 2**20
        rows.append({"rank": int(rank), "kind": PEAK, "rule": "memory", "start_ns": ts, "end_ns": ts,
                     "label": f"memory peak {mib / 1024:,.2f} GiB allocated on {device}", "ms": mib})
    return pd.DataFrame(rows)


# the marks of a finding by its rule id: the kind, and the rule a gap's cause gives (None: any)
RULE_MARKS = {"host_bound": (GAP, "host_bound"), "gpu_gaps": (GAP, None), "gpu_utilization": (GAP, None),
              "dataloader": (GAP, "dataloader"), "cuda_dataloader": (GAP, "dataloader"),
              "sync": (SYNC, None), "sync_apis": (SYNC, None), "sync_memcpy": (SYNC, None),
              "pageable_memcpy": (SYNC, None), "communication": (WAIT, None), "cuda_communication": (WAIT, None),
              "cluster": (WAIT, None), "memory": (PEAK, None)}


def of_finding(table: pd.DataFrame, finding) -> pd.DataFrame:
    """The marks of ``finding``, largest first: a Finding's by its rule (:data:`RULE_MARKS`; a
    gap finding falls back on every gap where none has its cause), on its ranks where it names
    them; a text's, those of the kinds or rule ids it names. Empty where it has none."""
    if isinstance(finding, str):
        text = finding.lower()
        named = {kind for kind in KINDS if kind in text} | {RULE_MARKS[r][0] for r in RULE_MARKS if r in text.split()}
        return table[table["kind"].isin(named).to_numpy()].sort_values("ms", ascending=False, kind="stable")
    kind, cause = RULE_MARKS.get(str(getattr(finding, "rule", "")), (None, None))
    mine = table[(table["kind"] == kind).to_numpy()]
    if cause is not None and (mine["rule"] == cause).any():
        mine = mine[(mine["rule"] == cause).to_numpy()]
    elif cause == "dataloader":
        mine = mine.iloc[:0]  # a DataLoader finding is no gap of another cause
    ranks = tuple(getattr(finding, "ranks", ()) or ())
    if ranks and mine["rank"].isin(ranks).any():
        mine = mine[mine["rank"].isin(ranks).to_numpy()]
    return mine.sort_values("ms", ascending=False, kind="stable")
