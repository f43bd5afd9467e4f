"""A stored Summary's bytes read without pandas or numpy: inflated within the limits that refuse
a zlib bomb, parsed, and one table field's columns as plain lists. ``npumagic check`` reads the
host samples of a stored run this way (:mod:`.trust`) and imports neither; :mod:`.persist` reads
the whole Summary through the same :func:`document`."""

from __future__ import annotations

import json
import math
import zlib
from typing import Any

READABLE = (1, 2)  # format 1 stored a rank's shared tables again
MAX_INFLATED = 2**30  # a stored Summary's JSON: real ones are a few MB
MAX_RATIO = 100  # inflated / compressed past RATIO_FLOOR: JSON of numbers compresses ~5-10:1, a bomb 1000:1
RATIO_FLOOR = 64 * 2**20


def _inflate(data: bytes) -> bytes:
    """``data`` decompressed, refused (ValueError) past :data:`MAX_INFLATED` or, beyond
    :data:`RATIO_FLOOR`, :data:`MAX_RATIO` times its size (a zlib bomb), before the memory is spent."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"not a stored summary (a {type(data).__name__}, not bytes)")
    limit = min(MAX_INFLATED, max(RATIO_FLOOR, MAX_RATIO * len(data)))
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, limit)
    if inflater.unconsumed_tail:
        raise ValueError(f"a stored summary inflating past {limit // 2**20} MiB from {len(data)} bytes (a zlib bomb?)")
    if not inflater.eof:
        raise ValueError("not a stored summary (its compressed data is cut short)")
    return out


def document(data: bytes) -> dict[str, Any]:
    """The stored Summary's encoded fields (``{field: value}``, tables as ``{"columns", "data",
    "rows"}``); raises ValueError for bytes it cannot read."""
    try:
        doc = json.loads(_inflate(data).decode("utf-8"))
    except (zlib.error, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"not a stored summary ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") not in READABLE:
        raise ValueError(f"stored summary format {doc.get('format') if isinstance(doc, dict) else '?'} "
                         f"is not one of {READABLE}")
    if not isinstance(doc.get("summary"), dict):
        raise ValueError("not a stored summary (no summary in it)")
    return doc["summary"]


def table_columns(data: bytes, field: str) -> dict[str, list] | None:
    """Table ``field`` of the stored Summary as ``{column: values}`` (categories as their labels,
    a missing float as NaN); {} where the Summary has no such table (one stored before it
    existed). Raises ValueError for bytes it cannot read."""
    table = document(data).get(field)
    if not (isinstance(table, dict) and table.get("__frame__")):
        return {}
    try:
        return {name: _values(c) for name, c in zip(table["columns"], table["data"])}
    except (KeyError, TypeError, IndexError) as exc:
        raise ValueError(f"not a stored summary ({type(exc).__name__}: {exc})") from None


def _values(column: dict[str, Any]) -> list:
    if column["dtype"] == "category":
        labels = column["categories"]
        return [labels[code] if code >= 0 else None for code in column["codes"]]
    if column["dtype"].startswith("float"):
        return [math.nan if v is None else v for v in column["values"]]
    return list(column["values"])
