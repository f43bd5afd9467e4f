"""One rank's memory records, whatever wrote them: torch_npu's memory CSVs (with trace_view.json's
step windows) or a Kineto trace's ``[memory]`` events, as one :class:`MemoryRecords`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ...errors import NpumagicError, TraceError
from ._notes import ReadNotes
from .ascend import memory_csvs
from .ascend.discover import OUTPUT
from .ascend.memory_csvs import BLOCK_COLUMNS, TOTALS_COLUMNS

RECORD, MODULES = "memory_record", "npu_module_mem"  # totals' ``file`` (the CSV, or the db's table of it)


@dataclass(frozen=True)
class MemoryRecords:
    """``totals``: the allocator's totals over time per component (:data:`TOTALS_COLUMNS`: PTA, GE,
    PTA+GE, APP and the CANN modules of torch_npu; "PyTorch" of Kineto; torch_npu's also a column
    ``file``: :data:`RECORD` or :data:`MODULES`, as APP and GE are in both); ``blocks``: one row an
    allocation (:data:`BLOCK_COLUMNS`, free_ns -1 where not freed within the capture); ``steps``:
    step, start_ns, end_ns; ``static``: static graph memory per operator (torch_npu graph mode)."""

    source: str  # "torch_npu" or "kineto"
    path: Path
    totals: pd.DataFrame
    blocks: pd.DataFrame
    steps: pd.DataFrame
    static: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["operator", "bytes"]))
    capacity_bytes: float | None = None
    notes: tuple[str, ...] = ()
    pool: str = "PyTorch"  # the component that is PyTorch's caching allocator (torch_npu: PTA)
    modules: tuple[str, ...] = ()  # the components read from npu_module_mem.csv


def read_memory(path: str | Path, rank: int | None = None) -> MemoryRecords:
    """The memory records of ``path`` (a torch_npu rank or job directory, a Kineto trace or a
    folder of them); ``rank``: the rank-th of a job (default the first)."""
    from .readers import sniff

    path = Path(path)
    found = sniff(path) if path.exists() else None
    if found is None:
        raise TraceError(path, "no torch.profiler or torch_npu output here")
    reader, paths = found
    if rank is not None and not 0 <= rank < len(paths):
        raise NpumagicError(f"rank {rank} not in {path}; it holds {len(paths)} rank{'s' if len(paths) != 1 else ''}")
    chosen = paths[rank or 0]
    notes = ReadNotes()
    records = _ascend(chosen, notes) if reader.name == "ascend" else _kineto(chosen, notes)
    notes.warn(stacklevel=3)  # the rows skipped, by file and reason, as the trace readers say them
    return records if not notes.lines() else MemoryRecords(**{**records.__dict__, "notes": tuple(notes.lines())})


def _ascend(rank_dir: Path, notes: ReadNotes) -> MemoryRecords:
    from . import trace_memory
    from .ascend.db import find_db

    out = rank_dir / OUTPUT
    db = find_db(out)
    if db is not None and not (out / "memory_record.csv").is_file():  # the db export (export_type db)
        return _ascend_db(rank_dir, db, notes)
    read = lambda name, fn, columns: fn(out / name, notes) if (out / name).is_file() else pd.DataFrame(columns=columns)  # noqa: E731
    totals = read("memory_record.csv", memory_csvs.memory_record, TOTALS_COLUMNS)
    modules = read("npu_module_mem.csv", memory_csvs.npu_module_mem, TOTALS_COLUMNS)
    blocks = read("operator_memory.csv", memory_csvs.operator_memory, BLOCK_COLUMNS)
    static = read("static_op_mem.csv", memory_csvs.static_op_mem, ["operator", "bytes"])
    steps = trace_memory.read(out / "trace_view.json", notes)[2] if (out / "trace_view.json").is_file() \
        else pd.DataFrame(columns=["step", "start_ns", "end_ns"])
    return MemoryRecords("torch_npu", rank_dir, _joined(totals, modules), blocks, steps, static, pool="PTA",
                         modules=tuple(modules["component"].unique()))


def _kineto(trace: Path, notes: ReadNotes) -> MemoryRecords:
    from . import trace_memory

    totals, blocks, steps, capacity = trace_memory.read(trace, notes, with_capacity=True)
    return MemoryRecords("kineto", trace, totals, blocks, steps, capacity_bytes=capacity)


def _ascend_db(rank_dir: Path, db: Path, notes: ReadNotes) -> MemoryRecords:
    from .ascend import memory_db

    totals, modules, blocks, steps = memory_db.read(db, notes)
    # the db keeps APP among the modules; components come from both, as from the CSVs
    return MemoryRecords("torch_npu db", rank_dir, _joined(totals, modules), blocks, steps,
                         pool="PTA", modules=tuple(modules["component"].unique()))


def _joined(totals: pd.DataFrame, modules: pd.DataFrame) -> pd.DataFrame:
    """memory_record's components and npu_module_mem's modules as one frame, each row's ``file`` said."""
    parts = [frame.assign(file=name) for frame, name in ((totals, RECORD), (modules, MODULES)) if len(frame)]
    return pd.concat(parts, ignore_index=True) if parts else totals.assign(file=RECORD)
