"""torch_npu's JSON and CSV files, read as torch_npu writes them and as damaged copies of them come.

A byte-order mark, NaN in JSON, bytes that are no UTF-8, a row cut short where the file ends or
with more fields than the header, trailing whitespace in every cell: each is read through or
said (a :class:`~npumagic.errors.TraceError` naming the file, or a count in ``ReadNotes``), never
turned into a silent default.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from ....errors import TraceError
from .._notes import ReadNotes


def read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        raw = path.read_bytes()
        try:  # msgspec: 3x faster than json on the many small files of a many-rank job
            data = msgspec.json.decode(raw.removeprefix(b"\xef\xbb\xbf"))
        except msgspec.DecodeError:  # json also takes NaN and Infinity (Python's json.dump writes them)
            data = json.loads(raw.decode("utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(path, f"not valid JSON ({exc})") from None
    except RecursionError:
        raise TraceError(path, "JSON nested too deeply to be torch_npu output") from None
    return json_object(data, path, "the document")


def json_object(value: Any, path: Path, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TraceError(path, f"{what} is a {type(value).__name__}; expected a JSON object")
    return value


def read_csv(path: Path, required: tuple[str, ...] = (), notes: ReadNotes | None = None) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True, encoding="utf-8-sig",
                            encoding_errors="replace")  # one stray byte costs its cell, not the rank
        ragged = not isinstance(frame.index, pd.RangeIndex)  # pandas took a longer first row's cells as the index
    except pd.errors.ParserError as exc:
        if not re.search(r"Expected \d+ fields in line \d+, saw \d+", str(exc)):
            raise TraceError(path, f"not a readable CSV ({exc})") from None
        ragged = True
    except (pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as exc:
        raise TraceError(path, f"not a readable CSV ({exc})") from None
    if ragged:  # a row with more fields than the header shifts every cell after it: leave it out
        frame = _read_ragged_csv(path, notes)
    frame.columns = [str(c).strip() for c in frame.columns]
    if any("\ufffd" in c for c in frame.columns):
        raise TraceError(path, "not a readable CSV (its header holds bytes that are no UTF-8: a binary file?)")
    duplicates = [c for c in frame.columns if re.fullmatch(r".+\.\d+", c) and c.rsplit(".", 1)[0] in frame.columns]
    if duplicates and notes is not None:  # pandas renamed the second 'Name' to 'Name.1'
        notes.remark(path, ", ".join(f"duplicate column {c.rsplit('.', 1)[0]!r}" for c in duplicates)
                     + ": the first is used")
    lacking = [c for c in required if c not in frame.columns]
    if lacking:
        raise TraceError(path, f"missing columns {lacking}; expected at least {list(required)}")
    if len(frame) and not _ends_a_line(path):  # torch_npu ends every row: the file was cut inside its last
        frame = frame.iloc[:-1]
        if notes is not None:
            notes.count(path, 1, "rows", cut_short_where_the_file_ends=np.ones(1, dtype=bool))
    # trailing whitespace ("...643.212\t"): one pass over every cell, not a pandas string method per column
    cells, odd = _strip(frame.to_numpy(dtype=object))  # odd: the cell held bytes that are no UTF-8
    replaced = int(odd.astype(bool).sum())
    if replaced and notes is not None:
        notes.remark(path, f"{replaced} cell{'s' if replaced > 1 else ''} held bytes that are no UTF-8 (shown as \ufffd; "
                           "a number there is skipped as text)")
    # one dtype for the whole block (every column was read as text): 6x faster than astype per column
    dtypes = frame.dtypes.unique()
    stripped = pd.DataFrame(cells, index=frame.index, columns=frame.columns, dtype=dtypes[0] if len(dtypes) == 1 else None)
    return stripped if len(dtypes) <= 1 else stripped.astype(frame.dtypes.to_dict())


def _read_ragged_csv(path: Path, notes: ReadNotes | None) -> pd.DataFrame:
    """A CSV some of whose rows have more fields than its header, read row by row (only such a
    damaged file comes here): those rows are left out and counted, the others kept whole."""
    with path.open(newline="", encoding="utf-8-sig", errors="replace") as fh:
        header, *rows = list(csv.reader(fh, skipinitialspace=True))
    longer = np.array([len(r) > len(header) for r in rows], dtype=bool)
    if notes is not None and longer.any():  # the rows kept are counted where they are read
        notes.count(path, int(longer.sum()), "rows", more_fields_than_the_header=np.ones(int(longer.sum()), bool))
    kept = [r + [""] * (len(header) - len(r)) for r, bad in zip(rows, longer) if not bad and r]
    return pd.DataFrame(kept, columns=header, dtype=object) if kept else pd.DataFrame(columns=header, dtype=object)


def _ends_a_line(path: Path) -> bool:
    with path.open("rb") as fh:
        fh.seek(-1, 2)
        return fh.read(1) in (b"\n", b"\r")


_strip = np.frompyfunc(lambda v: (v.strip(), "\ufffd" in v) if isinstance(v, str) else (v, False), 1, 2)
