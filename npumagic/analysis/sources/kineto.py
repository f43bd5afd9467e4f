"""Reader for torch.profiler (Kineto) Chrome traces: ``*.pt.trace.json[.gz]`` files, as written
by ``tensorboard_trace_handler`` or ``export_chrome_trace``, on CPU and CUDA."""

from __future__ import annotations

import gzip
import logging
import re
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from ...errors import TraceError
from .. import schema
from ._columns import categorical, to_int, to_ns
from ._kineto_decode import Event, TraceFile, decode

log = logging.getLogger(__name__)

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
DATALOADER_PREFIX = "enumerate(DataLoader)"
HOST_SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
})
_HOST_CATS = {"cpu_op": "host_op", "user_annotation": "annotation", "python_function": "python",
              "cuda_runtime": "runtime", "cuda_driver": "runtime"}
_DEVICE_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memcpy", "cuda_sync": "sync"}


def read_bytes(path: Path) -> bytes:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise TraceError(path, f"cannot read the file ({exc})") from None


def decode_file(path: Path) -> TraceFile:
    raw = read_bytes(path)
    if not raw.strip():
        raise TraceError(path, "the file is empty; expected a Chrome trace JSON (torch.profiler output)")
    try:
        return decode(raw)
    except msgspec.DecodeError as exc:
        raise TraceError(path, f"not a valid Chrome trace JSON ({exc}); the file may be truncated") from None
    except RecursionError:
        raise TraceError(path, "JSON nested too deeply to be a Chrome trace") from None


def read(paths: list[Path], progress=None) -> schema.Trace:
    """Read one or more Kineto trace files (several ranks or repeat cycles) into one Trace."""
    frames, steps, memories, metas = [], [], [], []
    for path in paths:
        trace_file = decode_file(path)
        rank = int((trace_file.distributedInfo or {}).get("rank", 0) or 0)
        ev, st, mem = _tables(trace_file.traceEvents, rank)
        if not len(st) and not len(ev):
            raise TraceError(path, "no profiler events found; expected torch.profiler 'traceEvents' "
                                   "with cpu_op/kernel/ProfilerStep# events")
        frames.append(ev)
        steps.append(st)
        memories.append(mem)
        metas.append(_meta(trace_file, path, rank))
        if progress is not None:
            progress.update(1)
    events = pd.concat(frames, ignore_index=True)
    devices = sorted({d for m in metas for d in m["devices"]})
    backend = "cuda" if (events["kind"].isin(["kernel", "memcpy"]).any() or devices) else "cpu"
    meta = {
        "backend": backend,
        "format": "kineto",
        "path": str(paths[0].parent if len(paths) > 1 else paths[0]),
        "files": [str(p) for p in paths],
        "device_name": devices[0] if devices else "cpu",
        "device_memory_bytes": max((m["memory"] for m in metas if m["memory"]), default=None),
        "world_size": max(m["world_size"] for m in metas),
        "settings": metas[0]["settings"],
    }
    return schema.finish(events, pd.concat(steps, ignore_index=True), pd.concat(memories, ignore_index=True), None, meta)


def _meta(trace_file: TraceFile, path: Path, rank: int) -> dict[str, Any]:
    props = trace_file.deviceProperties or []
    dist = trace_file.distributedInfo or {}
    return {
        "devices": [p.get("name") for p in props if p.get("name")][:1],
        "memory": (props[0].get("totalGlobalMem") if props else None),
        "world_size": int(dist.get("world_size", 1) or 1),
        "settings": {},
        "rank": rank,
    }


