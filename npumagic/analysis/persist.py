"""A Summary as bytes and back, exactly: every DataFrame field column by column (values, dtype,
categories), dict fields as JSON, ``per_rank`` recursively; zlib-compressed JSON (a run's
verdict is stored by :mod:`.persist_verdict`).

Generic over the Summary's fields, so a field or step column added later is stored without
changes here, and without a new format number: an older reader skips a field it does not know,
and a Summary stored before a field existed reads back with the field's default (``placed``, the
findings' places: {}, so such a run names no place). A rank's own Summary shares most tables with the job's Summary (see
:func:`~npumagic.analysis.summary.combine`); a shared table is stored once (format 2). JSON keeps floats exact (Python writes the shortest repr that reads back to the
same double) and needs no extra dependency; the format number lets a later reader convert.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from typing import Any

import numpy as np
import pandas as pd

from .persist_plain import READABLE, document  # noqa: F401 - READABLE: read from here too
from .summary import Summary

FORMAT = 2
SAME = {"__same__": True}  # in a rank's Summary: the job Summary's own table
MAX_EMPTY_ROWS = 10**5  # rows of a stored table without columns


def _plain(value: Any) -> Any:
    """A JSON-able version of ``value`` (numpy scalars and arrays, paths, sets, frames)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, pd.DataFrame):
        return _frame(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _column(series: pd.Series) -> dict[str, Any]:
    dtype = series.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        return {"dtype": "category", "categories": _plain(list(dtype.categories)), "ordered": bool(dtype.ordered),
                "codes": series.cat.codes.tolist()}
    if dtype.kind == "M":
        return {"dtype": str(dtype), "values": series.astype("int64").tolist()}
    if isinstance(dtype, np.dtype) and dtype.kind in "biuf":  # tolist() already gives plain Python numbers
        return {"dtype": str(dtype), "values": series.tolist()}
    values = [None if v is pd.NA or v is pd.NaT else v for v in series.tolist()]
    return {"dtype": str(dtype), "values": _plain(values)}


def _frame(frame: pd.DataFrame) -> dict[str, Any]:
    return {"__frame__": True, "columns": [str(c) for c in frame.columns],
            "data": [_column(column) for _, column in frame.items()], "rows": len(frame)}


def _unframe(d: dict[str, Any]) -> pd.DataFrame:
    cols = {}
    for name, c in zip(d["columns"], d["data"]):
        if c["dtype"] == "category":
            dtype = pd.CategoricalDtype(c["categories"], ordered=c["ordered"])
            cols[name] = pd.Series(pd.Categorical.from_codes(c["codes"], dtype=dtype))
        elif c["dtype"].startswith("datetime64"):
            cols[name] = pd.Series(np.asarray(c["values"], dtype="int64")).astype(c["dtype"])
        else:
            values = [np.nan if v is None and c["dtype"].startswith("float") else v for v in c["values"]]
            try:
                cols[name] = pd.Series(values, dtype=c["dtype"])
            except (TypeError, ValueError):  # a dtype this pandas does not know: let it infer
                cols[name] = pd.Series(values)
    frame = pd.DataFrame(cols, columns=d["columns"])
    rows = d["rows"]
    if rows == len(frame):
        return frame
    # only a frame without columns has rows its data does not show: a larger claim is not ours
    if len(d["columns"]) or not isinstance(rows, int) or not 0 <= rows <= MAX_EMPTY_ROWS:
        raise ValueError(f"a stored table claims {str(rows)[:20]} rows and holds {len(frame)}")
    return frame.reindex(range(rows))


def _revive(value: Any) -> Any:
    if isinstance(value, dict):
        return _unframe(value) if value.get("__frame__") else {k: _revive(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_revive(v) for v in value]
    return value


def _encode(summary: Summary, job: Summary | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(summary):
        if f.metadata.get("persist") is False:  # e.g. the raw events: the trace files hold them
            continue
        value = getattr(summary, f.name)
        if f.name == "per_rank":
            out[f.name] = {str(r): (None if s is summary else _encode(s, summary)) for r, s in value.items()}
        elif job is not None and isinstance(value, pd.DataFrame) and value is getattr(job, f.name):
            out[f.name] = SAME
        else:
            out[f.name] = _plain(value)
    return out


def _decode(d: dict[str, Any], job: Summary | None = None) -> Summary:
    known = {f.name for f in dataclasses.fields(Summary)}
    fields = {k: (getattr(job, k) if v == SAME and job is not None else _revive(v))
              for k, v in d.items() if k in known and k != "per_rank"}
    details = _revive(d.get("details"))
    if "kernel_metrics" not in d and isinstance(details, pd.DataFrame) and {"ts_ns", "dur_ns"} <= set(details):
        # stored before the kernel metrics were normalized: the raw kernel_details columns
        from .sources.ascend.csv_tables import kernel_metrics_from_details

        rank = int((fields.get("meta") or {}).get("rank", 0))
        fields["kernel_metrics"] = kernel_metrics_from_details(details, rank)
    summary = Summary(**fields)
    for rank, s in (d.get("per_rank") or {}).items():
        summary.per_rank[int(rank)] = summary if s is None else _decode(s, summary)
    return summary


def dump_summary(summary: Summary) -> bytes:
    """``summary`` as compressed bytes (see :func:`load_summary`)."""
    text = json.dumps({"format": FORMAT, "summary": _encode(summary)}, allow_nan=True, separators=(",", ":"))
    return zlib.compress(text.encode("utf-8"), 6)


def load_summary(data: bytes) -> Summary:
    """The Summary :func:`dump_summary` wrote; raises ValueError for bytes it cannot read."""
    encoded = document(data)
    try:
        return _decode(encoded)
    except (KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:  # edited by hand or another tool
        raise ValueError(f"not a stored summary ({type(exc).__name__}: {exc})") from None
