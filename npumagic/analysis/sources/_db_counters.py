"""The sampled hardware tables of torch_npu's db export (``ascend_pytorch_profiler*.db``) as
counters, named as the text export names them so both exports feed the same analyses.

msprof's db units are already canonical: time in ns, bandwidth in B/s, memory in bytes,
frequency in MHz; LLC hit rates are percent (the text export writes fractions).
"""

from __future__ import annotations

import sqlite3

import numpy as np
import pandas as pd

from .. import schema

# table -> the columns it needs; a table that lacks one is skipped (older CANN versions differ)
TABLES = {
    "HBM": ("deviceId", "timestampNs", "bandwidth", "hbmId", "type"),
    "LLC": ("deviceId", "llcId", "timestampNs", "hitRate", "throughput", "mode"),
    "AICORE_FREQ": ("deviceId", "timestampNs", "freq"),
    "NPU_MEM": ("type", "ddr", "hbm", "timestampNs", "deviceId"),
    "ACC_PMU": ("accId", "readBwLevel", "writeBwLevel", "readOstLevel", "writeOstLevel", "timestampNs", "deviceId"),
    "SOC_BANDWIDTH_LEVEL": ("l2BufferBwLevel", "mataBwLevel", "timestampNs", "deviceId"),
}


def _tables(con: sqlite3.Connection) -> dict[str, set[str]]:
    names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    return {n: {r[1] for r in con.execute(f'PRAGMA table_info("{n}")')} for n in names if n in TABLES or n == "STRING_IDS"}


def _strings(con: sqlite3.Connection, present: dict[str, set[str]]) -> dict[int, str]:
    if "STRING_IDS" not in present:
        return {}
    return {int(i): str(v) for i, v in con.execute("SELECT id, value FROM STRING_IDS")}


def _ns(ts: pd.Series) -> np.ndarray:
    """Integer nanoseconds; NUMERIC columns may come back as floats (exact only below 2**53)."""
    if pd.api.types.is_integer_dtype(ts):
        return ts.to_numpy(dtype=np.int64)
    return np.rint(pd.to_numeric(ts, errors="coerce").fillna(0).to_numpy(dtype=float)).astype(np.int64)


def _frame(group: str, name, unit: str, ts, value, device) -> pd.DataFrame:
    return pd.DataFrame({"device": np.asarray(device, dtype=np.int64), "group": group, "name": name, "unit": unit,
                         "ts_ns": _ns(ts),
                         "value": pd.to_numeric(pd.Series(value), errors="coerce").to_numpy(dtype=float)})


def db_counters(con: sqlite3.Connection, rank: int) -> pd.DataFrame:
    """Counters (:data:`~npumagic.analysis.schema.COUNTER_COLUMNS`) from the tables HBM, LLC,
    AICORE_FREQ, NPU_MEM, ACC_PMU and SOC_BANDWIDTH_LEVEL of a torch_npu db export."""
    present = _tables(con)
    usable = {t for t, cols in TABLES.items() if t in present and set(cols) <= present[t]}
    strings = _strings(con, present)
    label = lambda ids: pd.Series(ids).map(lambda i: strings.get(int(i), str(i)) if pd.notna(i) else "")  # noqa: E731
    read = lambda table: pd.read_sql_query(f'SELECT {", ".join(TABLES[table])} FROM "{table}"', con)  # noqa: E731
    parts = []
    if "HBM" in usable:
        d = read("HBM")
        name = "HBM " + d["hbmId"].astype(str) + "/" + label(d["type"]).str.capitalize()
        parts.append(_frame("HBM", name, "B/s", d["timestampNs"], d["bandwidth"], d["deviceId"]))
    if "LLC" in usable:
        d = read("LLC")
        prefix = "LLC " + d["llcId"].astype(str) + " " + label(d["mode"]).str.capitalize()
        parts.append(_frame("LLC", prefix + "/Hit Rate", "ratio", d["timestampNs"], d["hitRate"] / 100.0,
                            d["deviceId"]))  # percent in the db, always
        parts.append(_frame("LLC", prefix + "/Throughput", "B/s", d["timestampNs"], d["throughput"], d["deviceId"]))
    if "AICORE_FREQ" in usable:
        d = read("AICORE_FREQ")
        parts.append(_frame("AI Core Freq", "AI Core Freq", "MHz", d["timestampNs"], d["freq"], d["deviceId"]))
    if "NPU_MEM" in usable:
        d = read("NPU_MEM")
        who = label(d["type"]).map({"app": "APP", "device": "Device"}).fillna(label(d["type"]))
        for column, memory in (("hbm", "HBM"), ("ddr", "DDR")):
            parts.append(_frame("NPU MEM", who + "/" + memory, "B", d["timestampNs"], d[column], d["deviceId"]))
    if "ACC_PMU" in usable:
        d = read("ACC_PMU")
        acc = "Acc " + d["accId"].astype(str) + "/"
        for column, series in (("readBwLevel", "read_bandwidth"), ("writeBwLevel", "write_band_width"),
                               ("readOstLevel", "read_ost"), ("writeOstLevel", "write_ost")):
            parts.append(_frame("Acc PMU", acc + series, "", d["timestampNs"], d[column], d["deviceId"]))
    if "SOC_BANDWIDTH_LEVEL" in usable:
        d = read("SOC_BANDWIDTH_LEVEL")
        for column, series in (("l2BufferBwLevel", "L2 Buffer Bw Level"), ("mataBwLevel", "Mata Bw Level")):
            parts.append(_frame("Stars Soc Info", series, "", d["timestampNs"], d[column], d["deviceId"]))
    if not parts:
        return schema.empty(schema.COUNTER_COLUMNS)
    frame = pd.concat(parts, ignore_index=True).assign(rank=rank)
    return frame[list(schema.COUNTER_COLUMNS)]

