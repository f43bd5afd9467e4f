"""Reader for torch.profiler (Kineto) Chrome traces: ``*.pt.trace.json[.gz]`` files, as written
by ``tensorboard_trace_handler`` or ``export_chrome_trace``, on CPU and CUDA.

The file is read as a stream and its events decoded block by block straight into numpy columns
(names and shapes as integer codes into per-file tables): a ten-million-event trace never exists
as text in memory, nor as ten million Python objects.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from itertools import islice
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from ...errors import TraceError
from .. import schema
from ._columns import small_int, step_ids, to_int, to_ns
from ._inflate import open_trace
from ._counters import chrome_counters
from ._kineto_block import CAT_INDEX, CATS, DEVICE_CATS, HOST_CATS, Block, fill
from ._kineto_decode import KinetoEvent, RawTrace
from ._pool import pool_blocks, worker_count
from .. import read_ahead
from ..collectives import is_comm_name
from ..memory_release import release_free_memory
from ._notes import ReadNotes, reading
from ._stray import without_stray_device_events
from ._separate import separate_runs
from ._stream import EventStream

log = logging.getLogger(__name__)

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
DATALOADER_PREFIX = "enumerate(DataLoader)"
# Runtime calls that block the host until the device has caught up. cudaStreamWaitEvent is not
# one (it only orders two streams); the synchronous copies are, since they return when done.
HOST_SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpy2D",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpyDtoH", "cuMemcpyDtoH_v2",
    "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize", "hipMemcpy", "hipMemcpyWithStream",
})
# Event categories by Kineto schema -> npumagic kind. Today's names (libkineto ActivityType,
# libkineto/src/ActivityType.cpp's name map), then the PyTorch 1.8-era capitalised ones; ROCm,
# XPU and PrivateUse1 builds write their device work in the CUDA categories (kernel, gpu_memcpy,
# gpu_memset), MTIA in mtia_ccp_events (ActivityType.h: MTIA_CCP_EVENTS = CONCURRENT_KERNEL, "MTIA
# ondevice CCP events"). glow_runtime, hpu_op and the xpu/privateuse1 runtime and driver calls are
# host runtime calls (ActivityType.h: GLOW_RUNTIME = HPU_OP = XPU_RUNTIME = RUNTIME).
# (the tables are in ._kineto_block, which the decode workers import)
_HOST_CATS, _DEVICE_CATS = HOST_CATS, DEVICE_CATS
# Kineto categories that are no work of their own, left unread without a word: device copies of
# host ranges, correlation records, instant events, the profiler's overhead, CUDA event records,
# counter and range-profiler samples, and the whole-trace span
NOT_WORK = frozenset({"gpu_user_annotation", "external_correlation", "cpu_instant_event", "overhead", "cuda_event",
                      "mtia_insight", "mtia_counters", "cuda_profiler_range", "xpu_scope_profiler",
                      "collective_comm", "gpu_pm_counter", "Trace"})
MTIA_COPY_PREFIX = "dma"  # an MTIA device event that moves data (HTA's MTIAMemoryKernelGroupingPattern: ^dma)
_CATS, _CAT_INDEX = CATS, CAT_INDEX
_FIRST_DEVICE_CAT = len(_HOST_CATS)
GROW_FROM = 2**16  # events the frame's columns hold at first


def read(paths: list[Path], progress=None) -> schema.Trace:
    """Read one or more Kineto trace files (several ranks or repeat cycles) into one Trace."""
    frames, steps, memories, metas, counters = [], [], [], [], []
    notes = ReadNotes()
    for path in paths:
        with reading(path):
            cols = _Columns(0, notes, path)
            try:
                header = cols.stream(path, progress)
                # the rank is in the fields around the event array: known once the stream is read
                cols.rank = rank = small_int((header.distributedInfo or {}).get("rank"), path, "distributedInfo.rank")
                counters.append(cols.counters())
            except msgspec.DecodeError as exc:
                raise TraceError(path, f"an event does not match the Chrome trace format ({exc})") from None
            ev, mem = cols._frame(), cols._memory_frame()
            ev, stray, _ = without_stray_device_events(ev)
            notes.skip(path, "device timestamp outside the capture", stray)
            ev = _without_repeated_device_events(ev, notes, path)
            if not len(ev):
                found = ", ".join(f"{c or '(none)'} x{n}" for c, n in cols.unread.most_common(12)) or "no complete ('X') events"
                raise TraceError(path, f"no profiler events found (categories in the file: {found}); expected "
                                       "torch.profiler events with categories cpu_op/cuda_runtime/kernel/gpu_memcpy "
                                       "(or the PyTorch 1.8 schema's Operator/Runtime/Kernel/Memcpy)")
            unknown = {c: n for c, n in cols.unread.items() if c and c not in NOT_WORK}
            if unknown:  # said, not dropped silently: it may be device work of an accelerator not known here
                listed = ", ".join(f"{c} x{n}" for c, n in Counter(unknown).most_common(6))
                notes.remark(path, f"{sum(unknown.values())} events of categories npumagic does not know were "
                                   f"left out ({listed})")
            mtia = cols.mtia
            del cols
            release_free_memory()
            st = _steps(ev, rank, notes, path)
            metas.append(_meta(header, rank, path))
            metas[-1]["mtia"] = mtia
            metas[-1]["span"] = (int(ev["ts_ns"].min()), int((ev["ts_ns"] + ev["dur_ns"]).max()))
            metas[-1]["steps"] = set(st["step"].tolist())
        frames.append(ev)
        steps.append(st)
        memories.append(mem)
        del ev  # the frames list holds it: no other name may, for finish to free each column as it sorts
    cycles = []
    if len(frames) > 1:
        _one_job(paths, metas)
        cycles = _cycle_starts(metas)
    events = _concat(frames)
    devices = sorted({d for m in metas for d in m["devices"]})
    on_device = events["kind"].isin(schema.DEVICE_WORK).any()
    backend = _backend(events, devices, any(m["mtia"] for m in metas)) if (on_device or devices) else "cpu"
    if backend == "mtia":  # its device work is no CUDA core's
        events["core"] = events["core"].cat.rename_categories(["cpu", "mtia"])
    if backend == "cpu":  # no device lane: the process group's own spans are the collectives
        events.loc[_process_group_collective(events), "kind"] = "comm"
    meta = {
        "backend": backend,
        "format": "kineto",
        "path": str(paths[0].parent if len(paths) > 1 else paths[0]),
        "files": [str(p) for p in paths],
        "device_name": devices[0] if devices else "cpu" if backend == "cpu" else f"{_GPU_VENDOR[backend]} (model not recorded)",
        "device_memory_bytes": max((m["memory"] for m in metas if m["memory"]), default=None),
        "compute_major": next((m["compute_major"] for m in metas if m["compute_major"] is not None), None),
        "world_size": max(m["world_size"] for m in metas),
        "settings": {},
        "bad_rows": notes.as_meta(),
        "base_time_ns": metas[0]["base_time_ns"],
    }
    if cycles:
        meta["cycle_starts"] = cycles
    notes.warn()
    frames.clear()
    # handed over with no reference left here: finish frees each column as it sorts it
    handed = [events]
    del events
    return schema.finish(handed.pop(), pd.concat(steps, ignore_index=True), memory=pd.concat(memories, ignore_index=True),
                         meta=meta, counters=pd.concat(counters, ignore_index=True))


_GPU_VENDOR = {"cuda": "NVIDIA GPU", "rocm": "AMD GPU", "mtia": "Meta MTIA"}
# The record_function a c10d process group opens around each collective: "<backend>:<op>", e.g.
# gloo:all_reduce, gloo:broadcast, gloo:all_gather, gloo:barrier, gloo:send (the profiling titles
# in torch/csrc/distributed/c10d/ProcessGroupGloo.cpp; ProcessGroupNCCL's are nccl:<op>, and
# torch_npu's ProcessGroupHCCL hccl:<op>). Where a device lane exists its collective kernels are
# the communication; on the CPU these spans are.
PROCESS_GROUP_SPAN = re.compile(r"^(gloo|nccl|hccl|mpi|ucc|xccl):[a-z_]+$")


def _process_group_collective(events: pd.DataFrame) -> np.ndarray:
    """The host spans (annotations and operators) that a process group recorded for a collective."""
    names = events["name"]
    cats = pd.Series(names.cat.categories, dtype=object)
    flagged = cats.str.match(PROCESS_GROUP_SPAN.pattern).to_numpy(dtype=bool)
    codes = names.cat.codes.to_numpy()
    return (flagged[codes] & (codes >= 0) & (events["device"].to_numpy() < 0)
            & events["kind"].isin(["annotation", "host_op"]).to_numpy())


def _one_job(paths: list[Path], metas: list[dict[str, Any]]) -> None:
    """TraceError unless the files can be one job: one file a rank, or a rank's profiling cycles
    (one process: one device, steps numbered on, apart in time). Traces of separate runs put
    together would mix their steps into figures of neither."""
    by_rank: dict[int, list[int]] = {}
    for i, meta in enumerate(metas):
        by_rank.setdefault(meta["rank"], []).append(i)
    for i, j in ((i, j) for files in by_rank.values() for n, j in enumerate(files) for i in files[:n]):
        a, b = metas[i], metas[j]
        if a["devices"] and b["devices"] and a["devices"] != b["devices"]:
            why = f", on different devices ({a['devices'][0]}, {b['devices'][0]})"
        elif not a["steps"] or not b["steps"]:
            why = ", one of them without ProfilerStep# marks"
        elif a["steps"] & b["steps"]:
            why = f" step {min(a['steps'] & b['steps'])}"
        elif a["span"][0] < b["span"][1] and b["span"][0] < a["span"][1]:
            why = " at overlapping times"
        else:
            continue
        raise separate_runs(paths[i], paths[j], "traces", a["rank"], why, "a trace per rank, or per profiling cycle")


def _without_repeated_device_events(ev: pd.DataFrame, notes: ReadNotes, path: Path) -> pd.DataFrame:
    """``ev`` without device events that repeat another exactly (name, start, duration, device,
    stream and correlation: two exports concatenated); a device runs one activity once, so each
    repeat would count its time twice. Counted in ``notes``."""
    rows = np.flatnonzero(ev["device"].to_numpy() >= 0)
    # only events that share a start with another can repeat one: those few are compared whole
    # (hashing every device event's six keys took 0.2 s at 10M events)
    ts = ev["ts_ns"].to_numpy()[rows]
    order = np.argsort(ts, kind="stable")
    same = ts[order][1:] == ts[order][:-1]
    if not same.any():
        return ev
    rows = np.sort(rows[order[np.r_[same, False] | np.r_[False, same]]])
    keys = ev.iloc[rows][["name", "ts_ns", "dur_ns", "device", "stream", "correlation"]]
    repeated = np.zeros(len(ev), dtype=bool)
    repeated[rows] = keys.duplicated(keep="first").to_numpy()
    if not repeated.any():
        return ev
    notes.skip(path, "repeated device event", int(repeated.sum()))
    return ev[~repeated].reset_index(drop=True)


def _cycle_starts(metas: list[dict[str, Any]]) -> list[list[int]]:
    """``[rank, step]`` for each profiling cycle of a rank after its first: the first step of a
    later file of that rank (a repeating schedule writes one file per cycle). Each cycle is its
    own timeline: the gap between two is not the job's time (:func:`~..breakdown.cycles_of`)."""
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for meta in metas:
        by_rank.setdefault(meta["rank"], []).append(meta)
    return [[rank, min(m["steps"])] for rank, files in sorted(by_rank.items())
            for m in sorted(files, key=lambda m: m["span"][0])[1:]]


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The files' events as one frame, each text column one categorical over all files' values
    (pd.concat would turn columns with different categories into Python strings)."""
    if len(frames) == 1:
        return frames[0]
    columns = {}
    for name in frames[0].columns:
        parts = [f[name] for f in frames]
        if all(isinstance(part.dtype, pd.CategoricalDtype) for part in parts):
            columns[name] = pd.api.types.union_categoricals(parts, ignore_order=True)
        else:
            columns[name] = np.concatenate([part.to_numpy() for part in parts])
    return pd.DataFrame(columns, copy=False)


def _backend(events: pd.DataFrame, devices: list[str], mtia: bool = False) -> str:
    """"mtia" where the device work is MTIA's, "rocm" where the trace says AMD (device name or
    HIP runtime calls), else "cuda"."""
    if mtia:
        return "mtia"
    if any("AMD" in d or "Radeon" in d or "Instinct" in d for d in devices):
        return "rocm"
    runtime = events.loc[events["kind"].isin(["runtime", "sync"]), "name"]
    names = pd.Series(runtime.unique().astype(str) if len(runtime) else [], dtype=object)
    return "rocm" if names.str.startswith("hip").any() else "cuda"


def _meta(header: RawTrace, rank: int, path: Path) -> dict[str, Any]:
    props = header.deviceProperties or []
    dist = header.distributedInfo or {}
    first = props[0] if props and isinstance(props[0], dict) else {}
    return {"devices": [p["name"] for p in props if isinstance(p, dict) and isinstance(p.get("name"), str)
                        and p["name"]][:1],
            "memory": _count(first.get("totalGlobalMem")),  # a value of another type: not recorded
            "compute_major": _count(first.get("computeMajor")),
            "world_size": small_int(dist.get("world_size"), path, "distributedInfo.world_size", default=1) or 1,
            "rank": rank, "base_time_ns": _base_time(header.baseTimeNanoseconds)}


def _count(value) -> int | None:
    """A device property that must be a non-negative integer; None for anything else."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63 else None


