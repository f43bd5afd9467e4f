"""The level-of-detail index behind the live timeline: columnar per-lane arrays built once per
trace, answering "what does this lane look like between t0 and t1 at this many pixels" in time
that depends on the pixels and the events in view, not on the trace's size.

Per lane and pixel column a query gives the busy share (the union of the lane's spans within the
column, exact, from a prefix sum over the merged spans) and the dominant operator (the name with
the most time in the column: exact from the events when few enough are in view, else from a
pyramid of pre-aggregated bins), or the events themselves when a lane has fewer than it has
pixels. Pure numpy and pandas: no matplotlib, no widget."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...analysis.intervals import Spans
from ...analysis.schema import DEVICE_WORK, Trace
from .launches import launches
from .nested import MODULES, NESTED_GROUPS, REGIONS, nested_kinds, nested_spans, with_nested
from .rows import stack
from .series import CORE_LANES, MEMORY_EVENTS_MAX, memory_events, series_columns, series_of  # noqa: F401 (CORE_LANES: re-exported)

HOST_KINDS = ("host_op", "annotation", "dataloader", "sync")
GROUP_ORDER = {"host": 0, REGIONS: 1, MODULES: 2, "device": 3, "comm": 4}  # a rank's lanes, top to bottom
DEVICE_GROUPS = ("device", "comm")
EXACT_LIMIT = 40_000  # events in view up to which the dominant operator is computed from the events
BASE_EVENTS_PER_BIN = 8  # the pyramid's finest bins hold about this many events
PYRAMID_FACTOR = 4
EVENTS_MAX_PER_LANE = 1_000  # a lane sends its events, not columns, below min(this, pixels / 2)
GAP_MIN_FRACTION = 0.02  # device idle gaps longer than this share of the view are marked
MAX_WIDTH_PX = 8192  # a view wider than this (a browser's report gone wrong) is answered at this width
# a view's ends are clamped to this many ms either side of the first step: far beyond any trace
# (int64 ns end at 9.2e12 ms), and small enough that the ends in ns (x 1e6) and the view's span
# stay finite floats, so an answer never carries Infinity or NaN
VIEW_LIMIT_MS = 1e300
_INT64_SAFE = float(2**62)  # times are clipped to this before an int64 search (1e306 ns would overflow it)


def _cover(starts: np.ndarray, ends: np.ndarray, cum: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Union length of the disjoint sorted spans (float64: searchsorted would otherwise convert the
    whole array on every call) before each time ``x`` (float ns)."""
    if len(starts) == 0:
        return np.zeros_like(x, dtype=np.float64)
    k = np.searchsorted(starts, x, side="right") - 1
    safe = np.clip(k, 0, None)
    inside = np.clip(x - starts[safe], 0, ends[safe] - starts[safe])
    return np.where(k >= 0, cum[safe] + inside, 0.0)


TABLE_LIMIT = 2_000_000  # (column, name) tables up to this many cells; beyond, sorted keys