def _tables(events: list[Event], rank: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    names: dict[Any, str] = {}
    for e in events:
        if e.ph == "M" and e.name == "process_name" and e.args is not None:
            names[e.pid] = str(e.args.name)
    spans = [e for e in events if e.ph == "X" and (e.cat in _HOST_CATS or e.cat in _DEVICE_CATS)]
    memory = [e for e in events if e.ph == "i" and e.name == "[memory]" and e.args is not None]
    frame = _span_frame(spans, rank, names)
    return frame, _steps(frame, rank), _memory(memory, rank)


def _span_frame(spans: list[Event], rank: int, process_names: dict[Any, str]) -> pd.DataFrame:
    n = len(spans)
    cat = pd.Categorical([e.cat for e in spans])
    name = pd.Categorical([e.name for e in spans])
    args = [e.args for e in spans]
    pid = [e.pid for e in spans]
    tid = [e.tid for e in spans]
    on_device = np.asarray(pd.Series(cat).isin(list(_DEVICE_CATS)).to_numpy(), dtype=bool)

    kind = pd.Series(cat).map({**_HOST_CATS, **_DEVICE_CATS}).astype(object).to_numpy()
    cats = pd.Series(name.categories)
    kind_of_name = {
        "annotation": cats[cats.str.match(STEP_NAME.pattern)],
        "dataloader": cats[cats.str.startswith(DATALOADER_PREFIX)],
        "sync": cats[cats.isin(HOST_SYNC_CALLS)],
    }
    name_s = pd.Series(name)
    kind = np.where(name_s.isin(kind_of_name["dataloader"]), "dataloader", kind)
    kind = np.where(name_s.isin(kind_of_name["annotation"]), "annotation", kind)
    kind = np.where(name_s.isin(kind_of_name["sync"]) & ~on_device, "sync", kind)
    is_comm = name_s.isin(cats[cats.str.contains("nccl", case=False)]).to_numpy() & (kind == "kernel")
    kind = np.where(is_comm, "comm", kind)

    stream = to_int([a.stream if a is not None else None for a in args])
    tid_int = to_int(tid)
    stream = np.where(on_device & (stream < 0), tid_int, stream)
    device = to_int([a.device if a is not None else None for a in args])
    device = np.where(on_device, np.where(device < 0, to_int(pid, 0), device), -1)
    correlation = to_int([(a.correlation if a.correlation is not None else a.external_id) if a is not None else None
                          for a in args])
    shapes = [str(a.input_dims) if a is not None and a.input_dims else "" for a in args]
    pid_int = to_int(pid, 0)
    lane = _lanes(on_device, pid_int, tid_int, device, stream, process_names)
    return pd.DataFrame({
        "name": name,
        "kind": kind,
        "ts_ns": to_ns([e.ts for e in spans]),
        "dur_ns": to_ns([e.dur for e in spans]),
        "lane": lane,
        "stream": np.where(on_device, stream, -1),
        "device": device,
        "rank": np.full(n, rank, dtype=np.int64),
        "correlation": correlation,
        "shapes": categorical(shapes),
        "core": np.where(on_device, "cuda", "cpu"),
        "type": pd.Categorical(np.asarray([kernel_type(c) for c in name.categories], dtype=object)[name.codes])
        if n else [],
    })


def kernel_type(name: str) -> str:
    """A short operator type for a (possibly C++-mangled) kernel name: no return type, template
    arguments or parameter list. ``void at::native::foo<float, 4>(...)`` -> ``at::native::foo``."""
    short = name.removeprefix("void ")
    depth, out = 0, []
    for ch in short:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    text = "".join(out).strip()
    return text or name


def _lanes(on_device, pid, tid, device, stream, process_names) -> pd.Categorical:
    """One lane name per event, built once per distinct (process, thread) or (device, stream)."""
    if on_device.size == 0:
        return pd.Categorical([])
    key = np.stack([on_device.astype(np.int64), np.where(on_device, device, pid), np.where(on_device, stream, tid)])
    unique, codes = np.unique(key, axis=1, return_inverse=True)
    labels = []
    for is_dev, a, b in unique.T:
        if is_dev:
            labels.append(f"GPU {a}/Stream {b}")
        else:
            labels.append(f"{process_names.get(int(a), 'Host')}/Thread {b}")
    # equal labels (two pids with one name) must share one category
    cats, remap = np.unique(np.asarray(labels, dtype=object), return_inverse=True)
    return pd.Categorical.from_codes(remap[np.ravel(codes)], categories=list(cats))


def _steps(frame: pd.DataFrame, rank: int) -> pd.DataFrame:
    marks = frame[(frame["kind"] == "annotation") & (frame["device"] < 0)]
    ids = marks["name"].astype(str).str.extract(STEP_NAME)[0]
    marks = marks[ids.notna()].assign(step=ids.dropna().astype(np.int64))
    if marks.empty:
        return schema.empty(schema.STEP_COLUMNS)
    # The same ProfilerStep may appear as cpu_op and as user_annotation: keep the longest.
    marks = marks.sort_values("dur_ns").drop_duplicates("step", keep="last")
    return pd.DataFrame({
        "rank": rank,
        "step": marks["step"].to_numpy(),
        "start_ns": marks["ts_ns"].to_numpy(),
        "end_ns": (marks["ts_ns"] + marks["dur_ns"]).to_numpy(),
    })


def _memory(events: list[Event], rank: int) -> pd.DataFrame:
    if not events:
        return schema.empty(schema.MEMORY_COLUMNS)
    args = [e.args for e in events]
    dtype = to_int([a.device_type for a in args], 0)
    dev_id = to_int([a.device_id for a in args], 0)
    device = np.where(dtype == 0, "cpu", pd.Series(dev_id).astype(str).radd("cuda:").to_numpy())
    return pd.DataFrame({
        "rank": rank,
        "device": device,
        "ts_ns": to_ns([e.ts for e in events]),
        "allocated_bytes": pd.to_numeric(pd.Series([a.total_allocated for a in args], dtype=object), errors="coerce"),
        "reserved_bytes": pd.to_numeric(pd.Series([a.total_reserved for a in args], dtype=object), errors="coerce"),
    })
