"""The memory view of a Summary (:func:`memory_view_of`), for the advice rules and the comparison.

Where the run's profiler output is still at ``meta["path"]`` its memory records are read again
(:func:`~npumagic.analysis.sources.memory.read_memory`: the blocks, so churn, the operators holding
the peak and those never freeing), kept only if they are the Summary's own (the same peak). Else
the view is built from what the Summary keeps: its memory samples and its steps' host windows
(``meta["step_windows_ns"]``), both on the trace's own clock. ``.steps``' ``start_us`` cannot serve:
it counts from the first step's start (on a device, from the first step's device window), and the
samples count from the trace's epoch. Without blocks the view knows no churn (``paired`` False).
"""

from __future__ import annotations

import dataclasses
import logging
from functools import lru_cache
from pathlib import Path

import pandas as pd

from .memory_view import MemoryView, memory_view
from .schema import text_mask
from .summary import Summary

log = logging.getLogger(__name__)


def memory_view_of(s: Summary) -> MemoryView | None:
    """The memory view of ``s`` (None where the run recorded no memory)."""
    if s.memory_timeline is None or s.memory_timeline.empty or s.memory.empty:
        return None
    read = _read_again(s)
    if read is not None:
        return read
    return memory_view(_records(s))


def step_windows(s: Summary) -> pd.DataFrame:
    """step, start_ns, end_ns: the steps' host windows on the clock of the memory samples and the
    events (empty for a run stored before they were kept)."""
    return pd.DataFrame(s.meta.get("step_windows_ns") or [], columns=["step", "start_ns", "end_ns"]).astype("int64")


def _read_again(s: Summary) -> MemoryView | None:
    path = s.meta.get("path")
    if not path or not Path(path).exists():
        return None
    ranks = sorted(s.per_rank) if s.per_rank else [int(s.meta.get("rank", 0) or 0)]
    rank = int(s.meta.get("rank", ranks[0]) or 0)
    index = ranks.index(rank) if rank in ranks else 0
    try:
        mtime_ns = Path(path).stat().st_mtime_ns
        records = _cached(str(path), index, mtime_ns)
        if records.steps.empty:  # a partial export without trace_view.json: the Summary's windows, same clock
            view = memory_view(dataclasses.replace(records, steps=step_windows(s)))
        else:  # the checklist, the advice and the comparison each ask: one view of the same records
            view = _cached_view(str(path), index, mtime_ns)
    except Exception as exc:  # noqa: BLE001 - the advice must not fail on files that changed; the samples serve
        log.debug("memory records of %s not read again: %s", path, exc)
        return None
    peaks = s.memory["peak_allocated_bytes"].to_numpy(float)
    if view.peak_allocated_bytes is None or not (abs(peaks - view.peak_allocated_bytes) < 1.0).any():
        log.debug("memory records of %s are not this Summary's (peak %s)", path, view.peak_allocated_bytes)
        return None
    return view


@lru_cache(maxsize=8)
def _cached(path: str, index: int, mtime_ns: int):
    from .sources.memory import read_memory

    return read_memory(path, index)


@lru_cache(maxsize=8)
def _cached_view(path: str, index: int, mtime_ns: int) -> MemoryView:
    return memory_view(_cached(path, index, mtime_ns))


def _records(s: Summary):
    from .sources.memory import MemoryRecords
    from .sources.ascend.memory_csvs import BLOCK_COLUMNS

    pool = "PTA" if s.meta.get("backend") == "npu" else "PyTorch"
    timeline = s.memory_timeline
    totals = pd.DataFrame({"component": pool, "device": timeline["device"].astype(str), "ts_ns": timeline["ts_ns"],
                           "allocated_bytes": timeline["allocated_bytes"], "reserved_bytes": timeline["reserved_bytes"]})
    capacity = pd.to_numeric(s.memory["capacity_bytes"], errors="coerce").max()
    return MemoryRecords("summary", Path(str(s.meta.get("path", ""))), totals, pd.DataFrame(columns=BLOCK_COLUMNS),
                         step_windows(s), capacity_bytes=None if pd.isna(capacity) else float(capacity), pool=pool)


def operator_at(s: Summary, ts_ns: int | None) -> str | None:
    """The innermost host operator running at ``ts_ns`` (the latest to start of those spanning it)
    past the allocation primitives every operator calls, as the memory reader attributes blocks;
    from the Summary's events (None where they are not kept: a run reloaded from the history)."""
    from .sources.trace_memory import ALLOCATION_PRIMITIVES

    ev = s.events
    if ts_ns is None or ev is None or ev.empty:
        return None
    host = ev[(ev["kind"] == "host_op").to_numpy() & ~text_mask(ev["name"], lambda n: n.isin(ALLOCATION_PRIMITIVES))]
    spans = host[(host["ts_ns"] <= ts_ns) & (host["ts_ns"] + host["dur_ns"] >= ts_ns)]
    return str(spans.loc[spans["ts_ns"].idxmax(), "name"]) if len(spans) else None
