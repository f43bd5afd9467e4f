"""trace_view.json, torch_npu's Chrome trace of one rank, as events.

Host ops, Python functions and enqueue/dequeue from the ``Python`` process; CANN runtime calls;
compute and memcpy tasks from ``Ascend Hardware``; collectives from the ``HCCL`` group lanes and
their plane tasks (Memcpy, Reduce_Inline, Notify_*); the ``ProfilerStep#`` windows; GC spans.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ....errors import TraceError
from ... import schema
from .._columns import categorical, step_ids, to_int, to_ns, to_ns_checked
from .._notes import ReadNotes
from ..kineto import DATALOADER_PREFIX, STEP_NAME


COMPUTE_TASKS = frozenset({"AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC", "MIX_AIV", "DSA_SQE"})


MEMCPY_TASKS = frozenset({"PCIE_DMA_SQE", "SDMA_SQE"})


def trace_events(raw, trace_path: Path, notes: ReadNotes) -> pd.DataFrame:
    process: dict[Any, str] = {}
    thread: dict[tuple[Any, Any], str] = {}
    for e in raw:
        if e.ph == "M" and e.args is not None:
            if e.name == "process_name":
                process[e.pid] = str(e.args.name)
            elif e.name == "thread_name":
                thread[(e.pid, e.tid)] = str(e.args.name)
    if not process:
        raise TraceError(trace_path, "no process_name metadata; expected a torch_npu trace_view.json")
    picked = []
    for e in raw:
        if e.ph != "X":
            continue
        proc = process.get(e.pid, "")
        if proc == "Python":
            kind = {"cpu_op": "host_op", "python_function": "python", "enqueue": "runtime",
                    "dequeue": "runtime"}.get(e.cat)
        elif proc == "CANN":
            kind = "runtime"
        elif proc == "Ascend Hardware":
            task = e.args.task_type if e.args is not None else None
            kind = "kernel" if task in COMPUTE_TASKS else "memcpy" if task in MEMCPY_TASKS else None
        elif proc == "HCCL":
            kind = "comm" if "Communication" in thread.get((e.pid, e.tid), "") else None
        elif proc == "Python GC":  # torch_npu's gc_detect_threshold: one "GC" span per collection
            kind = "annotation"
        else:
            kind = None
        if kind is not None:
            picked.append((e, kind, proc))
    ts, ts_ok = to_ns_checked([p[0].ts for p in picked])
    dur, dur_ok = to_ns_checked([p[0].dur for p in picked])
    good = notes.count(trace_path, len(picked), "events", bad_timestamp=~ts_ok, bad_duration=~dur_ok,
                       negative_duration=dur < 0, negative_timestamp=ts < 0)
    if not good.all():
        picked = [p for p, g in zip(picked, good) if g]
        ts, dur = ts[good], dur[good]
    events = [p[0] for p in picked]
    kind = np.array([p[1] for p in picked], dtype=object)
    proc = [p[2] for p in picked]
    name = pd.Series([e.name for e in events], dtype=object)
    kind = np.where(name.str.match(STEP_NAME.pattern), "annotation", kind)
    kind = np.where(name.str.startswith(DATALOADER_PREFIX), "dataloader", kind)
    kind = np.where(name.str.contains("Synchronize", regex=False) & (kind == "runtime"), "sync", kind)
    on_device = np.array([p in ("Ascend Hardware", "HCCL") for p in proc], dtype=bool)
    tids = [e.tid for e in events]
    lane = [f"{p}/{thread.get((e.pid, e.tid), f'Thread {e.tid}')}" for p, e in zip(proc, events)]
    args = [e.args for e in events]
    return pd.DataFrame({
        "name": name,
        "kind": kind,
        "ts_ns": ts,
        "dur_ns": dur,
        "lane": categorical(lane),
        "stream": np.where(on_device, to_int(tids), -1),
        "device": np.where(on_device, 0, -1),
        "correlation": to_int([(a.connection_id if a.connection_id is not None else a.correlation_id)
                               if a is not None else None for a in args]),
        "shapes": categorical([str(a.input_dims) if a is not None and a.input_dims else "" for a in args]),
        "source": categorical([_user_frame(a.call_stack) if a is not None else "" for a in args]),
        "core": np.where(on_device, "", "cpu"),
        "type": name.where(~on_device, ""),
    })


def profiler_steps(events: pd.DataFrame, rank: int, notes: ReadNotes, path: Path) -> pd.DataFrame:
    marks = events[(events["kind"] == "annotation")]
    ids, too_big = step_ids(marks["name"], STEP_NAME.pattern)
    notes.skip(path, "step number out of range", int(too_big.sum()))
    marks = marks.loc[ids.index].assign(step=ids)
    if marks.empty:
        return schema.empty(schema.STEP_COLUMNS)
    marks = marks.sort_values("dur_ns").drop_duplicates("step", keep="last")
    return pd.DataFrame({"rank": rank, "step": marks["step"].to_numpy(), "start_ns": marks["ts_ns"].to_numpy(),
                         "end_ns": (marks["ts_ns"] + marks["dur_ns"]).to_numpy()})


def process_names(raw) -> dict[Any, str]:
    return {e.pid: str(e.args.name) for e in raw if e.ph == "M" and e.name == "process_name" and e.args is not None}


HCCL_TASK_COLUMNS = ["op", "ts_ns", "dur_ns", "task_type", "size_bytes", "transport", "link_type", "plane"]


def hccl_tasks(raw) -> pd.DataFrame:
    """The HCCL plane tasks (Memcpy, Reduce_Inline, Notify_*) of a trace_view.json, each with the
    collective it belongs to (the latest ``hcom_*`` op started at or before it on the group lane),
    its size in bytes, transport (SDMA/RDMA/LOCAL) and link type (HCCS, PCIE, ON_CHIP, ...)."""
    process = {e.pid: str(e.args.name) for e in raw if e.ph == "M" and e.name == "process_name" and e.args is not None}
    thread = {(e.pid, e.tid): str(e.args.name) for e in raw
              if e.ph == "M" and e.name == "thread_name" and e.args is not None}
    ops, tasks = [], []
    for e in raw:
        if e.ph != "X" or process.get(e.pid) != "HCCL":
            continue
        lane = thread.get((e.pid, e.tid), "")
        if "Communication" in lane:
            ops.append((e.ts, e.name))
        elif e.args is not None and e.args.hccl_task_type is not None:
            a = e.args
            tasks.append((e.ts, e.dur, str(a.hccl_task_type), a.size_bytes, str(a.transport_type or ""),
                          str(a.link_type or ""), lane))
    if not tasks or not ops:
        return pd.DataFrame(columns=HCCL_TASK_COLUMNS)
    op_ts = to_ns([t for t, _ in ops])
    order = np.argsort(op_ts, kind="stable")
    op_ts, op_names = op_ts[order], np.array([n for _, n in ops], dtype=object)[order]
    ts = to_ns([t[0] for t in tasks])
    owner = np.searchsorted(op_ts, ts, side="right") - 1
    frame = pd.DataFrame({
        "op": np.where(owner >= 0, op_names[np.clip(owner, 0, None)], ""),
        "ts_ns": ts,
        "dur_ns": to_ns([t[1] for t in tasks]),
        "task_type": [t[2] for t in tasks],
        "size_bytes": pd.to_numeric(pd.Series([t[3] for t in tasks], dtype=object), errors="coerce").fillna(0)
                        .astype(np.int64).to_numpy(),
        "transport": [t[4] for t in tasks],
        "link_type": [t[5] for t in tasks],
        "plane": [t[6] for t in tasks],
    })
    return frame[owner >= 0].reset_index(drop=True)[HCCL_TASK_COLUMNS]


def _user_frame(stack: Any) -> str:
    """The innermost frame of a torch_npu 'Call stack' that is not inside a library."""
    if not isinstance(stack, str) or not stack:
        return ""
    for frame in stack.replace("\r", "").split(";\n"):
        frame = frame.strip()
        if frame and "site-packages" not in frame and "/lib/python" not in frame:
            return frame
    return ""
