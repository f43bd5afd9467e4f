"""Microsecond floats to int64 nanoseconds, exactly as far as float64 allows: numpy only, so the
decode workers (:mod:`._pool`) use it without importing pandas."""

from __future__ import annotations

import numpy as np

US_LIMIT = 9.2e15  # |microseconds| whose nanoseconds still fit in int64


def floats_to_ns(num: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 microseconds -> (int64 nanoseconds, mask of the finite, in-range ones); 0 elsewhere."""
    ok = np.isfinite(num) & (np.abs(num) <= US_LIMIT)
    return float_us_to_ns(np.where(ok, num, 0.0)), ok


def float_us_to_ns(us: np.ndarray) -> np.ndarray:
    # Epoch microseconds * 1000 exceed 2**53: scale the whole and fractional parts separately.
    us = np.clip(us, -US_LIMIT, US_LIMIT)
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000.0).astype(np.int64)
