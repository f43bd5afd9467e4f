"""Counter samples -> the normalized counters table (:data:`~npumagic.analysis.schema.COUNTER_COLUMNS`).

Chrome-trace counter events (``ph: "C"``, torch_npu's trace_view.json and Kineto) carry one
series per numeric arg, the unit in the arg's name ("Read(MB/s)", "KB", "MHz"). Values are
converted to the canonical units of the schema: msprof's "MB/s" and "KB" are binary
(bytes / 1024 / 1024: its HBM scale is HBMC / HBM_EVENT / 1024 / 1024), so they become B/s and
bytes exactly.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Iterable

import numpy as np
import pandas as pd

from .. import schema
from ._columns import to_ns

# unit written in the trace -> (canonical unit, factor)
UNITS = {"MB/s": ("B/s", 2.0**20), "KB": ("B", 1024.0), "MB": ("B", 2.0**20), "B": ("B", 1.0),
         "B/s": ("B/s", 1.0), "GB/s": ("B/s", 2.0**30), "MHz": ("MHz", 1.0), "%": ("%", 1.0)}
ID_ARGS = ("acc_id",)  # args naming an instance of the series, not a value
_UNIT_IN_KEY = re.compile(r"^(?P<label>.*?)\s*\((?P<unit>[^()]+)\)\s*$")


@functools.lru_cache(maxsize=4096)  # a trace repeats a few dozen (counter, arg) pairs thousands of times
def _series(name: str, key: str, many: bool) -> tuple[str, str, float]:
    """(series name, canonical unit, factor) for the numeric arg ``key`` of counter ``name``."""
    m = _UNIT_IN_KEY.match(key)
    if m:
        label, unit = m.group("label"), m.group("unit")
    else:
        label, unit = key, (key if key in UNITS else "")  # "MHz", "KB" name their unit; "value" is bare
    canonical, factor = UNITS.get(unit, (unit, 1.0))
    if "hit rate" in f"{name} {label}".lower():
        canonical, factor = "ratio", 1.0  # scaled per series in normalize_ratios
    return (f"{name}/{label}" if many else name), canonical, factor


def chrome_counters(events: Iterable[Any], process_names: dict[Any, str], rank: int, device: int) -> pd.DataFrame:
    """Counter events (with ``name``, ``pid``, ``ts`` in us, ``args``) -> counters rows.

    ``group`` is the event's process name (the lane torch_npu and Kineto draw them in).
    """
    rows: list[tuple[str, str, str, Any, float]] = []
    for e in events:
        args = e.args or {}
        numeric = [(k, v) for k, v in args.items() if k not in ID_ARGS and type(v) in (int, float)]
        if not numeric:
            continue
        ids = " ".join(f"{args[k]}" for k in ID_ARGS if k in args)
        group = process_names.get(e.pid, "Counters")
        base = f"{'Acc ' if 'acc_id' in args else ''}{ids}/{e.name}" if ids else e.name
        many = len(numeric) > 1
        for key, value in numeric:
            series, unit, factor = _series(base, key, many)
            rows.append((group, series, unit, e.ts, value * factor))
    if not rows:
        return schema.empty(schema.COUNTER_COLUMNS)
    group, name, unit, ts, value = zip(*rows)
    frame = pd.DataFrame({"rank": rank, "device": device, "group": list(group), "name": list(name),
                          "unit": list(unit), "ts_ns": to_ns(list(ts)), "value": np.array(value, dtype=float)})
    return normalize_ratios(frame)


def normalize_ratios(frame: pd.DataFrame) -> pd.DataFrame:
    """Hit rates as 0..1: a series with any value above 1 was written in percent.

    torch_npu's text export labels LLC hit rates "Hit Rate(%)" but writes fractions (0.875);
    its db export writes percent (85.9).
    """
    ratio = frame["unit"].astype(str) == "ratio"
    if not ratio.any():
        return frame
    percent = frame[ratio].groupby(frame.loc[ratio, "name"].astype(str))["value"].transform("max") > 1.0
    frame.loc[percent[percent].index, "value"] /= 100.0
    return frame
