"""Student's t quantile for a two-sided interval, in plain Python: the alert band of ``npumagic
check`` needs one, and scipy's costs numpy and scipy's imports (a quarter of a second) for a
number the closed form gives.

For integer degrees of freedom the probability that ``|T| < t`` is a finite sum in ``θ =
atan(t / √df)`` (Abramowitz & Stegun 26.7.3-4); it rises with θ over (0, π/2), so bisection finds
θ to the last bit of a double."""

from __future__ import annotations

import math


def _within(theta: float, df: int) -> float:
    """P(|T| < √df·tan θ) for T with ``df`` degrees of freedom."""
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):  # 1 + 2/3 cos² + (2·4)/(3·5) cos⁴ + ...
            term *= c2 * 2 * k / (2 * k + 1)
            total += term
        return 2 / math.pi * (theta + s * math.cos(theta) * total)
    term, total = 1.0, 1.0
    for k in range(1, df // 2):  # 1 + 1/2 cos² + (1·3)/(2·4) cos⁴ + ...
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return s * total


def two_sided(df: int, confidence: float) -> float:
    """The t with P(|T| < t) = ``confidence`` for ``df`` (a positive integer) degrees of freedom:
    scipy's ``stdtrit(df, 1 - (1 - confidence) / 2)``."""
    if not (isinstance(df, int) and df > 0 and 0 < confidence < 1):
        raise ValueError(f"two_sided needs an integer df > 0 and a confidence in (0, 1), not {df!r}, {confidence!r}")
    lo, hi = 0.0, math.pi / 2
    while True:
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            return math.sqrt(df) * math.tan(mid)
        lo, hi = (mid, hi) if _within(mid, df) < confidence else (lo, mid)
