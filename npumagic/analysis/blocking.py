"""Host calls that block until the device catches up, traced to the user's call that made them,
and what each costs: the device idle time while the host was blocked (the queue it drained),
never the time the device spent computing meanwhile.

What blocks is whatever blocks: the runtime's synchronisations (``cudaStreamSynchronize``,
event and device syncs, synchronous ``cudaMemcpy``, their HIP and AscendCL twins),
``.item()``'s ``aten::_local_scalar_dense``, and an asynchronous copy from the device into
pageable host memory (the driver stages it, so the host waits: Nsight Systems' "pageable
memcpy" rule). Each blocking event is charged to the top-level host operator around it on its
thread (``aten::item`` for ``.item()``, ``aten::to`` for ``.cpu()``); one without an operator
around it is the user's own call (``torch.cuda.synchronize()``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .gaps import lane_codes, top_host_ops
from .intervals import Spans, spans_of
from .schema import device_work_rows, text_values
from .syncs import is_host_sync

BLOCKING_COLUMNS = ["call", "op", "count", "blocked_us", "idle_us", "per_step", "source", "library"]

# The user's call behind a blocking top-level operator (torch's Python bindings dispatch these).
USER_CALLS = {
    "aten::item": ".item() (or float(t), int(t), print(t))",
    "aten::_local_scalar_dense": ".item() (or float(t), int(t), print(t))",
    "aten::is_nonzero": "a tensor used as a Python bool (if t:, assert t, while t)",
    "aten::to": ".cpu() / .to('cpu') / .numpy() / .tolist()",
    "aten::_to_copy": ".cpu() / .to('cpu') / .numpy() / .tolist()",
    "aten::copy_": "a copy into a host tensor (.copy_(), .cpu())",
    "aten::cpu": ".cpu()",
    "aten::nonzero": "torch.nonzero / boolean-mask indexing (the host waits for the result's size)",
    "aten::masked_select": "boolean-mask indexing t[mask] (the host waits for the result's size)",
    "aten::index": "boolean-mask indexing t[mask] (the host waits for the result's size)",
    "aten::unique": "torch.unique (the host waits for the result's size)",
    "aten::_unique2": "torch.unique (the host waits for the result's size)",
    "aten::repeat_interleave": "repeat_interleave with tensor repeats (the host waits for the result's size)",
    "aten::equal": "torch.equal (returns a Python bool)",
    "aten::allclose": "torch.allclose (returns a Python bool)",
}
# A runtime call with no operator around it: the user called it (or a library outside torch did).
RUNTIME_CALLS = {
    "DeviceSynchronize": "torch.{dev}.synchronize()",
    "CtxSynchronize": "torch.{dev}.synchronize()",
    "StreamSynchronize": "stream.synchronize() (or torch.{dev}.synchronize(stream))",
    "EventSynchronize": "event.synchronize() / event.elapsed_time()",
    "SynchronizeDevice": "torch.{dev}.synchronize()",
    "SynchronizeStream": "stream.synchronize() (or torch.{dev}.synchronize())",
    "SynchronizeEvent": "event.synchronize()",
    "Memcpy": "a synchronous copy between host and device",
}
# Operators that sync inside a library on their own, not in a call the user wrote: cuDNN's
# autotuning (cudnn.benchmark) and MIOpen's search inside convolutions and RNNs, and the
# backward pass's own waits inside autograd.
_AUTOTUNED_OP = ("conv", "cudnn", "miopen", "rnn", "lstm", "gru", "ctc")
_AUTOGRAD_OP = ("Backward", "autograd::engine")


def device_busy(ev: pd.DataFrame) -> Spans:
    """The union of the device's work (kernels, collectives, copies) of a rank's events."""
    return spans_of(ev, device_work_rows(ev))


def pageable_copy_launches(ev: pd.DataFrame) -> np.ndarray:
    """Host runtime calls (``cudaMemcpyAsync``, ``hipMemcpyAsync``, ...) whose device copy goes
    to pageable host memory: the host waits for them as for a synchronous copy."""
    mask = np.zeros(len(ev), dtype=bool)
    if ev.empty or "correlation" not in ev:
        return mask
    copies = ev[(ev["kind"] == "memcpy") & (ev["device"] >= 0)]
    if copies.empty:
        return mask
    name = copies["name"].astype(str)
    to_pageable = name.str.contains("Pageable", regex=False) & name.str.contains("DtoH|Device -> Pageable", regex=True)
    ids = set(copies.loc[to_pageable.to_numpy(), "correlation"].to_numpy().tolist()) - {-1}
    if not ids:
        return mask
    launches = (ev["kind"] == "runtime") & (ev["device"] < 0) & ev["correlation"].isin(ids)
    return launches.to_numpy()


def blocking_mask(ev: pd.DataFrame) -> np.ndarray:
    """The host events that block until the device catches up."""
    return is_host_sync(ev).to_numpy() | pageable_copy_launches(ev)


def user_call(op: str, runtime: str, device_module: str) -> tuple[str, bool]:
    """The user's call behind a blocking unit (its top-level operator ``op``, or "" with the
    runtime call's name) and whether a library made it, not the user's code."""
    if op:
        if op in USER_CALLS:
            return USER_CALLS[op], False
        if any(part in op.lower() for part in _AUTOTUNED_OP):
            return f"{op} (synchronises inside the library: cuDNN/MIOpen autotuning on new shapes)", True
        if any(part in op for part in _AUTOGRAD_OP):
            return f"{op} (synchronises inside the backward pass, not in the step's code)", True
        return op, False
    for key, text in RUNTIME_CALLS.items():
        if key in runtime:
            return text.format(dev=device_module), False
    return runtime, False


def blocking_units(ev: pd.DataFrame, device_busy: Spans | None, device_module: str = "cuda",
                   blocking: np.ndarray | None = None) -> pd.DataFrame:
    """One row per blocking unit in the steps: a top-level host operator that blocked (or a bare
    runtime call), with ``blocked_ns`` (host time from its first blocking event to the end of its
    last) and ``idle_ns`` (device idle within that time; NaN without device lanes); ``blocking``:
    :func:`blocking_mask` of ``ev``, where the caller has it."""
    columns = ["call", "op", "lane", "ts_ns", "blocked_ns", "idle_ns", "step", "library"]
    mask = (blocking_mask(ev) if blocking is None else blocking) & (ev["step"].to_numpy() >= 0)
    block = ev[mask]
    if block.empty:
        return pd.DataFrame(columns=columns)
    start = block["ts_ns"].to_numpy()
    end = start + block["dur_ns"].to_numpy()
    lanes = block["lane"].astype(str).to_numpy()
    unit_op = np.full(len(block), "", dtype=object)
    unit_key = -1 - np.arange(len(block), dtype=np.int64)  # a bare call is its own unit
    top_rows, top_lanes, top_start, top_end = top_host_ops(ev)
    block_lanes = lane_codes(ev)[np.flatnonzero(mask)]
    for lane in np.unique(block_lanes[block_lanes >= 0]):
        mine = np.flatnonzero(block_lanes == lane)
        tops = np.flatnonzero(top_lanes == lane)
        if not tops.size:
            continue
        tops = tops[np.argsort(top_start[tops], kind="stable")]
        k = np.searchsorted(top_start[tops], start[mine], side="right") - 1
        inside = (k >= 0) & (end[mine] <= top_end[tops][np.clip(k, 0, None)])
        unit_op[mine[inside]] = text_values(ev["name"].iloc[top_rows[tops[k[inside]]]])
        unit_key[mine[inside]] = int(lane) * (1 << 32) + k[inside]
    frame = pd.DataFrame({"key": unit_key, "op": unit_op, "runtime": block["name"].astype(str).to_numpy(),
                          "lane": lanes, "start": start, "end": end, "step": block["step"].to_numpy()})
    units = frame.groupby("key", sort=False).agg(op=("op", "first"), runtime=("runtime", "first"), lane=("lane", "first"),
                                                  ts_ns=("start", "min"), end=("end", "max"), step=("step", "first"))
    units["blocked_ns"] = units["end"] - units["ts_ns"]
    if device_busy is None:
        units["idle_ns"] = np.nan
    else:
        lo, hi = units["ts_ns"].to_numpy(), units["end"].to_numpy()
        units["idle_ns"] = (hi - lo) - device_busy.covered(lo, hi)
    calls = [user_call(op, rt, device_module) for op, rt in zip(units["op"], units["runtime"])]
    units["call"] = [c for c, _ in calls]
    units["library"] = [lib for _, lib in calls]
    units["op"] = np.where(units["op"] != "", units["op"], units["runtime"])
    return units.reset_index(drop=True)[columns]


def blocking_table(units: pd.DataFrame, sources: dict[str, str], n_steps: int) -> pd.DataFrame:
    """Blocking units by the user's call, most device idle first (:data:`BLOCKING_COLUMNS`):
    ``count`` calls, ``blocked_us`` host time blocked, ``idle_us`` device idle meanwhile, the
    user's source line where one was recorded (``sources``: operator name -> frame)."""
    if units.empty:
        return pd.DataFrame(columns=BLOCKING_COLUMNS)
    g = units.groupby(["call", "op", "library"], sort=False)
    table = g.agg(count=("blocked_ns", "size"), blocked_us=("blocked_ns", "sum"), idle_us=("idle_ns", "sum")).reset_index()
    table["blocked_us"] /= 1000.0
    table["idle_us"] = np.where(g["idle_ns"].count().to_numpy() > 0, table["idle_us"] / 1000.0, np.nan)
    table["per_step"] = table["count"] / max(n_steps, 1)
    table["source"] = [sources.get(op, "") for op in table["op"]]
    order = np.lexsort((-table["blocked_us"].to_numpy(), -np.nan_to_num(table["idle_us"].to_numpy(), nan=-1.0)))
    return table.iloc[order].reset_index(drop=True)[BLOCKING_COLUMNS]


def idle_during(ev: pd.DataFrame, mask: np.ndarray) -> float:
    """Device idle nanoseconds while the host events under ``mask`` ran (their union)."""
    calls = spans_of(ev[mask])
    return float(calls.total - (calls & device_busy(ev)).total)


def sync_idle_share(s) -> float | None:
    """The share of the step the device idles while the host is blocked waiting for it; None
    where it was not measured (a run stored before it was, a vendor-only breakdown)."""
    column = s.steps.get("idle_sync_us")
    if column is None or not len(s.steps) or column.isna().all():
        return None
    return s.share("idle_sync_us")