def _dominant(s: np.ndarray, e: np.ndarray, codes: np.ndarray, t0: float, t1: float,
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
        out, best = _aggregate(cols, names, weights, width, with_weights=True)
        best[_paint_outermost(out, codes, c0, c1, full)] = col_ns
        return out, best
    dense = np.zeros((spanning.size, width + 1))
    row = np.searchsorted(spanning, codes[full])
    np.add.at(dense, (row, c0[full] + 1), 1)
    np.add.at(dense, (row, c1[full]), -1)
    dense = np.cumsum(dense[:, :width], axis=1) * col_ns
    in_dense = np.isin(names, spanning)
    np.add.at(dense, (np.searchsorted(spanning, names[in_dense]), cols[in_dense]), weights[in_dense])
    out, best = _aggregate(cols[~in_dense], names[~in_dense], weights[~in_dense], width, with_weights=True)
    if spanning.size:
        top = dense.argmax(axis=0)
        value = dense[top, np.arange(width)]
        wins = (value > 0) & (value >= best)
        out[wins], best[wins] = spanning[top[wins]], value[wins]
    return out, best


def _aggregate(cols: np.ndarray, codes: np.ndarray, weights: np.ndarray, width: int, with_weights: bool = False):
    """Per column, the code with the largest summed weight (-1 where none); and that sum."""
    out = np.full(width, -1, dtype=np.int64)
    best = np.zeros(width)
    keep = codes >= 0
    if not keep.any():
        return (out, best) if with_weights else out
    cols, codes, weights = cols[keep], codes[keep], weights[keep]
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
    """One lane's columns, sorted by start (longer first on ties, so parents precede children)."""

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
    levels: list[Level] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.union_f = (self.union.starts.astype(np.float64), self.union.ends.astype(np.float64))

    def window(self, t0: float, t1: float) -> tuple[int, int]:
        """[i, j): the events that may overlap (t0, t1) (all that do; a few nested ones may not).
        Whole ns (int64, as the arrays: a float would convert them on every search)."""
        return (int(np.searchsorted(self.reach, _ns(np.floor(t0)), side="right")),
                int(np.searchsorted(self.starts, _ns(np.ceil(t1)), side="left")))

    def busy(self, edges: np.ndarray) -> np.ndarray:
        """Share of each column between consecutive ``edges`` covered by the lane's spans."""
        cover = _cover(*self.union_f, self.union_cum, edges)
        return np.diff(cover) / np.diff(edges)

    def dominant(self, t0: float, t1: float, width: int) -> np.ndarray:
        i, j = self.window(t0, t1)
        col_ns = (t1 - t0) / width
        level = next((lv for lv in reversed(self.levels) if lv.bin_ns * 2 <= col_ns), None)
        if j - i <= EXACT_LIMIT or level is None:
            return _dominant(self.starts[i:j], self.ends[i:j], self.codes[i:j], t0, t1, width)[0]
        a = max(int((t0 - level.lo) // level.bin_ns), 0)
        b = min(int(np.ceil((t1 - level.lo) / level.bin_ns)), len(level.codes))
        centres = level.lo + (np.arange(a, b) + 0.5) * level.bin_ns
        cols = ((centres - t0) / col_ns).astype(np.int64)
        inside = (cols >= 0) & (cols < width)
        return _aggregate(cols[inside], level.codes[a:b][inside], level.weights[a:b][inside], width)

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
    return np.int64(min(max(t, -_INT64_SAFE), _INT64_SAFE))


def _depth(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Nesting depth of spans sorted by start: how many earlier spans are still open at each start."""
    closed = np.searchsorted(np.sort(ends), starts, side="right")
    return np.maximum(np.arange(starts.size) - closed, 0)


def _longest(s, e, codes, lo: float, bin_ns: float, bins: int) -> np.ndarray:
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
        _paint_outermost(out, codes, c0, c1, full)
    return out


def _paint_outermost(out: np.ndarray, codes, c0, c1, full: np.ndarray) -> np.ndarray:
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


def _pyramid(lane: "LaneIndex") -> list[Level]:
    """Bins of about BASE_EVENTS_PER_BIN events each, coarser by PYRAMID_FACTOR down to ~2k bins;
    a bin's code is its finer bins' code with the most busy time, weighted by that time."""
    n = lane.starts.size
    if n <= EXACT_LIMIT:
        return []
    lo, hi = float(lane.starts[0]), float(lane.ends.max())
    bins = int(2 ** np.ceil(np.log2(max(n / BASE_EVENTS_PER_BIN, 2))))
    bin_ns = (hi - lo) / bins
    base = _longest(lane.starts, lane.ends, lane.codes, lo, bin_ns, bins)
    weight = np.diff(_cover(*lane.union_f, lane.union_cum, lo + np.arange(bins + 1) * bin_ns))
    levels = [Level(lo, bin_ns, base, weight)]
    while len(levels[-1].codes) > 2048:
        prev = levels[-1]
        cols = np.arange(len(prev.codes)) // PYRAMID_FACTOR
        width = int(np.ceil(len(prev.codes) / PYRAMID_FACTOR))
        codes_up = _aggregate(cols, prev.codes, prev.weights, width)
        weights_up = np.bincount(cols, weights=prev.weights, minlength=width)
        levels.append(Level(lo, prev.bin_ns * PYRAMID_FACTOR, codes_up, weights_up))
    return levels


def _lane_rows(ev: pd.DataFrame):
    """(rank, lane name, row positions) of each lane, from the category codes (no string keys)."""
    lanes = ev["lane"].cat
    key = ev["rank"].to_numpy().astype(np.int64) * (len(lanes.categories) + 1) + lanes.codes.to_numpy()
    order = np.argsort(key, kind="stable")
    first = np.flatnonzero(np.r_[True, key[order][1:] != key[order][:-1]]) if len(key) else np.empty(0, np.int64)
    for a, b in zip(first, np.r_[first[1:], len(key)]):
        rows = order[a:b]
        yield int(ev["rank"].iat[rows[0]]), str(lanes.categories[lanes.codes.iat[rows[0]]]), rows


def _lane_group(kinds: pd.Series, device: int) -> str:
    if bool((kinds == "comm").all()):
        return "comm"
    return "device" if device >= 0 else "host"


@dataclass
class TimelineIndex:
    """Every lane of a trace, built once; :meth:`query` answers a view. Times are ns from
    ``origin`` (the first step's start, in the trace's clock), so float64 holds them to the ns
    (an absolute clock near 1e18 ns would round to 256 ns); the answers are in ms from it."""

    lanes: list[LaneIndex]
    names: np.ndarray  # operator names by code
    events: pd.DataFrame  # name, ts_ns, dur_ns, step, shapes, source of the indexed events
    steps: pd.DataFrame  # rank, step, start_ns, end_ns
    origin: int
    lo: int
    hi: int
    series: list[dict] = field(default_factory=list)  # memory and counter lines: lane, label, unit, ts, values
    name_kinds: np.ndarray = field(default_factory=lambda: np.array([], dtype=object))  # each name's kind, by code
    # host calls carrying a launch's correlation id (not drawn): rank, lane, name, start_ns/end_ns from origin, correlation
    # (an event's rank is its lane's: the events frame does not repeat it)
    launches: pd.DataFrame = field(default_factory=pd.DataFrame)
    # where the findings are (:func:`~npumagic.analysis.marks.marks`), start_ns/end_ns from origin
    marks: pd.DataFrame = field(default_factory=pd.DataFrame)
    # the rows of regions and modules lanes' spans follow the other events' from this row: each one's tree path
    nested_from: int = 0
    paths: np.ndarray = field(default_factory=lambda: np.array([], dtype=object))
    threads: np.ndarray = field(default_factory=lambda: np.array([], dtype=object))  # and its host thread

    @classmethod
    def build(cls, trace: Trace) -> "TimelineIndex":
        ev = trace.events
        ev = ev[ev["kind"].isin(HOST_KINDS + DEVICE_WORK).to_numpy()]
        marks = ev["name"].cat.categories.astype(str).str.startswith("ProfilerStep#")  # per name, not per event
        ev = ev[~((ev["kind"] == "annotation") & ev["name"].isin(ev["name"].cat.categories[marks])).to_numpy()]
        ev = ev.reset_index(drop=True)
        names = np.asarray(ev["name"].cat.categories.astype(str)) if len(ev) else np.array([], dtype=object)
        steps = trace.steps
        ts = ev["ts_ns"].to_numpy()
        end = ts + np.maximum(ev["dur_ns"].to_numpy(), 0)
        origin = int(steps["start_ns"].min()) if len(steps) else int(ts.min()) if len(ts) else 0
        ts, end = ts - origin, end - origin
        lo = int(min(ts.min(), 0)) if len(ts) else 0
        hi = int(max(end.max(), steps["end_ns"].max() - origin if len(steps) else 0)) if len(ts) else 1
        lanes = []
        codes_all = ev["name"].cat.codes.to_numpy().astype(np.int64) if len(ev) else np.empty(0, np.int64)
        details = ev[["name", "ts_ns", "dur_ns", "step", "shapes", "source", "kind", "correlation"]]
        order = []
        for rank, lane, rows in _lane_rows(ev):
            group = _lane_group(ev["kind"].iloc[rows], int(ev["device"].iloc[rows].max()))
            order.append((int(rank), GROUP_ORDER[group], int(ts[rows].min()), lane, group, rows))
        nested = nested_spans(trace)
        own, nested_depth, nested_from = np.zeros(len(ev), bool), np.zeros(len(ev), np.int64), len(ev)
        if len(nested):  # regions and modules: lanes of their own, their spans rows of their own
            names, details, codes_all, ts, end, own, nested_depth, more = with_nested(
                nested, names, details, codes_all, ts, end, origin)
            order += [(rank, GROUP_ORDER[group], int(ts[rows].min()), lane, group, rows) for rank, group, lane, rows in more]
        for rank, _, _, lane, group, rows in sorted(order, key=lambda o: o[:3]):
            s, e = ts[rows], end[rows]
            ds, de = np.diff(s), np.diff(e)
            if not ((ds > 0) | ((ds == 0) & (de <= 0))).all():  # the trace's own order (by time) mostly is this
                sort = np.lexsort((-e, s))
                s, e, rows = s[sort], e[sort], rows[sort]
            union = Spans.union_of(s, np.maximum(e, s + 1))
            cum = np.concatenate([[0], np.cumsum(union.ends - union.starts)[:-1]]).astype(np.float64)
            codes = codes_all[rows]
            # a nested lane's rows are its tree's depths (the spans that could not nest already left out)
            depth = nested_depth[rows] if group in NESTED_GROUPS else _depth(s, e)
            lanes.append(LaneIndex(lane, rank, group, s, e, np.maximum.accumulate(e), codes, rows, depth,
                                   union, cum, own=own[rows] if group in NESTED_GROUPS else None))
            lanes[-1].levels = _pyramid(lanes[-1])
        kinds = _name_kinds(ev, len(ev["name"].cat.categories) if len(ev) else 0)
        if len(nested):
            kinds = nested_kinds(names, kinds, ev, nested)
        paths, threads = (nested[c].to_numpy(object) if len(nested) else np.array([], dtype=object) for c in ("path", "thread"))
        return cls(lanes, names, details, steps, origin, lo, hi, series_of(trace, origin), kinds,
                   launches(trace.events, origin), _marks(trace, origin), nested_from, paths, threads)

    def query(self, t0_ms: float, t1_ms: float, width_px: int, lanes: list[int] | None = None) -> dict:
        """The view from ``t0_ms`` to ``t1_ms`` (ms from :attr:`origin`) at ``width_px`` columns.

        Returns a JSON-ready dict: ``t0``, ``t1``, ``width``, ``names`` (the operator names the
        answer uses, by code), ``kinds`` (each name's kind) and ``lanes``, one per lane: ``mode``
        "events" (``start``, ``end`` in ms, ``name`` codes, ``depth``: the row, no two events of a
        row overlapping (:func:`~.rows.stack`), ``id`` for :meth:`details`) or "columns" (``busy``: share of
        each column the lane's spans cover, their union; ``dominant``: the code of the name with the
        most time in it, -1 where idle); device lanes also carry ``gaps``, [start, end] ms of
        idle holes of at least 2% of the view. ``series``: per memory/counter line, one value
        per column (the column's maximum, else the last sample before it; None before the first).
        ``memory``: per series, None, or for a memory line zoomed in to few enough samples its
        allocations and frees (:func:`~.series.memory_events`).
        """
        width = min(max(int(width_px), 1), MAX_WIDTH_PX)
        t0_ms, t1_ms = (min(max(float(t), -VIEW_LIMIT_MS), VIEW_LIMIT_MS) for t in (t0_ms, t1_ms))
        t0 = t0_ms * 1e6
        # at least 1 ns per column, and columns wider than the float spacing at t0 (far from the
        # first step, t0 + 1 ns == t0: columns of no width would give busy shares of 0/0)
        t1 = max(t1_ms * 1e6, t0 + width * max(1.0, abs(t0) * 1e-15))
        edges = np.linspace(t0, t1, width + 1)
        used: dict[int, int] = {}

        def remap(codes: np.ndarray) -> list[int]:
            out = np.full(codes.size, -1, dtype=np.int64)
            valid = codes >= 0
            for u in np.unique(codes[valid]):
                used.setdefault(int(u), len(used))
            if valid.any():
                lookup = np.array(list(used.keys())), np.array(list(used.values()))
                sorter = np.argsort(lookup[0])
                out[valid] = lookup[1][sorter][np.searchsorted(lookup[0][sorter], codes[valid])]
            return out.tolist()

        ms = lambda ns: np.round(np.asarray(ns, dtype=np.float64) / 1e6, 6).tolist()  # noqa: E731
        answer = []
        chosen = range(len(self.lanes)) if lanes is None else lanes
        limit = min(EVENTS_MAX_PER_LANE, width // 2)
        for k in chosen:
            lane = self.lanes[k]
            i, j = lane.window(t0, t1)
            part = {"lane": k}
            inside = (lane.ends[i:j] > t0) if j - i <= limit else None
            if inside is not None:
                idx = np.arange(i, j)[inside]
                part.update(mode="events", start=ms(lane.starts[idx]), end=ms(lane.ends[idx]),
                            name=remap(lane.codes[idx]), id=lane.rows[idx].tolist(),
                            depth=stack(lane.starts[idx], lane.ends[idx], lane.depth[idx]).tolist())
                if lane.own is not None:  # torch's own annotations, dimmed
                    part["own"] = lane.own[idx].astype(np.int8).tolist()
            else:
                part.update(mode="columns", busy=np.round(lane.busy(edges), 4).tolist(),
                            dominant=remap(lane.dominant(t0, t1, width)))
            if lane.group in DEVICE_GROUPS:
                part["gaps"] = [ms(g) for g in lane.gaps(t0, t1, GAP_MIN_FRACTION * (t1 - t0))]
            answer.append(part)
        return {"t0": t0 / 1e6, "t1": t1 / 1e6, "width": width,
                "names": [str(self.names[c]) for c in used], "kinds": [str(self.name_kinds[c]) for c in used],
                "lanes": answer,
                "series": [series_columns(s, edges) for s in self.series],
                "memory": [memory_events(s, t0, t1, min(MEMORY_EVENTS_MAX, width // 4)) for s in self.series]}

    def details(self, row: int) -> dict:
        """Name, duration, step, shapes and source of one event (an ``id`` of an events answer),
        and ``lines``: them as the tooltip shows them, with units as the tables write them."""
        r = self.events.iloc[int(row)]
        text = lambda v: "" if pd.isna(v) else str(v)  # noqa: E731
        out = {"name": str(r["name"]), "kind": str(r["kind"]), "start_ms": (int(r["ts_ns"]) - self.origin) / 1e6,
               "dur_us": int(r["dur_ns"]) / 1e3, "step": int(r["step"]), "shapes": text(r["shapes"]),
               "source": text(r["source"])}
        out["lines"] = [out["name"], f"{out['kind'].replace('_', ' ')}: {duration(out['dur_us'])} from "
                        f"{duration(out['start_ms'] * 1e3)}", f"step {out['step']}" if out["step"] >= 0 else "outside the steps",
                        *([f"shapes {out['shapes']}"] if out["shapes"] else []),
                        *([f"source {out['source']}"] if out["source"] else [])]
        if int(row) >= self.nested_from:  # a region's or module's span: where in its tree
            out["path"] = str(self.paths[int(row) - self.nested_from])
            out["lines"].insert(1, f"path {out['path']}")
        return out

    def layout(self) -> dict:
        """What the view draws once: lanes (name, rank, group, max depth), series, steps, extent (ms),
        and the marks of the findings (rank, kind, rule, start, end in ms, label), a lane per rank."""
        ms = lambda ns: float(ns) / 1e6  # noqa: E731
        return {"lanes": [{"name": ln.name, "rank": ln.rank, "group": ln.group,
                           "depth": int(min(ln.depth.max(), 7)) if ln.depth.size else 0} for ln in self.lanes],
                "series": [{"rank": s["rank"], "lane": s["lane"], "label": s["label"], "unit": s["unit"]}
                           for s in self.series],
                "steps": [{"rank": int(r.rank), "step": int(r.step), "start": ms(r.start_ns - self.origin),
                           "end": ms(r.end_ns - self.origin)}
                          for r in self.steps.itertuples()],
                "extent": [ms(self.lo), ms(self.hi)],
                "marks": [{"rank": int(m.rank), "kind": m.kind, "rule": m.rule, "start": ms(m.start_ns),
                           "end": ms(m.end_ns), "label": m.label} for m in self.marks.itertuples()]}


def _marks(trace: Trace, origin: int) -> pd.DataFrame:
    from ...analysis.marks import marks

    table = marks(trace)
    return table.assign(start_ns=table["start_ns"] - origin, end_ns=table["end_ns"] - origin)


def duration(us: float) -> str:
    """A time as the tables write it: ms with two decimals from 1 ms, else us with one."""
    return f"{us / 1e3:,.2f} ms" if abs(us) >= 1e3 else f"{us:,.1f} µs"


def _name_kinds(ev: pd.DataFrame, names: int) -> np.ndarray:
    """The kind of each name code: the kind most of its events have (one bincount, no sort)."""
    if not names:
        return np.array([], dtype=object)
    kinds = ev["kind"].cat
    k = len(kinds.categories)
    table = np.bincount(ev["name"].cat.codes.to_numpy().astype(np.int64) * k + kinds.codes.to_numpy(),
                        minlength=names * k).reshape(names, k)
    return np.asarray(kinds.categories.astype(str))[table.argmax(axis=1)]
