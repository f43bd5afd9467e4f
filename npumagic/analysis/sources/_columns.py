"""Shared column builders for the readers: exact time conversion and id cleaning, vectorised."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd


def to_ns(values: Sequence) -> np.ndarray:
    """Microsecond timestamps/durations (numbers or decimal strings) -> int64 nanoseconds.

    Strings are converted exactly: torch_npu writes epoch microseconds with nanosecond
    decimals ("1736408883704643.212\t"), which float64 cannot hold. Numbers were already
    rounded to float64 by the file's writer, so they are rounded to the nearest nanosecond.
    Missing or unparsable values become 0.
    """
    if pd.api.types.infer_dtype(values, skipna=True) in ("floating", "integer", "mixed-integer-float", "empty"):
        num = np.nan_to_num(np.array(values, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)  # None -> 0
        return _float_us_to_ns(num)
    arr = np.asarray(values, dtype=object)
    out = np.zeros(arr.shape[0], dtype=np.int64)
    is_str = np.fromiter((isinstance(v, str) for v in arr), bool, arr.size)
    if (~is_str).any():
        num = pd.to_numeric(pd.Series(arr[~is_str]), errors="coerce").to_numpy(dtype=float)
        out[~is_str] = _float_us_to_ns(np.nan_to_num(num, nan=0.0, posinf=0.0, neginf=0.0))
    if is_str.any():
        out[is_str] = decimal_us_to_ns(pd.Series(arr[is_str], dtype=object))
    return out


def _float_us_to_ns(us: np.ndarray) -> np.ndarray:
    # Epoch microseconds * 1000 exceed 2**53: scale the whole and fractional parts separately.
    us = np.clip(us, -9.2e15, 9.2e15)
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000.0).astype(np.int64)


def decimal_us_to_ns(text: pd.Series) -> np.ndarray:
    """Decimal microsecond strings -> int64 nanoseconds, exactly (digits past the ns are cut)."""
    s = text.astype(str).str.strip()
    ok = s.str.fullmatch(r"-?\d+(\.\d*)?")
    s = s.where(ok, "0")
    neg = s.str.startswith("-")
    parts = s.str.lstrip("-").str.partition(".")
    whole = parts[0].astype(np.int64).to_numpy()
    frac = parts[2].str.ljust(3, "0").str[:3].astype(np.int64).to_numpy()
    ns = whole * 1000 + frac
    return np.where(neg.to_numpy(), -ns, ns)


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
