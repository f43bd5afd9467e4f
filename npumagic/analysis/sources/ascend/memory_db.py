"""The memory tables of torch_npu's db export (``ascend_pytorch_profiler*.db``), as the memory CSVs'
readers give them (:mod:`.memory_csvs`): MEMORY_RECORD (every component), OP_MEMORY (one block a
row), NPU_MODULE_MEM (each module's reserved memory, its name from ENUM_MODULE) and STEP_TIME's
step windows. The db holds bytes and nanoseconds where the CSVs hold MB, KB and microseconds.
"""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import numpy as np
import pandas as pd

from .._notes import ReadNotes
from .db import _Db, connect
from .memory_csvs import BLOCK_COLUMNS, SIZE_LIMIT_BYTES, TOTALS_COLUMNS

STEP_COLUMNS = ["step", "start_ns", "end_ns"]


def _sizes(values: pd.Series) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    value = pd.to_numeric(values, errors="coerce").to_numpy(np.float64)
    return value, {"negative_size": value < 0, "absurd_size": value > SIZE_LIMIT_BYTES}


def _device(ids: pd.Series) -> list[str]:
    return [f"NPU:{d}" if d >= 0 else "CPU" for d in pd.to_numeric(ids, errors="coerce").fillna(-1).astype(np.int64)]


def read(path: Path, notes: ReadNotes) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(totals, modules, blocks, steps) of the db at ``path``."""
    with closing(connect(path)) as conn:
        db = _Db(conn, path)
        return _totals(db, notes), _modules(db, notes), _blocks(db, notes), _steps(db)


def _totals(db: _Db, notes: ReadNotes) -> pd.DataFrame:
    if not db.has("MEMORY_RECORD"):
        return pd.DataFrame(columns=TOTALS_COLUMNS)
    raw = db.query("SELECT component, timestamp, totalAllocated, totalReserved, deviceId FROM MEMORY_RECORD")
    allocated, bad_a = _sizes(raw["totalAllocated"])
    reserved, bad_r = _sizes(raw["totalReserved"])
    good = notes.count(f"{db.path}:MEMORY_RECORD", len(raw), "rows", **{f"{k}_allocated": v for k, v in bad_a.items()},
                       **{f"{k}_reserved": v for k, v in bad_r.items()})
    return pd.DataFrame({"component": db.strings(raw["component"]).to_numpy()[good],
                         "device": np.asarray(_device(raw["deviceId"]), dtype=object)[good],
                         "ts_ns": raw["timestamp"].astype(np.int64).to_numpy()[good],
                         "allocated_bytes": allocated[good], "reserved_bytes": reserved[good]}, columns=TOTALS_COLUMNS)


def _modules(db: _Db, notes: ReadNotes) -> pd.DataFrame:
    if not db.has("NPU_MODULE_MEM"):
        return pd.DataFrame(columns=TOTALS_COLUMNS)
    raw = db.query("SELECT moduleId, timestampNs, totalReserved, deviceId FROM NPU_MODULE_MEM")
    names = db.enum("ENUM_MODULE")
    reserved, bad = _sizes(raw["totalReserved"])
    good = notes.count(f"{db.path}:NPU_MODULE_MEM", len(raw), "rows", **bad)
    component = [names.get(int(m), str(m)) for m in raw["moduleId"]]
    return pd.DataFrame({"component": np.asarray(component, dtype=object)[good],
                         "device": np.asarray(_device(raw["deviceId"]), dtype=object)[good],
                         "ts_ns": raw["timestampNs"].astype(np.int64).to_numpy()[good], "allocated_bytes": np.nan,
                         "reserved_bytes": reserved[good]}, columns=TOTALS_COLUMNS)


def _blocks(db: _Db, notes: ReadNotes) -> pd.DataFrame:
    if not db.has("OP_MEMORY"):
        return pd.DataFrame(columns=BLOCK_COLUMNS)
    raw = db.query("SELECT name, size, allocationTime, releaseTime, deviceId FROM OP_MEMORY")
    size, bad = _sizes(raw["size"])
    alloc = pd.to_numeric(raw["allocationTime"], errors="coerce")
    free = pd.to_numeric(raw["releaseTime"], errors="coerce")
    good = notes.count(f"{db.path}:OP_MEMORY", len(raw), "rows", no_allocation_time=alloc.isna().to_numpy(),
                       no_size=np.isnan(size), released_before_allocated=(free < alloc).to_numpy(), **bad)
    name = db.strings(raw["name"]).to_numpy()[good]
    return pd.DataFrame({"device": np.asarray(_device(raw["deviceId"]), dtype=object)[good], "operator": name,
                         "module": "", "bytes": size[good], "alloc_ns": alloc.to_numpy()[good].astype(np.int64),
                         "free_ns": free.fillna(-1).to_numpy()[good].astype(np.int64)}, columns=BLOCK_COLUMNS)


def _steps(db: _Db) -> pd.DataFrame:
    if not db.has("STEP_TIME"):
        return pd.DataFrame(columns=STEP_COLUMNS)
    raw = db.query("SELECT id, startNs, endNs FROM STEP_TIME")
    return pd.DataFrame({"step": raw["id"].astype(np.int64), "start_ns": raw["startNs"].astype(np.int64),
                         "end_ns": raw["endNs"].astype(np.int64)}).sort_values("start_ns").reset_index(drop=True)
