"""``memory``: the memory view of a path or a run (:mod:`npumagic.analysis.memory_view`): the peak
and the operators holding it, the operators' allocations, churn, growth across steps, the
components beyond PyTorch's pool. A run is read from its output directory (the history keeps the
peaks only)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import NpumagicError
from .base import Arg, Command, Result, at_least_one, rank

NOT_RECORDED = ("{label} recorded no memory. Profile with profile_memory=True: torch.profiler.profile(..., "
                "profile_memory=True), or torch_npu.profiler.profile(..., profile_memory=True) at any profiler "
                "level (torch_npu then writes memory_record.csv and operator_memory.csv, and npu_module_mem.csv "
                "with ProfilerActivity.NPU); in a notebook, %%npuprofile --memory")


@dataclass(frozen=True)
class MemoryReport(Result):
    label: str
    view: Any  # MemoryView
    top: int = 10

    def to_dict(self) -> dict[str, Any]:
        from ..jsonout import document, records

        v = self.view
        return document(
            "memory", path=self.label, read=v.read, source=v.source, device=v.device, pool=v.pool,
            peak_allocated_bytes=v.peak_allocated_bytes, peak_reserved_bytes=v.peak_reserved_bytes,
            reserved_at_peak_bytes=v.reserved_at_peak_bytes, unused_reserved_at_peak_bytes=v.unused_reserved_at_peak_bytes,
            peak_operator=v.peak_operator, peak_holders=records(v.holders), peak_modules=records(v.module_holders),
            operators=records(v.operators), steps=records(v.steps),
            churn={"count": v.churn_count if v.paired else None, "bytes": v.churn_bytes if v.paired else None,
                   "min_bytes": _churn_min(),
                   "operators": records(v.churn_operators)},
            growth_bytes_per_step=v.growth.bytes_per_step,
            growth={"interval_bytes_per_step": v.growth.interval, "steps_fitted": v.growth.steps_fitted,
                    "growing": v.growth.growing, "operators": records(v.growth.operators)},
            components=v.components, beyond_pool_bytes=v.beyond_pool_bytes, capacity_bytes=v.capacity_bytes,
            static_bytes=v.static_bytes, notes=list(v.notes))

    def text(self, width: int | None = None) -> str:
        from ..render.memory_text import memory_text

        return memory_text(self.label, self.view, self.top)


def _churn_min() -> int:
    from ..analysis.thresholds import CHURN_MIN_BYTES

    return CHURN_MIN_BYTES


def memory_path(places, target: str) -> tuple[str, Path]:
    """(label, path to read) of ``target``: a path, or the output directory of a run."""
    path, name = places.locate(target)
    if path is not None:
        return places.label(target), path
    run_dir = places.runs.run_dir(name)
    if not run_dir or not Path(run_dir).exists():
        raise NpumagicError(f"run {name!r} has no output directory left ({run_dir}): its memory events were there")
    return name, Path(run_dir)


def read_records(places, target: str, rank: int | None = None):
    """(label, MemoryRecords, MemoryView) of ``target`` (``rank``: the rank-th of a job); an output
    without memory is refused saying how to record it."""
    from ..analysis.memory_view import memory_view
    from ..analysis.sources.memory import read_memory

    label, path = memory_path(places, target)
    records = read_memory(path, rank)
    view = memory_view(records)
    if not view.recorded:
        raise NpumagicError(NOT_RECORDED.format(label=label))
    return label, records, view


def figure_records(places, name: str, trace, summary):
    """Run ``name``'s memory records for its memory figure (a ``MemoryRead``), read again from its
    profiler output as :func:`read_records` reads them (the history keeps only PyTorch's pool over
    time): its components and allocations. Where they cannot be read, or the output holds another
    peak than the run's (rewritten since, or another rank's), the line saying so (none where the run
    recorded no memory at all)."""
    from ..render.charts import MemoryRead

    ranks = sorted(trace.ranks if trace is not None else summary.per_rank)
    rank = summary.meta.get("rank")
    try:
        _, records, view = read_records(places, name, ranks.index(rank) if rank in ranks else None)
    except (NpumagicError, OSError) as exc:
        said = "" if summary.memory_timeline.empty else ("PyTorch's pool from the history only; the components and "
                                                         f"the top allocators table need the run's profiler output: {exc}")
        return MemoryRead(missing=said)
    peaks = summary.memory[summary.memory["peak_allocated_bytes"].notna()]
    if len(peaks) and view.peak_allocated_bytes is not None and not (
            (peaks["device"].astype(str) == str(view.device))
            & ((peaks["peak_allocated_bytes"] - view.peak_allocated_bytes).abs() < 1.0)).any():
        held = ", ".join(f"{device} {peak / 2**20:,.1f} MiB" for device, peak in
                         peaks[["device", "peak_allocated_bytes"]].itertuples(index=False))
        return MemoryRead(missing=f"PyTorch's pool from the history only: the run's peak is {held}, but the profiler "
                                  f"output at {view.read} holds a peak of {view.peak_allocated_bytes / 2**20:,.1f} MiB "
                                  f"on {view.device}")
    return MemoryRead(records, view)


def read_view(places, target: str, rank: int | None = None):
    """(label, MemoryView) of ``target``: see :func:`read_records`."""
    label, _, view = read_records(places, target, rank)
    return label, view


@dataclass(frozen=True)
class SnapshotReport(Result):
    label: str
    views: tuple  # SnapshotView per device
    top: int = 10

    def to_dict(self) -> dict[str, Any]:
        from ..jsonout import document, records

        return document("memory_snapshot", path=self.label, devices=[
            {"device": v.device, "segments": v.segments, "large_segments": v.large_segments,
             "reserved_bytes": v.reserved_bytes, "allocated_bytes": v.allocated_bytes,
             "free_in_segments_bytes": v.free_in_segments_bytes, "largest_free_bytes": v.largest_free_bytes,
             "fragmented_bytes": v.fragmented_bytes, "holders": records(v.holders.head(self.top)),
             "ooms": list(v.ooms)} for v in self.views])

    def text(self, width: int | None = None) -> str:
        from ..analysis.memory_view import _size

        out = [f"{self.label}: memory snapshot, {len(self.views)} device{'s' if len(self.views) != 1 else ''}"]
        for v in self.views:
            out.append(f"device {v.device}: reserved {_size(v.reserved_bytes)} in {v.segments} segments "
                       f"({v.large_segments} large), allocated {_size(v.allocated_bytes)}; free inside the segments "
                       f"{_size(v.free_in_segments_bytes)}, its largest piece {_size(v.largest_free_bytes)} "
                       f"(fragmented: {_size(v.fragmented_bytes)})")
            out += [f"  OOM asking {_size(o['size'])} with {_size(o['device_free'])} free on the device" for o in v.ooms]
            out += [f"  {r.where[:70]:<70} {int(r.blocks)} block{'s' if r.blocks != 1 else ''} {_size(r.bytes)}"
                    for r in v.holders.head(self.top).itertuples(index=False)]
        return "\n".join(out)


def memory(places, target: str, rank: int | None = None, top: int | None = None):
    top = at_least_one(top, "--top") or 10
    label, path = memory_path(places, target)
    if path.is_file() and path.name.endswith((".pickle", ".pkl")):  # sources.memory_snapshot.SNAPSHOT_SUFFIXES
        from ..analysis.memory_snapshot import snapshot_views
        from ..analysis.sources.memory_snapshot import load_snapshot

        return SnapshotReport(label, tuple(snapshot_views(load_snapshot(path))), top)
    label, view = read_view(places, target, rank)
    return MemoryReport(label, view, top)


COMMAND = Command(
    "memory", "the memory view: peak and who holds it, per-operator allocations, churn, growth across steps",
    (Arg("target", "a torch.profiler or torch_npu output recorded with profile_memory=True (a directory or trace "
                   "file), a run, or a snapshot pickle (torch.cuda.memory._dump_snapshot)", positional=True,
         metavar="path"),
     rank("rank of a job to read (the rank-th, default the first)"),
     Arg("top", "operators to list in each table (default 10)", int)),
    memory, about="The memory of a path or run recorded with profile_memory=True (or of a snapshot pickle "
                  "written by torch.cuda.memory._dump_snapshot: segments, fragmentation, blocks by the line that "
                  "allocated them, OOMs): the peak of PyTorch's pool "
                  "(allocated, reserved) with the operator running then and the live blocks by the operator that "
                  "allocated them; each operator's allocations, bytes, mean lifetime and bytes live at the last "
                  "step's end; churn (blocks of 1 MiB or more freed within their step); growth of allocated memory "
                  "at the steps' ends (a leak: slope per step, whether beyond noise, the operators never freeing); "
                  "torch_npu's components (PTA, GE, APP, HCCL, RUNTIME, ...) and the memory beyond the pool.")
