"""Vectorised interval algebra on integer-nanosecond spans: union, intersection, difference,
how much of a window a set of spans covers, and the union of a frame's events (:func:`spans_of`).
All numpy, no per-event Python loop."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Spans:
    """Disjoint, sorted, half-open spans ``[starts[i], ends[i])`` in nanoseconds."""

    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def union_of(cls, starts: np.ndarray, ends: np.ndarray, scratch: bool = False) -> "Spans":
        """Merge arbitrary (overlapping, unsorted) spans into a disjoint set; ``scratch``: ``ends``
        is the caller's to overwrite (a fresh array: at 10M events each copy is tens of MiB)."""
        starts = np.asarray(starts, dtype=np.int64)
        ends = np.asarray(ends, dtype=np.int64)
        keep = ends > starts
        if not keep.all():
            starts, ends, scratch = starts[keep], ends[keep], True
        del keep
        if starts.size == 0:
            return cls(starts, ends)
        if not (starts[1:] >= starts[:-1]).all():  # a trace's spans mostly come sorted already
            order = np.argsort(starts, kind="stable")
            starts, ends, scratch = starts[order], ends[order], True
        reach = np.maximum.accumulate(ends, out=ends if scratch else None)
        opens = np.empty(starts.size, dtype=bool)
        opens[0] = True
        opens[1:] = starts[1:] > reach[:-1]
        first = np.flatnonzero(opens)
        last = np.append(first[1:] - 1, starts.size - 1)
        return cls(starts[first], reach[last])

    @classmethod
    def empty(cls) -> "Spans":
        return cls(np.empty(0, np.int64), np.empty(0, np.int64))

    def __len__(self) -> int:
        return int(self.starts.size)

    @property
    def total(self) -> int:
        return int((self.ends - self.starts).sum())

    def _combine(self, other: "Spans", keep) -> "Spans":
        # Sweep over both sets' edges; each set is disjoint, so depth per set is 0 or 1.
        # (int8 edge marks and depths, so a large set costs its edges' positions and order only)
        n, m = len(self), len(other)
        pos = np.concatenate([self.starts, self.ends, other.starts, other.ends])
        if pos.size == 0:
            return Spans.empty()
        a, b = np.zeros(pos.size, np.int8), np.zeros(pos.size, np.int8)
        a[:n], a[n:2 * n], b[2 * n:2 * n + m], b[2 * n + m:] = 1, -1, 1, -1
        order = np.argsort(pos, kind="stable")
        pos = pos[order]
        inside = keep(np.cumsum(a[order], dtype=np.int8) > 0, np.cumsum(b[order], dtype=np.int8) > 0)[:-1]
        seg_start, seg_end = pos[:-1][inside], pos[1:][inside]
        return Spans.union_of(seg_start, seg_end)

    # an empty side needs no sweep (no DataLoader wait, no sync: at 10M events a sweep is 50 ms)
    def __and__(self, other: "Spans") -> "Spans":
        return Spans.empty() if not (len(self) and len(other)) else self._combine(other, np.logical_and)

    def __or__(self, other: "Spans") -> "Spans":
        return other if not len(self) else self if not len(other) else self._combine(other, np.logical_or)

    def __sub__(self, other: "Spans") -> "Spans":
        return self if not (len(self) and len(other)) else self._combine(other, lambda x, y: x & ~y)

    def covered(self, lo, hi) -> np.ndarray:
        """Nanoseconds covered inside each window ``[lo[i], hi[i])`` (arrays or scalars)."""
        lo = np.atleast_1d(np.asarray(lo, dtype=np.int64))
        hi = np.atleast_1d(np.asarray(hi, dtype=np.int64))
        return np.maximum(self._cumulative(hi) - self._cumulative(lo), 0)

    def _cumulative(self, x: np.ndarray) -> np.ndarray:
        """Covered length in (-inf, x]."""
        if len(self) == 0:
            return np.zeros(x.shape, dtype=np.int64)
        lengths = self.ends - self.starts
        before = np.concatenate([[0], np.cumsum(lengths)])
        k = np.searchsorted(self.starts, x, side="right")  # spans starting at or before x
        partial = np.where(k > 0, np.minimum(x, self.ends[np.maximum(k - 1, 0)]) - self.starts[np.maximum(k - 1, 0)], 0)
        return before[np.maximum(k - 1, 0)] * (k > 0) + np.maximum(partial, 0)

    def gaps(self, lo: int, hi: int) -> "Spans":
        """The holes of this set inside ``[lo, hi)``."""
        return Spans(np.array([lo], np.int64), np.array([hi], np.int64)) - self


def spans_of(frame, rows: np.ndarray | None = None) -> Spans:
    """The union of the spans of a frame's events (``ts_ns``, ``dur_ns``), of the ``rows`` (a mask)
    where given: arrays of those rows only, no copy of the frame's."""
    start, took = frame["ts_ns"].to_numpy(), frame["dur_ns"].to_numpy()
    if rows is not None:
        start, took = start[rows], took[rows]
    end = np.add(start, took, out=took if rows is not None and took.dtype == np.int64 else None)
    return Spans.union_of(start, end, scratch=True)