def _base_time(value) -> int:
    """Kineto's baseTimeNanoseconds (its ts are us after it), 0 when absent or not an epoch time."""
    return int(value) if isinstance(value, int) and 0 <= value < 2**63 else 0


class _Codes(dict):
    """String -> dense integer code, growing as new strings appear."""

    def remap(self, codes: np.ndarray, distinct: list[str]) -> np.ndarray:
        """A block's ``codes`` into its ``distinct`` strings as codes of this table: only the
        distinct strings touch the dict."""
        table = np.fromiter((self.setdefault(u, len(self)) for u in distinct), np.int32, len(distinct))
        return table[codes] if len(codes) else np.empty(0, np.int32)

    def categories(self) -> pd.Index:
        return pd.Index(list(self), dtype=object)

    def since(self, code: int) -> list[str]:
        """The strings of ``code`` on."""
        return list(islice(self, code, None))


class _Columns:
    """Accumulates numpy columns chunk by chunk, then assembles the events frame."""

    def __init__(self, rank: int, notes: ReadNotes | None = None, path: Path | None = None) -> None:
        self.rank = rank
        self.notes, self.path = notes or ReadNotes(), path or Path("?")
        self.names, self.shapes = _Codes(), _Codes()
        self.process_names: dict[Any, str] = {}
        self.columns: dict[str, np.ndarray] = {}  # the frame's columns, grown in place (:meth:`_append`)
        self.size = 0  # events in them
        self.memory: list[Any] = []
        self.unread: Counter[str] = Counter()  # categories of complete events not read, for the error message
        self.counter_events: list = []  # the stream's counter samples (ph "C"), all their args
        self.repaired = [0, 0]  # the blocks' repairs: non-finite numbers, characters that were no UTF-8
        self.mtia = False  # device work in MTIA's category
        self.lanes = _Lanes()
        self.name_flags = np.zeros(0, np.uint8)  # :func:`_name_flags` of each name code

    def stream(self, path: Path, progress=None) -> RawTrace:
        """Add the events of the file at ``path``, read as a stream (memory holds the columns
        and a few blocks of its text: :mod:`._stream`), its blocks decoded on every core where
        it is large (:mod:`._pool`); return its other top-level fields."""
        events = EventStream(path, KinetoEvent)
        ahead = read_ahead.take(path)
        if ahead is not None:  # decoded by a worker while this process imported pandas
            blocks, (events.header, events.counters, events.nonfinite, events.not_utf8) = ahead
            self._add_all(blocks, progress)
        else:
            workers = worker_count(path)
            with open_trace(path) as fh:
                self._add_all(pool_blocks(events, fh, workers) if workers else
                              (fill(Block(), e) for e in events._decode(fh)), progress)
        self.counter_events += events.counters
        events.nonfinite += self.repaired[0]
        events.not_utf8 += self.repaired[1]
        if repairs := events.repairs():
            self.notes.remark(path, repairs)
        return events.header

    def _add_all(self, blocks, progress) -> None:
        try:
            for block in blocks:
                self._add(block)
                if progress is not None:
                    progress.update(block.events)
        finally:
            if hasattr(blocks, "close"):
                blocks.close()  # an interrupted read ends its workers now, not when the traceback goes

    def counters(self) -> pd.DataFrame:
        """Kineto's counter events (``ph: "C"``), where the trace has any."""
        return chrome_counters(self.counter_events, self.process_names, self.rank, -1)

    def _add(self, block: Block) -> None:
        self.unread.update(block.unread)
        self.memory += block.memory
        self.process_names.update(block.process_names)
        self.counter_events += block.counters
        self.repaired[0] += block.nonfinite
        self.repaired[1] += block.not_utf8
        col = block.columns
        if not col:
            return
        good = self.notes.count(self.path, col["cat"].size, "events", **block.bad)
        col["name"] = self.names.remap(col["name"], block.names)
        if len(self.names) > len(self.name_flags):  # names first seen in this block
            self.name_flags = np.append(self.name_flags, _name_flags(self.names.since(len(self.name_flags))))
        col["flags"] = self.name_flags[col["name"]]
        col["shapes"] = self.shapes.remap(col["shapes"], block.shapes)
        if not good.all():
            col = {k: v[good] for k, v in col.items()}
        self._append(self._event_columns(col))

    def _append(self, part: dict[str, np.ndarray]) -> None:
        """Copy a block's columns into the frame's, while the decode workers read the next blocks:
        no join of every block's columns is left for after the last block, on one core. The
        columns double when full, one at a time (the capacity not yet written takes no memory)."""
        n = part["kind"].size
        if not self.columns:
            self.columns = {k: np.empty(max(GROW_FROM, 2 * n), v.dtype) for k, v in part.items()}
        capacity = self.columns["kind"].size
        if self.size + n > capacity:
            for k, column in self.columns.items():
                self.columns[k] = np.empty(max(2 * capacity, self.size + n), column.dtype)
                self.columns[k][:self.size] = column[:self.size]
                del column
            release_free_memory()  # the columns outgrown (glibc keeps those under 32 MiB in its heap)
        for k, v in part.items():
            self.columns[k][self.size:self.size + n] = v
        self.size += n

    def _event_columns(self, col: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A block's columns as the frame's (kinds, lanes, device and stream ids): made block by
        block, while the decode workers read the next blocks, not after the last one on one core."""
        cat, flags = col.pop("cat"), col.pop("flags")
        on_device = cat >= _FIRST_DEVICE_CAT
        self.mtia |= bool((cat == _CAT_INDEX["mtia_ccp_events"]).any())
        # a device event's stream and device are its own args, else its thread and process ids
        pid, tid, stream, device = (col.pop(k).astype(np.int64, copy=False) for k in ("pid", "tid", "stream", "device"))
        np.copyto(stream, tid, where=on_device & (stream < 0))
        np.copyto(device, pid, where=device < 0)
        device[~on_device] = -1
        col["lane"] = self.lanes.codes(on_device, pid, tid, device, stream)
        stream[~on_device] = -1
        col.update(kind=_kinds(cat, flags, on_device), stream=stream, device=device, core=on_device.view(np.int8),
                   correlation=col["correlation"].astype(np.int64, copy=False))
        return col

    def _frame(self) -> pd.DataFrame:
        if not self.columns:
            return schema.empty(schema.EVENT_COLUMNS)
        col, self.columns = {k: v[:self.size] for k, v in self.columns.items()}, {}
        n = self.size
        names = pd.Categorical.from_codes(col.pop("name"), categories=self.names.categories())
        # operator types per distinct name, spread by the name codes (categories sorted, as
        # pd.Categorical would sort them, without hashing one string per event)
        types, type_codes = np.unique(np.asarray([kernel_type(c) for c in names.categories], dtype=object),
                                      return_inverse=True)
        return pd.DataFrame({
            "name": names,
            "kind": pd.Categorical.from_codes(col.pop("kind"), categories=schema.KINDS),
            "ts_ns": col.pop("ts"),
            "dur_ns": col.pop("dur"),
            "lane": self.lanes.categorical(col.pop("lane"), self.process_names),
            "stream": col.pop("stream"),
            "device": col.pop("device"),
            "rank": np.full(n, self.rank, dtype=np.int64),
            "correlation": col.pop("correlation"),
            "type": pd.Categorical.from_codes(type_codes.astype(np.int32)[names.codes], categories=types) if n else [],
            "shapes": pd.Categorical.from_codes(col.pop("shapes"), categories=self.shapes.categories()),
            "core": pd.Categorical.from_codes(col.pop("core"), categories=["cpu", "cuda"]),
        }, copy=False)  # the columns are fresh arrays: no consolidating copy of them

    def _memory_frame(self) -> pd.DataFrame:
        if not self.memory:
            return schema.empty(schema.MEMORY_COLUMNS)
        args = [e.args for e in self.memory]
        dtype = to_int([a.device_type for a in args], 0)
        dev_id = to_int([a.device_id for a in args], 0)
        device = np.where(dtype == 0, "cpu", pd.Series(dev_id).astype(str).radd("cuda:").to_numpy())
        return pd.DataFrame({
            "rank": self.rank,
            "device": device,
            "ts_ns": to_ns([e.ts for e in self.memory]),
            "allocated_bytes": pd.to_numeric(pd.Series([a.total_allocated for a in args], dtype=object), errors="coerce"),
            "reserved_bytes": pd.to_numeric(pd.Series([a.total_reserved for a in args], dtype=object), errors="coerce"),
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


NO_STREAM = (-1, 2**32 - 1)  # CUPTI's stream of a device-wide (context) synchronisation: -1, or as uint32


class _Lanes(dict):
    """(on a device, process or device id, thread or stream id) -> a dense lane code, growing as
    blocks bring new lanes; each lane is named once, at the end (a process's name may come last)."""

    def codes(self, on_device, pid, tid, device, stream) -> np.ndarray:
        """The lane code of each of a block's events."""
        if on_device.size == 0:
            return np.empty(0, np.int32)
        code_a, values_a = pd.factorize(np.where(on_device, device, pid))
        code_b, values_b = pd.factorize(np.where(on_device, stream, tid))
        # one int64 key per event: factorizing it is far cheaper than a MultiIndex of three columns
        key = code_a.astype(np.int64, copy=False)
        key <<= 31
        key |= code_b
        key[on_device] |= np.int64(1) << 62
        codes, keys = pd.factorize(key)
        table = np.fromiter((self.setdefault((k >> 62, values_a[(k >> 31) & (2**31 - 1)], values_b[k & (2**31 - 1)]),
                                             len(self)) for k in keys.tolist()), np.int32, len(keys))
        return table[codes]

    def categorical(self, codes: np.ndarray, process_names: dict) -> pd.Categorical:
        """The lanes of ``codes`` by name: ``GPU 0/Stream 7``, ``<process name>/Thread 12``."""
        labels = [(f"GPU {a}/Stream {b}" if b not in NO_STREAM else f"GPU {a}/all streams (context sync)") if is_dev
                  else f"{process_names.get(int(a), 'Host')}/Thread {b}" for is_dev, a, b in self]
        # equal labels (two pids with one name) must share one category
        cats, remap = np.unique(np.asarray(labels, dtype=object), return_inverse=True)
        return pd.Categorical.from_codes(remap.astype(np.int32)[codes] if len(codes) else codes, categories=list(cats))


# what an event's name says of its kind (bits), judged once per distinct name
_DATALOADER, _STEP_MARK, _SYNC_CALL, _COMM_KERNEL, _MTIA_COPY = (1 << i for i in range(5))
_KIND = {k: i for i, k in enumerate(schema.KINDS)}
_KIND_OF_CAT = np.array([_KIND[{**_HOST_CATS, **_DEVICE_CATS}[c]] for c in _CATS], dtype=np.int8)


def _name_flags(names: list[str]) -> np.ndarray:
    """The bits of :func:`_kinds` of each of ``names`` (a few at a time: no pandas call per block)."""
    return np.fromiter(((_DATALOADER if n.startswith(DATALOADER_PREFIX) else 0)
                        | (_STEP_MARK if STEP_NAME.match(n) else 0)
                        | (_SYNC_CALL if n in HOST_SYNC_CALLS else 0)
                        | (_COMM_KERNEL if is_comm_name(n) else 0)
                        | (_MTIA_COPY if n.startswith(MTIA_COPY_PREFIX) else 0) for n in names), np.uint8, len(names))


def _kinds(cat: np.ndarray, flags: np.ndarray, on_device: np.ndarray) -> np.ndarray:
    """Each event's kind (codes of :data:`schema.KINDS`) from its category and its name's flags."""
    kind = _KIND_OF_CAT[cat]
    kind = np.where(flags & _DATALOADER, _KIND["dataloader"], kind)
    kind = np.where(flags & _STEP_MARK, _KIND["annotation"], kind)
    kind = np.where((flags & _SYNC_CALL).astype(bool) & ~on_device, _KIND["sync"], kind)
    kind = np.where((flags & _MTIA_COPY).astype(bool) & (cat == _CAT_INDEX["mtia_ccp_events"]), _KIND["memcpy"], kind)
    return np.where((flags & _COMM_KERNEL).astype(bool) & (kind == _KIND["kernel"]), _KIND["comm"], kind).astype(np.int8)


def _steps(frame: pd.DataFrame, rank: int, notes: ReadNotes | None = None, path: Path | None = None) -> pd.DataFrame:
    marks = frame[(frame["kind"] == "annotation") & (frame["device"] < 0)]
    ids, too_big = step_ids(marks["name"], STEP_NAME.pattern)
    if notes is not None:
        notes.skip(path, "step number out of range", int(too_big.sum()))
    marks = marks.loc[ids.index].assign(step=ids)
    if marks.empty:
        return schema.empty(schema.STEP_COLUMNS)
    # The same ProfilerStep may appear as cpu_op and as user_annotation: keep the longest. Marks of
    # one number that do not overlap are two steps that cannot be told apart (an edited or merged trace).
    ends = (marks["ts_ns"] + marks["dur_ns"]).groupby(marks["step"]).min()
    apart = marks.groupby("step")["ts_ns"].max() >= ends
    if apart.any():
        step = int(apart.index[apart.to_numpy()][0])
        raise TraceError(path, f"ProfilerStep#{step} marks {int((marks['step'] == step).sum())} separate spans: "
                               "its steps cannot be told apart (an edited or merged trace?)")
    marks = marks.sort_values("dur_ns").drop_duplicates("step", keep="last").sort_values("ts_ns", kind="stable")
    # a ProfilerStep inside another (an edited or merged trace): steps do not nest, and its time
    # would be counted in both; the outer one is kept
    ends = (marks["ts_ns"] + marks["dur_ns"]).to_numpy()
    inside = np.zeros(len(marks), dtype=bool)
    inside[1:] = ends[1:] <= np.maximum.accumulate(ends)[:-1]
    if inside.any():
        if notes is not None:
            notes.skip(path, "ProfilerStep inside another", int(inside.sum()))
        marks = marks[~inside]
    return pd.DataFrame({
        "rank": rank,
        "step": marks["step"].to_numpy(),
        "start_ns": marks["ts_ns"].to_numpy(),
        "end_ns": (marks["ts_ns"] + marks["dur_ns"]).to_numpy(),
    })
