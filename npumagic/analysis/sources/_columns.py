"""Shared column builders for the readers: exact time conversion and id cleaning, vectorised."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from ...errors import TraceError
from ._numbers import US_LIMIT, floats_to_ns as _floats

__all__ = ["US_LIMIT", "to_ns", "to_ns_checked", "decimal_us_to_ns_checked", "to_int", "categorical", "small_int",
           "step_ids"]


def to_ns(values: Sequence) -> np.ndarray:
    """Microsecond timestamps/durations (numbers or decimal strings) -> int64 nanoseconds.

    Strings are converted exactly: torch_npu writes epoch microseconds with nanosecond
    decimals ("1736408883704643.212\t"), which float64 cannot hold. Numbers were already
    rounded to float64 by the file's writer, so they are rounded to the nearest nanosecond.
    Missing, unparsable or out-of-range values become 0 (see :func:`to_ns_checked`).
    """
    return to_ns_checked(values)[0]


def to_ns_checked(values: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """As :func:`to_ns`, plus a boolean mask of the values that were valid (a finite number or
    decimal string within the int64 nanosecond range; not missing)."""
    if pd.api.types.infer_dtype(values, skipna=True) in ("floating", "integer", "mixed-integer-float", "empty"):
        try:
            num = np.array(values, dtype=np.float64)  # None -> nan
        except OverflowError:  # ints past float64
            num = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=float)
        return _floats(num)
    arr = np.asarray(values, dtype=object)
    out = np.zeros(arr.shape[0], dtype=np.int64)
    ok = np.zeros(arr.shape[0], dtype=bool)
    is_str = np.fromiter((isinstance(v, str) for v in arr), bool, arr.size)
    if (~is_str).any():
        num = pd.to_numeric(pd.Series(arr[~is_str], dtype=object), errors="coerce").to_numpy(dtype=float)
        out[~is_str], ok[~is_str] = _floats(num)
    if is_str.any():
        out[is_str], ok[is_str] = decimal_us_to_ns_checked(pd.Series(arr[is_str], dtype=object))
    return out, ok


def decimal_us_to_ns_checked(text: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Decimal microsecond strings -> int64 nanoseconds, exactly (digits past the ns are cut;
    invalid ones become 0), plus the mask of valid strings (decimals whose nanoseconds fit in int64)."""
    # One pass a string (the pandas string methods are Python loops too, one per method).
    ns_values, valid = [], []
    for value in text.astype(str).tolist():
        ns = _decimal_us_to_ns(value.strip()) if isinstance(value, str) else None  # astype(str) keeps NaN
        ns_values.append(ns or 0)
        valid.append(ns is not None)
    return np.array(ns_values, dtype=np.int64), np.array(valid, dtype=bool)


def _decimal_us_to_ns(text: str) -> int | None:
    """``-?D{1,16}(.D*)?`` microseconds (D a decimal digit) -> nanoseconds, digits past the ns
    cut; None for anything else or past :data:`US_LIMIT`."""
    negative = text.startswith("-")
    whole, _, frac = (text[1:] if negative else text).partition(".")
    if not (whole.isdecimal() and len(whole) <= 16 and (frac == "" or frac.isdecimal())):
        return None
    us = int(whole)
    if us > US_LIMIT:
        return None
    ns = us * 1000 + int(frac[:3].ljust(3, "0"))
    return -ns if negative else ns


def to_int(values: Sequence, missing: int = -1) -> np.ndarray:
    """Ids that may be ints, numeric strings or None -> int64 (``missing`` where absent)."""
    if pd.api.types.infer_dtype(values, skipna=False) == "integer":
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    num = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce")
    return num.fillna(missing).to_numpy(dtype=np.float64).astype(np.int64)


def categorical(values: Sequence) -> pd.Categorical:
    return pd.Categorical(pd.Series(values, dtype=object).fillna(""))


def small_int(value: object, path: object, what: str, default: int = 0, limit: int = 2**31) -> int:
    """A non-negative id (rank, world size) from a JSON value, or TraceError naming ``what``."""
    if value is None or value == "":
        return default
    try:
        number = int(value) if not isinstance(value, float) or value.is_integer() else None
    except (TypeError, ValueError, OverflowError):
        number = None
    if isinstance(value, bool) or number is None or not 0 <= number < limit:
        raise TraceError(path, f"{what} is {str(value)[:40]!r}; expected an integer from 0 to {limit - 1}")
    return number


def step_ids(names: pd.Series, pattern: str) -> tuple[pd.Series, np.ndarray]:
    """Step numbers of the names matching ``pattern`` (one group): (int64 ids of the good
    ones, indexed like ``names``; mask over ``names`` of matches whose number is out of range)."""
    text = names.astype(str).str.extract(pattern)[0]
    matched = text.notna().to_numpy()
    big = matched & (text.fillna("").str.len().to_numpy() > 15)
    good = text[matched & ~big]
    return good.astype(np.int64), big
