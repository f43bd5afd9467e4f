"""A caching allocator's memory snapshot (:func:`~.sources.memory_snapshot.load_snapshot`), per
device: reserved and allocated memory, the free memory inside the segments and how much of it is
not one piece (fragmentation), the blocks in use by the line that allocated them, and the OOMs the
allocator traced."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

HOLDER_COLUMNS = ["where", "blocks", "bytes"]


@dataclass(frozen=True)
class SnapshotView:
    """One snapshot on one device: reserved (the segments), allocated (blocks in use), the free
    memory inside the segments and its largest piece (fragmentation: the free memory that is not
    one piece), the allocated blocks by the line that allocated them, and the OOMs traced."""

    device: int
    segments: int
    large_segments: int
    reserved_bytes: int
    allocated_bytes: int
    free_in_segments_bytes: int
    largest_free_bytes: int
    holders: pd.DataFrame  # HOLDER_COLUMNS
    ooms: tuple[dict, ...]  # {"size", "device_free"} of each oom traced

    @property
    def fragmented_bytes(self) -> int:
        """Free memory inside the segments beyond its largest piece: reserved, yet unusable for a
        block larger than that piece."""
        return self.free_in_segments_bytes - self.largest_free_bytes


def snapshot_views(snapshot: dict) -> list[SnapshotView]:
    """A :class:`SnapshotView` per device of the snapshot (the device of each segment; 0 where unsaid)."""
    by_device: dict[int, list[dict]] = {}
    for seg in snapshot["segments"]:
        if isinstance(seg, dict):
            by_device.setdefault(_int(seg.get("device")), []).append(seg)
    traces = snapshot.get("device_traces") if isinstance(snapshot.get("device_traces"), list) else []
    return [_view(device, segs, traces[device] if 0 <= device < len(traces) and isinstance(traces[device], list) else [])
            for device, segs in sorted(by_device.items())]


def _view(device: int, segments: list[dict], trace: list) -> SnapshotView:
    blocks = [b for s in segments for b in (s.get("blocks") or []) if isinstance(b, dict)]
    in_use = [b for b in blocks if b.get("state") == "active_allocated"]
    free = [_int(b.get("size")) for b in blocks if b.get("state") == "inactive"]
    rows = [(_where(b.get("frames")), _int(b.get("size"))) for b in in_use]
    holders = pd.DataFrame(rows, columns=["where", "bytes"]).groupby("where", sort=False)["bytes"].agg(["size", "sum"])
    holders = holders.reset_index().set_axis(HOLDER_COLUMNS, axis=1).sort_values("bytes", ascending=False,
                                                                                   kind="stable").reset_index(drop=True)
    ooms = tuple({"size": _int(e.get("size")), "device_free": _int(e.get("device_free"))}
                 for e in trace if isinstance(e, dict) and e.get("action") == "oom")
    return SnapshotView(device, len(segments), sum(s.get("segment_type") == "large" for s in segments),
                        sum(_int(s.get("total_size")) for s in segments), sum(_int(b.get("size")) for b in in_use),
                        sum(free), max(free, default=0), holders, ooms)


def _int(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _where(frames) -> str:
    """The first frame outside torch's own files (the user's line), else the first; '' without a stack."""
    frames = [f for f in frames or () if isinstance(f, dict)]
    if not frames:
        return "(no stack: record with torch.cuda.memory._record_memory_history())"
    own = [f for f in frames if not any(part in str(f.get("filename", "")) for part in ("/torch/", "/torch_npu/", "??"))
           and str(f.get("filename", "")).endswith(".py")]
    f = own[0] if own else frames[0]
    return f"{f.get('filename', '?')}:{f.get('line', '?')} {f.get('name', '')}".strip()
