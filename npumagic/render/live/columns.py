"""Per pixel column (or bin) reductions of a lane's spans, pure numpy: the union's length before
each edge (busy shares), and the code with the most time in each column (the dominant operator),
exact from the spans or from pre-aggregated bins."""

from __future__ import annotations

import numpy as np

INT64_SAFE = float(2**62)  # times are clipped to this before an int64 search (1e306 ns would overflow it)


def cover(starts: np.ndarray, ends: np.ndarray, cum: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Union length of the disjoint sorted spans (int64 ns) before each time ``x`` (float ns). The
    search is on whole ns (a float ``x`` would convert the whole int64 array on every call): a
    start is at or before ``x`` exactly when it is at or before its floor."""
    if len(starts) == 0:
        return np.zeros_like(x, dtype=np.float64)
    whole = np.clip(np.floor(x), -INT64_SAFE, INT64_SAFE).astype(np.int64)
    k = np.searchsorted(starts, whole, side="right") - 1
    safe = np.clip(k, 0, None)
    inside = np.clip(x - starts[safe], 0, ends[safe] - starts[safe])
    return np.where(k >= 0, cum[safe] + inside, 0.0)


TABLE_LIMIT = 2_000_000  # (column, name) tables up to this many cells; beyond, sorted keys


def dominant(s: np.ndarray, e: np.ndarray, codes: np.ndarray, t0: float, t1: float,
              width: int) -> tuple[np.ndarray, np.ndarray]:
    """Per column of ``width`` between t0 and t1, the code whose spans cover the most of it
    (summed over its spans; -1 where nothing runs), and that time in ns.

    Spans' partial columns are summed per (column, code); the columns a span covers whole are
    counted per code with a difference array. Beyond TABLE_LIMIT (the pyramid's fine bins), a
    whole-covered column goes to the span reaching furthest (the outermost of nested ops)."""
    col_ns = (t1 - t0) / width
    s, e = np.clip(s.astype(np.float64), t0, t1), np.clip(e.astype(np.float64), t0, t1)
    keep = e > s
    s, e, codes = s[keep], e[keep], codes[keep]
    if s.size == 0:
        return np.full(width, -1, dtype=np.int64), np.zeros(width)
    c0 = np.clip(((s - t0) / col_ns).astype(np.int64), 0, width - 1)
    c1 = np.clip(np.ceil((e - t0) / col_ns).astype(np.int64) - 1, c0, width - 1)
    edge = lambda c: t0 + c * col_ns  # noqa: E731
    same = c0 == c1
    cols = np.concatenate([c0, c1[~same]])
    weights = np.concatenate([np.where(same, e - s, edge(c0 + 1) - s), (e - edge(c1))[~same]])
    names = np.concatenate([codes, codes[~same]])
    full = np.flatnonzero(c1 - 1 >= c0 + 1)
    spanning = np.unique(codes[full])
    if full.size and spanning.size * width > TABLE_LIMIT:
        out, best = aggregate(cols, names, weights, width, with_weights=True)
        best[paint_outermost(out, codes, c0, c1, full)] = col_ns
        return out, best
    dense = np.zeros((spanning.size, width + 1))
    row = np.searchsorted(spanning, codes[full])
    np.add.at(dense, (row, c0[full] + 1), 1)
    np.add.at(dense, (row, c1[full]), -1)
    dense = np.cumsum(dense[:, :width], axis=1) * col_ns
    in_dense = np.isin(names, spanning)
    np.add.at(dense, (np.searchsorted(spanning, names[in_dense]), cols[in_dense]), weights[in_dense])
    out, best = aggregate(cols[~in_dense], names[~in_dense], weights[~in_dense], width, with_weights=True)
    if spanning.size:
        top = dense.argmax(axis=0)
        value = dense[top, np.arange(width)]
        wins = (value > 0) & (value >= best)
        out[wins], best[wins] = spanning[top[wins]], value[wins]
    return out, best


def aggregate(cols: np.ndarray, codes: np.ndarray, weights: np.ndarray, width: int, with_weights: bool = False):
    """Per column, the code with the largest summed weight (-1 where none); and that sum."""
    out = np.full(width, -1, dtype=np.int64)
    best = np.zeros(width)
    keep = codes >= 0
    if not keep.any():
        return (out, best) if with_weights else out
    cols, codes, weights = cols[keep], codes[keep], weights[keep]
    m = int(codes.max()) + 1
    if width * m <= TABLE_LIMIT:  # few names: the codes index the table as they are (no sort)
        used = np.arange(m)
    else:
        used, codes = np.unique(codes, return_inverse=True)
        m = used.size
    if width * m <= TABLE_LIMIT:  # a (column, code) table: no sort
        table = np.bincount(cols * m + codes, weights=weights, minlength=width * m).reshape(width, m)
        top = table.argmax(axis=1)
        value = table[np.arange(width), top]
        has = value > 0
        out[has], best[has] = used[top[has]], value[has]
        return (out, best) if with_weights else out
    keys, where = np.unique(cols * m + codes, return_inverse=True)
    sums = np.bincount(where, weights=weights)
    kcol = keys // m
    starts = np.flatnonzero(np.r_[True, kcol[1:] != kcol[:-1]])
    peak = np.maximum.reduceat(sums, starts)
    seg = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, keys.size]))
    firsts = np.flatnonzero(sums == peak[seg])
    firsts = firsts[np.r_[True, seg[firsts][1:] != seg[firsts][:-1]]]  # the first code reaching each column's peak
    out[kcol[firsts]], best[kcol[firsts]] = used[keys[firsts] % m], sums[firsts]
    return (out, best) if with_weights else out


def longest(s, e, codes, lo: float, bin_ns: float, bins: int) -> np.ndarray:
    """Per bin, the code of the span with the longest piece in it (-1 where none): the pyramid's
    finest level, approximate where it matters least (bins far narrower than a pixel)."""
    out = np.full(bins, -1, dtype=np.int64)
    s, e = s.astype(np.float64), e.astype(np.float64)
    c0 = np.clip(((s - lo) / bin_ns).astype(np.int64), 0, bins - 1)
    c1 = np.clip(np.ceil((e - lo) / bin_ns).astype(np.int64) - 1, c0, bins - 1)
    same = c0 == c1
    first = np.where(same, e - s, lo + (c0 + 1) * bin_ns - s)
    # (piece length, code) packed in one int64, so one maximum.at finds both
    pack = lambda piece, code: (np.clip(piece, 0, 2**38 - 1).astype(np.int64) << 24) | code  # noqa: E731
    best = np.full(bins, -1, dtype=np.int64)
    np.maximum.at(best, c0, pack(first, codes))
    np.maximum.at(best, c1[~same], pack((e - (lo + c1 * bin_ns))[~same], codes[~same]))
    has = best >= 0
    out[has] = best[has] & (2**24 - 1)
    full = np.flatnonzero(c1 - 1 >= c0 + 1)
    if full.size:
        paint_outermost(out, codes, c0, c1, full)
    return out


def paint_outermost(out: np.ndarray, codes, c0, c1, full: np.ndarray) -> np.ndarray:
    """Set each column of ``out`` that a span of ``full`` covers whole to the code of the one
    among them reaching furthest (the outermost of nested ops); return the columns set. ``c0``
    and ``c1`` are each span's first and last column."""
    width, n = out.size, np.int64(codes.size)
    paint = np.full(width + 1, -1, dtype=np.int64)
    np.maximum.at(paint, c0[full] + 1, (c1[full] - 1) * n + full)
    reach = np.maximum.accumulate(paint)[:width]
    covered = (reach >= 0) & (reach // n >= np.arange(width))
    out[covered] = codes[reach[covered] % n]
    return covered
