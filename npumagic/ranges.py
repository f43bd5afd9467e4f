"""``FIRST:LAST`` ranges of ``--step-range`` and ``--zoom``, checked apart from the views that
draw them, so the CLI refuses a malformed range before it reads a trace or imports matplotlib."""

from __future__ import annotations

import math

from .errors import NpumagicError


def view_range(text: str | None, kind, option: str):
    """``FIRST:LAST`` of ``--step-range``/``--zoom`` as a pair of ``kind``; None for None.
    A malformed or reversed range raises NpumagicError naming the option."""
    if text is None:
        return None
    try:
        a, b = (kind(x) for x in str(text).split(":"))
    except ValueError:
        raise NpumagicError(f"{option} takes FIRST:LAST, got {text!r}") from None
    if not all(math.isfinite(x) and abs(x) < 1e12 for x in (a, b)):  # 1e400 is inf; 1e12 ms is 30 years
        raise NpumagicError(f"{option} {text!r}: FIRST and LAST must be finite numbers below 1e12")
    if b < a:
        raise NpumagicError(f"{option} {text!r}: the end comes before the start")
    return a, b
