"""Two runs' memory side by side (:func:`compare_memory` of two
:class:`~npumagic.analysis.memory_view.MemoryView`): the peak's change with a verdict, and the
operators whose allocations changed most.

The verdict takes the steps' own peaks as the samples (as the time comparison takes step times):
B differs from A where the difference of the mean step peaks lies beyond its 95% interval (Welch,
t with Welch-Satterthwaite degrees of freedom) and beyond :data:`~.thresholds.MEMORY_CHANGE_SHARE`
of A's peak (at least :data:`~.thresholds.MEMORY_CHANGE_MIN_BYTES`): a step's peak is the same
from step to step to the byte in most loops, so an interval of zero width alone would call a
few bytes a change. With fewer than two steps a side, the capture's peaks are compared against
that floor alone, and the verdict says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .thresholds import MEMORY_CHANGE_MIN_BYTES, MEMORY_CHANGE_SHARE

CONFIDENCE = 0.95
OPERATOR_DELTA_COLUMNS = ["name", "allocations_a", "allocations_b", "bytes_a", "bytes_b", "delta_bytes"]
OPERATOR_CHANGE_COLUMNS = ["name", "bytes_a", "bytes_b", "delta_bytes", "interval_low_bytes", "interval_high_bytes",
                           "floor_bytes", "change"]


@dataclass(frozen=True)
class MemoryComparison:
    peak_a: float | None
    peak_b: float | None
    delta_bytes: float | None  # B - A: of the mean step peaks where both have 2+ steps, else of the peaks
    interval: tuple[float, float] | None  # its 95% interval (None: too few steps)
    floor_bytes: float
    verdict: str  # "higher", "lower", "same" or "unknown"
    operators: pd.DataFrame  # OPERATOR_DELTA_COLUMNS, per step where both runs have steps, by |delta|
    per_step: bool
    # OPERATOR_CHANGE_COLUMNS: the operators allocating more or less beyond noise and the floor
    operator_changes: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=OPERATOR_CHANGE_COLUMNS))

    def sentence(self, a: str, b: str) -> str:
        from .memory_view import _size

        if self.verdict == "unknown":
            return f"memory: {a} or {b} recorded no peak to compare"
        how = (f"mean step peak {_size(self.peak_a)} -> {_size(self.peak_b)}" if self.interval
               else f"peak {_size(self.peak_a)} -> {_size(self.peak_b)} (one step or none a side: no noise estimate)")
        ci = f", 95% interval {_size(self.interval[0])} to {_size(self.interval[1])}" if self.interval else ""
        said = {"higher": f"{b} needs MORE memory than {a}", "lower": f"{b} needs LESS memory than {a}",
                "same": f"{b} needs the same memory as {a} (within noise and {_size(self.floor_bytes)})"}[self.verdict]
        return f"{said}: {how}, {'+' if self.delta_bytes >= 0 else ''}{_size(self.delta_bytes)}{ci}"


def compare_memory(a, b) -> MemoryComparison:
    """B's memory against A's (each a MemoryView)."""
    pa, pb = _step_peaks(a), _step_peaks(b)
    per_step = len(pa) >= 2 and len(pb) >= 2
    peak_a = float(pa.mean()) if per_step else a.peak_allocated_bytes
    peak_b = float(pb.mean()) if per_step else b.peak_allocated_bytes
    operators, changes = _operators(a, b, per_step), _operator_changes(a, b, per_step)
    if peak_a is None or peak_b is None:
        return MemoryComparison(peak_a, peak_b, None, None, 0.0, "unknown", operators, per_step, changes)
    delta = peak_b - peak_a
    floor = max(MEMORY_CHANGE_SHARE * peak_a, MEMORY_CHANGE_MIN_BYTES)
    interval = _welch(pa, pb, delta) if per_step else None
    beyond_noise = interval is None or interval[0] > 0 or interval[1] < 0
    verdict = ("higher" if delta > 0 else "lower") if beyond_noise and abs(delta) >= floor else "same"
    return MemoryComparison(peak_a, peak_b, delta, interval, floor, verdict, operators, per_step, changes)


def _step_peaks(view) -> np.ndarray:
    return view.steps["peak_allocated_bytes"].dropna().to_numpy(float) if len(view.steps) else np.empty(0)


def _welch(a: np.ndarray, b: np.ndarray, delta: float) -> tuple[float, float]:
    from scipy import special

    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return (delta, delta)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(special.stdtrit(df, 1 - (1 - CONFIDENCE) / 2)) * se
    return (delta - half, delta + half)


def _operators(a, b, per_step: bool) -> pd.DataFrame:
    """Each operator's allocations and bytes in A and B (per step where both have steps), by the
    size of the change."""
    def side(view, suffix):
        steps = len(view.steps) if per_step else 1
        frame = view.operators.set_index("name")[["allocations", "bytes"]] / steps
        return frame.add_suffix(suffix)

    both = side(a, "_a").join(side(b, "_b"), how="outer").fillna(0.0)
    both["delta_bytes"] = both["bytes_b"] - both["bytes_a"]
    both = both.reset_index().rename(columns={"index": "name"})
    order = both["delta_bytes"].abs().sort_values(ascending=False, kind="stable").index
    return both.loc[order, OPERATOR_DELTA_COLUMNS].reset_index(drop=True)


def _operator_changes(a, b, per_step: bool) -> pd.DataFrame:
    """The operators whose bytes allocated a step changed as the peak's verdict is taken: the
    steps as samples (an operator allocating nothing in a step counts 0 there), Welch's interval
    of B - A beyond zero and the change at least the floor (MEMORY_CHANGE_SHARE of A's bytes, at
    least MEMORY_CHANGE_MIN_BYTES); with fewer than two steps a side the capture's bytes against
    the floor alone. "more" or "less", the largest change first."""
    sa, sb = _step_bytes(a, per_step), _step_bytes(b, per_step)
    rows = []
    for name in sa.columns.union(sb.columns):
        xa = sa[name].to_numpy(float) if name in sa else np.zeros(len(sa))
        xb = sb[name].to_numpy(float) if name in sb else np.zeros(len(sb))
        delta = float(xb.mean() - xa.mean())
        floor = max(MEMORY_CHANGE_SHARE * float(xa.mean()), MEMORY_CHANGE_MIN_BYTES)
        low, high = _welch(xa, xb, delta) if per_step else (np.nan, np.nan)
        if (not per_step or low > 0 or high < 0) and abs(delta) >= floor:
            rows.append((name, float(xa.mean()), float(xb.mean()), delta, low, high, floor,
                         "more" if delta > 0 else "less"))
    table = pd.DataFrame(rows, columns=OPERATOR_CHANGE_COLUMNS)
    order = table["delta_bytes"].abs().sort_values(ascending=False, kind="stable").index
    return table.loc[order].reset_index(drop=True)


def _step_bytes(view, per_step: bool) -> pd.DataFrame:
    """Bytes each operator (a column) allocated in each step of ``view`` (a row, 0 where it
    allocated none); without ``per_step`` one row, the whole capture's."""
    if not per_step:
        return view.operators.set_index("name")[["bytes"]].T.reset_index(drop=True)
    frame = view.step_operators
    if frame.empty:
        return pd.DataFrame(index=range(len(view.steps)))
    return (frame.pivot_table(index="step", columns="name", values="bytes", aggfunc="sum")
            .reindex(view.steps["step"]).fillna(0.0))
