"""The memory events of a Chrome trace (Kineto's ``*.pt.trace.json``, torch_npu's trace_view.json):
each ``[memory]`` instant (address, bytes, the allocator's totals after it, device) with the
operator it falls in, paired into blocks (an allocation and the free of its address), and the
``ProfilerStep#N`` windows.

A ``[memory]`` event is attributed to the innermost host operator running on its thread,
skipping the allocation primitives (``aten::empty``, ...) that every operator calls: the
operator that asked for the memory, not the one that fetched it; and, where the trace has
``with_stack``/``with_modules``' python events, to the innermost ``nn.Module`` running on its
thread (the forward's modules: backward runs on autograd's thread after they return).
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

import msgspec
import numpy as np
import pandas as pd

from ._columns import to_int, to_ns
from ._kineto_decode import Id, Num
from ._notes import ReadNotes
from ._stream import EventStream
from .ascend.memory_csvs import BLOCK_COLUMNS, SIZE_LIMIT_BYTES, TOTALS_COLUMNS
from .kineto import STEP_NAME

ALLOCATION_PRIMITIVES = frozenset({"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
                                   "aten::new_empty_strided", "aten::resize_", "aten::zeros_like", "aten::zeros",
                                   "aten::ones_like", "aten::full", "aten::full_like"})
HOST_OP_CATS = frozenset({"cpu_op", "user_annotation", "Operator"})  # Operator: torch 1.8-1.9 traces
MODULE_PREFIX = "nn.Module: "


class MemoryArgs(msgspec.Struct, gc=False):
    total_allocated: Num = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Num = msgspec.field(default=None, name="Total Reserved")
    bytes: Num = msgspec.field(default=None, name="Bytes")
    addr: Id = msgspec.field(default=None, name="Addr")
    device_id: Id = msgspec.field(default=None, name="Device Id")
    device_type: Id = msgspec.field(default=None, name="Device Type")


MemoryEvent = msgspec.defstruct("MemoryEvent", [
    ("ph", str, ""), ("name", str, ""), ("cat", str, ""), ("tid", Id, None), ("ts", Num, None), ("dur", Num, None),
    ("args", Union[MemoryArgs, None], None)], gc=False)


def read(path: Path, notes: ReadNotes, with_capacity: bool = False) -> tuple:
    """(totals, blocks, steps) of the trace at ``path``: totals in :data:`TOTALS_COLUMNS`
    (component "PyTorch"), blocks in :data:`BLOCK_COLUMNS`, steps (step, start_ns, end_ns);
    ``with_capacity``: and the first device's memory in bytes (Kineto's deviceProperties; None)."""
    mem, ops, steps, modules = [], [], [], []
    stream = EventStream(path, MemoryEvent)
    for chunk in stream:
        for e in chunk:
            if e.name == "[memory]" and e.args is not None:
                mem.append(e)
            elif e.ph == "X" and e.cat in HOST_OP_CATS:
                (steps if STEP_NAME.match(e.name) else ops).append(e)
            elif e.ph == "X" and e.cat == "python_function" and e.name.startswith(MODULE_PREFIX):
                modules.append(e)
    out = _totals_and_events(mem, ops, modules, path, notes) + (_steps(steps),)
    return out + (_capacity(stream.header.deviceProperties),) if with_capacity else out


def _capacity(devices) -> float | None:
    sizes = [d.get("totalGlobalMem") for d in devices or () if isinstance(d, dict)]
    sizes = [float(s) for s in sizes if isinstance(s, (int, float)) and 0 < s < SIZE_LIMIT_BYTES]
    return max(sizes) if sizes else None


def _steps(events: list) -> pd.DataFrame:
    start = to_ns([e.ts for e in events])
    frame = pd.DataFrame({"step": [int(STEP_NAME.match(e.name).group(1)) for e in events],
                          "start_ns": start, "end_ns": start + to_ns([e.dur for e in events])}, dtype=np.int64)
    return frame.drop_duplicates("step").sort_values("start_ns").reset_index(drop=True)


def _totals_and_events(mem: list, ops: list, modules: list, path: Path,
                       notes: ReadNotes) -> tuple[pd.DataFrame, pd.DataFrame]:
    args = [e.args for e in mem]
    num = lambda values: pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(np.float64)  # noqa: E731
    size, allocated, reserved = num([a.bytes for a in args]), num([a.total_allocated for a in args]), \
        num([a.total_reserved for a in args])
    dtype, dev_id = to_int([a.device_type for a in args], 0), to_int([a.device_id for a in args], 0)
    device = np.where(dtype == 0, "cpu", pd.Series(dev_id).astype(str).radd("cuda:").to_numpy())
    ev = pd.DataFrame({"device": device, "ts_ns": to_ns([e.ts for e in mem]), "bytes": size,
                       "addr": to_int([a.addr for a in args], -1), "tid": [str(e.tid) for e in mem],
                       "allocated_bytes": allocated, "reserved_bytes": reserved})
    good = notes.count(path, len(ev), "memory events", no_Bytes=np.isnan(size),
                       absurd_Bytes=np.abs(size) > SIZE_LIMIT_BYTES, negative_Total_Allocated=allocated < 0,
                       absurd_Total_Allocated=allocated > SIZE_LIMIT_BYTES)
    ev = ev[good].sort_values("ts_ns", kind="stable").reset_index(drop=True)
    ev["operator"] = _innermost(ev, ops, "tid")
    ev["module"] = np.array([m.removeprefix(MODULE_PREFIX) for m in _innermost(ev, modules, "tid")], dtype=object)
    no_total = ev["allocated_bytes"].isna()
    if no_total.any():  # torch 1.8-1.9 wrote Bytes only: the running sum, from the capture's start
        ev["allocated_bytes"] = ev["allocated_bytes"].fillna(ev.groupby("device")["bytes"].cumsum())
        notes.remark(path, f"{int(no_total.sum())} memory events carry no Total Allocated (torch before 1.10): "
                           "allocated memory is summed from the capture's start, what was live before it not counted")
    no_addr = ev["addr"] < 0
    if no_addr.any():
        notes.remark(path, f"{int(no_addr.sum())} memory events carry no address: their allocations cannot be "
                           "paired with their frees and are left out of the per-operator tables")
    totals = ev.assign(component="PyTorch")[TOTALS_COLUMNS]
    return totals, _blocks(ev[~no_addr])


def _innermost(ev: pd.DataFrame, spans: list, key: str) -> np.ndarray:
    """The innermost span (past the allocation primitives) around each memory event among the
    spans of the same ``key`` (its thread), "" where none runs."""
    inner = np.full(len(ev), "", dtype=object)
    if not spans or ev.empty:
        return inner
    start, dur = to_ns([o.ts for o in spans]), to_ns([o.dur for o in spans])
    table = pd.DataFrame({key: [str(getattr(o, key)) for o in spans], "name": [o.name for o in spans],
                          "start": start, "end": start + dur})
    for value, mine in ev.groupby(key, sort=False):
        _sweep(table[table[key] == value].sort_values(["start", "end"], ascending=[True, False]), mine, inner)
    return inner


def _sweep(spans: pd.DataFrame, mine: pd.DataFrame, inner: np.ndarray) -> None:
    """One pass over a thread's operators (by start) and memory events (by time) with a stack."""
    names, starts, ends = spans["name"].tolist(), spans["start"].tolist(), spans["end"].tolist()
    stack: list[int] = []
    i = 0
    for row, ts in zip(mine.index.tolist(), mine["ts_ns"].tolist()):
        while i < len(starts) and starts[i] <= ts:
            while stack and ends[stack[-1]] < starts[i]:
                stack.pop()
            stack.append(i)
            i += 1
        while stack and ends[stack[-1]] < ts:
            stack.pop()
        if stack:
            inner[row] = next((names[j] for j in reversed(stack) if names[j] not in ALLOCATION_PRIMITIVES),
                              names[stack[-1]])


def _blocks(ev: pd.DataFrame) -> pd.DataFrame:
    """Each allocation (bytes > 0) with the free of its address that follows (free_ns -1: none
    within the capture)."""
    order = ev.sort_values(["device", "addr", "ts_ns"], kind="stable")
    nxt = order.shift(-1)
    alloc = order["bytes"] > 0
    freed = alloc & (nxt["bytes"] < 0) & (nxt["addr"] == order["addr"]) & (nxt["device"] == order["device"])
    blocks = order[alloc]
    free_ns = np.where(freed[alloc], nxt["ts_ns"][alloc].fillna(-1), -1).astype(np.int64)
    return pd.DataFrame({"device": blocks["device"].to_numpy(), "operator": blocks["operator"].to_numpy(),
                         "module": blocks["module"].to_numpy(), "bytes": blocks["bytes"].to_numpy(),
                         "alloc_ns": blocks["ts_ns"].to_numpy(), "free_ns": free_ns},
                        columns=BLOCK_COLUMNS).sort_values("alloc_ns", kind="stable").reset_index(drop=True)
