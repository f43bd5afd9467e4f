"""torch_npu's memory CSVs, read whole: memory_record.csv (every component: PTA, GE, PTA+GE, APP),
operator_memory.csv (one row an allocation), npu_module_mem.csv (each CANN module's reserved memory
over time: HCCL, RUNTIME, ...) and static_op_mem.csv (static graph memory per operator).

Rows with a size that is negative, past :data:`SIZE_LIMIT_BYTES` or text, or a time that is no
decimal microsecond count, are skipped and counted in ``notes`` as the other readers do.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .._columns import decimal_us_to_ns_checked
from .._notes import ReadNotes, reading
from .files import read_csv

MB = 1024.0 * 1024.0
KB = 1024.0
# no device holds a petabyte: a size past it is a damaged cell, not a measurement
SIZE_LIMIT_BYTES = 2.0**50

TOTALS_COLUMNS = ["component", "device", "ts_ns", "allocated_bytes", "reserved_bytes"]
# module: the innermost nn.Module running at the allocation ("" where not recorded: torch_npu's CSVs)
BLOCK_COLUMNS = ["device", "operator", "module", "bytes", "alloc_ns", "free_ns"]


def _number(col: pd.Series) -> pd.Series:
    return pd.to_numeric(col.replace({"N/A": None, "": None}), errors="coerce")


def checked_sizes(raw: pd.DataFrame, column: str, scale: float) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``column`` in bytes (NaN where blank), and the masks of its bad cells by reason."""
    text = raw[column]
    value = _number(text).to_numpy(np.float64) * scale
    blank = ((text == "") | (text == "N/A")).to_numpy()
    slug = column.split("(")[0].strip().replace(" ", "_")
    return value, {f"text_in_{slug}": ~blank & np.isnan(value), f"negative_{slug}": value < 0,
                   f"absurd_{slug}": value > SIZE_LIMIT_BYTES}


def memory_record(path: Path, notes: ReadNotes) -> pd.DataFrame:
    """memory_record.csv, every component, in bytes (APP has its reserved memory only: NaN allocated)."""
    with reading(path):
        raw = read_csv(path, ("Component", "Timestamp(us)", "Total Allocated(MB)", "Total Reserved(MB)"), notes)
        ts, ts_ok = decimal_us_to_ns_checked(raw["Timestamp(us)"])
        allocated, bad_a = checked_sizes(raw, "Total Allocated(MB)", MB)
        reserved, bad_r = checked_sizes(raw, "Total Reserved(MB)", MB)
        good = notes.count(path, len(raw), "rows", text_or_out_of_range_Timestamp=~ts_ok, **bad_a, **bad_r)
    device = raw["Device Type"] if "Device Type" in raw else pd.Series("NPU", index=raw.index)
    return pd.DataFrame({"component": raw["Component"].to_numpy()[good], "device": device.to_numpy()[good],
                         "ts_ns": ts[good], "allocated_bytes": allocated[good], "reserved_bytes": reserved[good]},
                        columns=TOTALS_COLUMNS)


def npu_module_mem(path: Path, notes: ReadNotes) -> pd.DataFrame:
    """npu_module_mem.csv: each module's reserved device memory over time (allocated: NaN)."""
    with reading(path):
        raw = read_csv(path, ("Component", "Timestamp(us)", "Total Reserved(MB)"), notes)
        ts, ts_ok = decimal_us_to_ns_checked(raw["Timestamp(us)"])
        reserved, bad = checked_sizes(raw, "Total Reserved(MB)", MB)
        good = notes.count(path, len(raw), "rows", text_or_out_of_range_Timestamp=~ts_ok,
                           no_Total_Reserved=np.isnan(reserved), **bad)
    device = raw["Device"] if "Device" in raw else pd.Series("NPU", index=raw.index)
    return pd.DataFrame({"component": raw["Component"].to_numpy()[good], "device": device.to_numpy()[good],
                         "ts_ns": ts[good], "allocated_bytes": np.nan, "reserved_bytes": reserved[good]},
                        columns=TOTALS_COLUMNS)


def operator_memory(path: Path, notes: ReadNotes) -> pd.DataFrame:
    """operator_memory.csv: one block a row (free_ns -1: not released within the capture)."""
    with reading(path):
        raw = read_csv(path, ("Name", "Size(KB)", "Allocation Time(us)"), notes)
        size, bad = checked_sizes(raw, "Size(KB)", KB)
        alloc, alloc_ok = decimal_us_to_ns_checked(raw["Allocation Time(us)"])
        release = raw["Release Time(us)"] if "Release Time(us)" in raw else pd.Series("", index=raw.index)
        free, free_ok = decimal_us_to_ns_checked(release)
        released = ~((release == "") | (release == "N/A")).to_numpy()
        good = notes.count(path, len(raw), "rows", text_or_out_of_range_Allocation_Time=~alloc_ok,
                           text_or_out_of_range_Release_Time=released & ~free_ok, no_Size=np.isnan(size),
                           released_before_allocated=released & free_ok & (free < alloc), **bad)
    device = raw["Device Type"] if "Device Type" in raw else pd.Series("NPU", index=raw.index)
    return pd.DataFrame({"device": device.to_numpy()[good], "operator": raw["Name"].to_numpy()[good],
                         "module": "", "bytes": size[good], "alloc_ns": alloc[good],
                         "free_ns": np.where(released, free, -1)[good]}, columns=BLOCK_COLUMNS)


def static_op_mem(path: Path, notes: ReadNotes) -> pd.DataFrame:
    """static_op_mem.csv: the static graph memory of each operator (columns ``operator``, ``bytes``)."""
    with reading(path):
        raw = read_csv(path, ("Op Name", "Size(KB)"), notes)
        size, bad = checked_sizes(raw, "Size(KB)", KB)
        good = notes.count(path, len(raw), "rows", no_Size=np.isnan(size), **bad)
    return pd.DataFrame({"operator": raw["Op Name"].to_numpy()[good], "bytes": size[good]})
