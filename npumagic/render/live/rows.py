"""Rows for a lane's nested host operators: each span in a row of its own depth, no two spans of
one row overlapping, so every box has room for its label. Pure numpy but for a fallback over the
few hundred spans an answer sends."""

from __future__ import annotations

import heapq

import numpy as np


def stack(starts: np.ndarray, ends: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """The row of each span (sorted by start): its nesting ``depth`` where no two spans of a row
    then overlap (properly nested operators, the usual case); else, where a span outlives its
    parent (clocks rounded apart), each span in start order takes the lowest row free at its
    start, which gives nested spans the same rows and never more rows than spans open at once."""
    depth = np.asarray(depth, dtype=np.int64)
    if starts.size < 2 or not _overlapping(starts, ends, depth):
        return depth
    return _greedy(starts, ends)


def _overlapping(starts: np.ndarray, ends: np.ndarray, rows: np.ndarray) -> bool:
    """Whether two spans of one row overlap: sorted by (row, start), each row's spans shifted
    apart by more than the spans' extent, so one running maximum of ends serves every row."""
    lo = int(starts.min())
    extent = int(max(ends.max(), starts.max())) - lo + 1
    order = np.lexsort((starts, rows))
    shift = rows[order] * extent - lo
    s, e = starts[order] + shift, np.maximum(ends[order], starts[order]) + shift
    reach = np.maximum.accumulate(e)
    return bool((s[1:] < reach[:-1]).any())


def _greedy(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    rows = np.empty(starts.size, dtype=np.int64)
    open_spans: list[tuple[int, int]] = []  # (end, row) of the spans still open
    free: list[int] = []
    for k, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        while open_spans and open_spans[0][0] <= s:
            heapq.heappush(free, heapq.heappop(open_spans)[1])
        row = heapq.heappop(free) if free else len(open_spans)
        rows[k] = row
        heapq.heappush(open_spans, (max(e, s), row))
    return rows
