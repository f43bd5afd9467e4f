"""One lane of the live timeline's index: its columns, the coarse pass a first view is answered
from, and the pyramid of pre-aggregated bins deeper zooms read (built the first time one needs
it). Pure numpy: no matplotlib, no widget."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ...analysis.intervals import Spans
from .columns import INT64_SAFE, aggregate, cover, dominant, longest

EXACT_LIMIT = 40_000  # events in view up to which the dominant operator is computed from the events
BASE_EVENTS_PER_BIN = 8  # the pyramid's finest bins hold about this many events
PYRAMID_FACTOR = 4
OVERVIEW_BINS = 8192  # the coarse pass's bins per lane at most (at least half): a first view up to 2048 px reads them
OVERVIEW_TABLE_LIMIT = 8_000_000  # its (bin, name) table up to this many cells (64 MB); beyond, sorted keys


@dataclass
class Level:
    """One pyramid level: ``bins`` bins of ``bin_ns`` from ``lo``, each with its dominant code and that
    code's time in the bin."""

    lo: float
    bin_ns: float
    codes: np.ndarray
    weights: np.ndarray


@dataclass
class LaneIndex:
    """One lane's columns, sorted by start (longer first on ties, so parents precede children).
    Its pyramid is built (or read from the run's store) the first time a view needs it: the
    first view is answered from ``overview``, the coarse pass made with the lane."""

    name: str
    rank: int
    group: str  # host, device or comm
    starts: np.ndarray
    ends: np.ndarray
    reach: np.ndarray  # running max of ends: events before searchsorted(reach, t0) all end by t0
    codes: np.ndarray  # name codes into TimelineIndex.names
    rows: np.ndarray  # positions in TimelineIndex.events, for the details of each event
    depth: np.ndarray  # nesting depth (0: outermost)
    union: Spans
    union_cum: np.ndarray
    own: np.ndarray | None = None  # regions lanes: whether each span is an annotation torch writes itself
    overview: Level | None = None  # OVERVIEW_BINS bins over the lane, exact (lanes over EXACT_LIMIT events)
    pyramid: Callable[["LaneIndex"], list[Level]] = field(default=lambda lane: _pyramid(lane), repr=False)
    _levels: list[Level] | None = field(default=None, repr=False)

    @property
    def levels(self) -> list[Level]:
        """The pyramid's levels, finest first (built on first use)."""
        if self._levels is None:
            self._levels = self.pyramid(self)
        return self._levels

    def window(self, t0: float, t1: float) -> tuple[int, int]:
        """[i, j): the events that may overlap (t0, t1) (all that do; a few nested ones may not).
        Whole ns (int64, as the arrays: a float would convert them on every search)."""
        return (int(np.searchsorted(self.reach, _ns(np.floor(t0)), side="right")),
                int(np.searchsorted(self.starts, _ns(np.ceil(t1)), side="left")))

    def busy(self, edges: np.ndarray) -> np.ndarray:
        """Share of each column between consecutive ``edges`` covered by the lane's spans."""
        covered = cover(self.union.starts, self.union.ends, self.union_cum, edges)
        return np.diff(covered) / np.diff(edges)

    def dominant(self, t0: float, t1: float, width: int) -> np.ndarray:
        i, j = self.window(t0, t1)
        col_ns = (t1 - t0) / width
        if j - i <= EXACT_LIMIT:
            return dominant(self.starts[i:j], self.ends[i:j], self.codes[i:j], t0, t1, width)[0]
        fits = self.overview is not None and self.overview.bin_ns * 2 <= col_ns
        level = self.overview if fits else next((lv for lv in reversed(self.levels) if lv.bin_ns * 2 <= col_ns), None)
        if level is None:
            return dominant(self.starts[i:j], self.ends[i:j], self.codes[i:j], t0, t1, width)[0]
        a = max(int((t0 - level.lo) // level.bin_ns), 0)
        b = min(int(np.ceil((t1 - level.lo) / level.bin_ns)), len(level.codes))
        centres = level.lo + (np.arange(a, b) + 0.5) * level.bin_ns
        cols = ((centres - t0) / col_ns).astype(np.int64)
        inside = (cols >= 0) & (cols < width)
        return aggregate(cols[inside], level.codes[a:b][inside], level.weights[a:b][inside], width)

    def gaps(self, t0: float, t1: float, min_ns: float) -> np.ndarray:
        """(start, end) pairs of the holes between the lane's spans within (t0, t1), at least ``min_ns``."""
        u = self.union
        a = max(int(np.searchsorted(u.starts, _ns(np.floor(t0)), side="right")) - 1, 0)
        b = min(int(np.searchsorted(u.starts, _ns(np.ceil(t1)), side="left")), len(u) - 1)
        s, e = u.ends[a:b], u.starts[a + 1:b + 1]  # the holes after spans a .. b-1
        keep = (e > t0) & (s < t1) & (e - s >= min_ns)
        return np.column_stack([s[keep], e[keep]])


def _ns(t: float) -> np.int64:
    """A time (float ns) as the int64 the lane arrays are searched with, clipped to their range."""
    return np.int64(min(max(t, -INT64_SAFE), INT64_SAFE))


def _depth(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Nesting depth of spans sorted by start: how many earlier spans are still open at each start."""
    closed = np.searchsorted(np.sort(ends, kind="stable"), starts, side="right")  # timsort: ends come nearly sorted
    depth = np.arange(starts.size)
    depth -= closed  # in place (a lane of 6M events: 48 MB a temporary array)
    return np.maximum(depth, 0, out=depth)


def _pyramid(lane: "LaneIndex") -> list[Level]:
    """Bins of about BASE_EVENTS_PER_BIN events each, coarser by PYRAMID_FACTOR down to ~2k bins;
    a bin's code is its finer bins' code with the most busy time, weighted by that time."""
    n = lane.starts.size
    if n <= EXACT_LIMIT:
        return []
    lo, hi = float(lane.starts[0]), float(lane.ends.max())
    bins = int(2 ** np.ceil(np.log2(max(n / BASE_EVENTS_PER_BIN, 2))))
    bin_ns = (hi - lo) / bins
    base = longest(lane.starts, lane.ends, lane.codes, lo, bin_ns, bins)
    weight = _busy_bins(lane, lo, bin_ns, bins)
    levels = [Level(lo, bin_ns, base, weight)]
    while len(levels[-1].codes) > 2048:
        prev = levels[-1]
        cols = np.arange(len(prev.codes)) // PYRAMID_FACTOR
        width = int(np.ceil(len(prev.codes) / PYRAMID_FACTOR))
        codes_up = aggregate(cols, prev.codes, prev.weights, width)
        weights_up = np.bincount(cols, weights=prev.weights, minlength=width)
        levels.append(Level(lo, prev.bin_ns * PYRAMID_FACTOR, codes_up, weights_up))
    return levels


def _busy_bins(lane: "LaneIndex", lo: float, bin_ns: float, bins: int) -> np.ndarray:
    """The lane's busy time (ns, the union of its spans) in each of ``bins`` bins of ``bin_ns`` from ``lo``."""
    return np.diff(cover(lane.union.starts, lane.union.ends, lane.union_cum, lo + np.arange(bins + 1) * bin_ns))


def _overview(lane: "LaneIndex") -> Level | None:
    """The coarse pass: per bin over the lane (OVERVIEW_BINS / 2 to OVERVIEW_BINS bins of a power of
    two ns, so a bin is a shift), its dominant code (the most time, exact from the events) and its
    busy time, vectorised, without a sort. None for a lane of few events (their views are
    answered from the events)."""
    n = lane.starts.size
    if n <= EXACT_LIMIT:
        return None
    lo = int(lane.starts[0])
    shift = max(int(np.ceil(np.log2(max(int(lane.reach[-1]) - lo, 1) / OVERVIEW_BINS))), 0)
    bins, bin_ns, m = ((int(lane.reach[-1]) - lo) >> shift) + 1, float(1 << shift), int(lane.codes.max()) + 1
    if bins * m > OVERVIEW_TABLE_LIMIT:  # many names: per bin from the events' sorted keys
        codes, _ = dominant(lane.starts, lane.ends, lane.codes, lo, lo + bins * bin_ns, bins)
        return Level(float(lo), bin_ns, codes, _busy_bins(lane, lo, bin_ns, bins))
    s, e = lane.starts - lo, lane.ends - lo
    c0, c1 = s >> shift, e - 1  # the first and last bin each span reaches (in place: no more temporaries)
    np.maximum(c1, s, out=c1)
    c1 >>= shift
    single = c0 == c1
    table = np.bincount(c0[single] * m + lane.codes[single], weights=(e - s)[single], minlength=bins * m)
    extra = np.flatnonzero(~single)
    if extra.size:  # spans over several bins: one piece per bin they reach
        k = c1[extra] - c0[extra] + 1
        span_of = np.repeat(extra, k)
        col = c0[span_of] + np.arange(k.sum()) - np.repeat(np.cumsum(k) - k, k)
        piece = np.minimum(e[span_of], (col + 1) << shift) - np.maximum(s[span_of], col << shift)
        table += np.bincount(col * m + lane.codes[span_of], weights=piece, minlength=bins * m)
    table = table.reshape(bins, m)
    top = table.argmax(axis=1)
    codes = np.where(table[np.arange(bins), top] > 0, top, -1)
    return Level(float(lo), bin_ns, codes, _busy_bins(lane, lo, bin_ns, bins))
