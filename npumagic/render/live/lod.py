"""The level-of-detail index behind the live timeline: columnar per-lane arrays built once per
trace, answering "what does this lane look like between t0 and t1 at this many pixels" in time
that depends on the pixels and the events in view, not on the trace's size.

Per lane and pixel column a query gives the busy share (the union of the lane's spans within the
column, exact, from a prefix sum over the merged spans) and the dominant operator (the name with
the most time in the column: exact from the events when few enough are in view, else from a
pyramid of pre-aggregated bins), or the events themselves when a lane has fewer than it has
pixels. Pure numpy and pandas: no matplotlib, no widget."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import numpy as np
import pandas as pd

from ...analysis.intervals import Spans
from ...analysis.schema import DEVICE_WORK, Trace
from .lane_index import LaneIndex, Level, _depth, _overview, _pyramid
from .launches import launches
from .critical import critical_spans
from .nested import (CRITICAL, MODULES, NESTED_GROUPS, REGIONS, kind_of_group, nested_kinds, nested_rows, nested_spans,
                     with_nested)
from .rows import stack
from .shelf import Shelf
from .series import CORE_LANES, MEMORY_EVENTS_MAX, memory_events, series_columns, series_of  # noqa: F401 (CORE_LANES: re-exported)

log = logging.getLogger(__name__)
HOST_KINDS = ("host_op", "annotation", "dataloader", "sync")
GROUP_ORDER = {"host": 0, REGIONS: 1, MODULES: 2, "device": 3, "comm": 4, CRITICAL: 5}  # a rank's lanes, top to bottom
DEVICE_GROUPS = ("device", "comm")
EVENTS_MAX_PER_LANE = 1_000  # a lane sends its events, not columns, below min(this, pixels / 2)
GAP_MIN_FRACTION = 0.02  # device idle gaps longer than this share of the view are marked
MAX_WIDTH_PX = 8192  # a view wider than this (a browser's report gone wrong) is answered at this width
# a view's ends are clamped to this many ms either side of the first step: far beyond any trace
# (int64 ns end at 9.2e12 ms), and small enough that the ends in ns (x 1e6) and the view's span
# stay finite floats, so an answer never carries Infinity or NaN
VIEW_LIMIT_MS = 1e300
DETAILS = ["name", "ts_ns", "dur_ns", "step", "shapes", "source", "kind", "correlation"]  # TimelineIndex.events' columns


def _lane_rows(ev: pd.DataFrame):
    """(rank, lane name, row positions) of each lane, from the category codes (no string keys)."""
    lanes = ev["lane"].cat
    key = ev["rank"].to_numpy().astype(np.int64) * (len(lanes.categories) + 1) + lanes.codes.to_numpy()
    if len(key) and key.max() < 2**15:  # numpy sorts 16-bit keys by radix, in one pass
        key = key.astype(np.int16)
    order = np.argsort(key, kind="stable")
    first = np.flatnonzero(np.r_[True, key[order][1:] != key[order][:-1]]) if len(key) else np.empty(0, np.int64)
    for a, b in zip(first, np.r_[first[1:], len(key)]):
        rows = order[a:b]
        yield int(ev["rank"].iat[rows[0]]), str(lanes.categories[lanes.codes.iat[rows[0]]]), rows


def _lane_group(kinds: pd.Series, device: int) -> str:
    if bool((kinds == "comm").all()):
        return "comm"
    return "device" if device >= 0 else "host"


def _drawn_rows(ev: pd.DataFrame) -> np.ndarray:
    """Whether the timeline draws each event: host and device work, less the ProfilerStep
    annotations (the steps are drawn of their own)."""
    keep = _of_kinds(ev, HOST_KINDS + DEVICE_WORK)
    marks = ev["name"].cat.categories.astype(str).str.startswith("ProfilerStep#")  # per name, not per event
    if marks.any():
        keep = keep & ~((ev["kind"] == "annotation") & ev["name"].isin(ev["name"].cat.categories[marks])).to_numpy()
    return keep


def _drawn(ev: pd.DataFrame, keep: np.ndarray) -> pd.DataFrame:
    """The events drawn (``keep``: :func:`_drawn_rows`). No copy where every event is drawn."""
    return ev.reset_index(drop=True) if keep.all() else ev[keep].reset_index(drop=True)


def _reopened_events(trace: Trace, keep: np.ndarray, path: pd.DataFrame | None, origin: int):
    """:attr:`TimelineIndex.events` of a reopened index, and its nested spans' paths and threads, as
    a build makes them: the events drawn (``keep``), then the regions and modules of ``trace`` and
    the stored critical ``path``."""
    events = _drawn(trace.events, keep)
    details = events[DETAILS]
    nested = _joined(nested_spans(trace), path)
    if not len(nested):
        return details, np.array([], dtype=object), np.array([], dtype=object)
    names = np.asarray(events["name"].cat.categories.astype(str)) if len(events) else np.array([], dtype=object)
    return (nested_rows(nested, names, details, origin)[1], nested["path"].to_numpy(object), nested["thread"].to_numpy(object))


def _extent(lanes: list[LaneIndex], steps: pd.DataFrame, origin: int) -> tuple[int, int]:
    """(lo, hi) ns from origin of the lanes' spans (each lane sorted by start, its reach the
    running max of its ends) and the steps, as a build finds them from every event."""
    full = [lane for lane in lanes if lane.starts.size]
    if not full:
        return 0, 1
    lo = min(min(int(lane.starts[0]) for lane in full), 0)
    return lo, int(max(max(int(lane.reach[-1]) for lane in full), steps["end_ns"].max() - origin if len(steps) else 0))


def _of_kinds(ev: pd.DataFrame, kinds) -> np.ndarray:
    """Whether each event's kind is one of ``kinds``: a lookup of its category code (one pass, no
    hashing of 10M values as ``isin`` does)."""
    column = ev["kind"].cat
    wanted = np.append(column.categories.astype(str).isin(kinds), False)  # code -1 (no kind): last
    return wanted[column.codes.to_numpy()]


def _lane(name: str, rank: int, group: str, rows: np.ndarray, *, ts: np.ndarray, end: np.ndarray,
          codes_all: np.ndarray, own: np.ndarray, nested_depth: np.ndarray) -> LaneIndex:
    """One lane of the events at ``rows``: sorted (the trace's own order mostly is), its union, its
    depths and its coarse pass (:func:`_overview`); the pyramid waits for a view that needs it."""
    s, e = ts[rows], end[rows]
    ds, de = np.diff(s), np.diff(e)
    if not ((ds > 0) | ((ds == 0) & (de <= 0))).all():
        sort = np.lexsort((-e, s))
        s, e, rows = s[sort], e[sort], rows[sort]
        de = np.diff(e)
    # a lane whose spans follow one another (a device stream, mostly) is its own reach and union:
    # the same arrays, not copies (at 10M events each copy is 80 MB)
    reach = e if (de >= 0).all() else np.maximum.accumulate(e)
    del ds, de
    union = _union_sorted(s, e if (e > s).all() else np.maximum(e, s + 1))  # a span of no length counts 1 ns
    cum = np.zeros(len(union), np.float64)  # the union's length before each of its spans
    np.cumsum((union.ends - union.starts)[:-1], out=cum[1:])
    nested = group in NESTED_GROUPS
    # a nested lane's rows are its tree's depths (the spans that could not nest already left out)
    if nested:
        depth = nested_depth[rows]
    else:  # spans that never meet (a device stream) are all at depth 0: no sort of their ends
        depth = np.zeros(s.size, np.int8) if len(union) == s.size else _depth(s, e)
    lane = LaneIndex(name, rank, group, s, e, reach, _narrow(codes_all[rows]), _narrow(rows), _narrow(depth), union, cum,
                     own=own[rows] if nested else None)
    lane.overview = _overview(lane)
    return lane


def _narrow(values: np.ndarray) -> np.ndarray:
    """Whole numbers (at least -1) in the narrowest of int8 .. int64 that holds them."""
    top = int(values.max()) if values.size else 0
    return values.astype(next(t for t in (np.int8, np.int16, np.int32, np.int64) if top <= np.iinfo(t).max), copy=False)


def _union_sorted(s: np.ndarray, e: np.ndarray) -> Spans:
    """:meth:`Spans.union_of` for spans sorted by start already (no sort: one running maximum)."""
    if s.size == 0:
        return Spans.empty()
    reach = np.maximum.accumulate(e)
    first = np.flatnonzero(np.r_[True, s[1:] > reach[:-1]])
    if first.size == s.size:  # no two spans touch: the union is the spans themselves
        return Spans(s, e)
    return Spans(s[first], reach[np.append(first[1:] - 1, s.size - 1)])


def _lane_arrays(lane: LaneIndex) -> dict:
    """A lane as the store keeps it (:class:`~.shelf.Shelf`)."""
    ov = lane.overview
    same = lambda a, *names: next((n for n in names if a is getattr(lane, n)), a)  # noqa: E731 (an array shared, by name)
    return {"name": lane.name, "rank": lane.rank, "group": lane.group, "starts": lane.starts, "ends": lane.ends,
            "reach": same(lane.reach, "ends"), "codes": lane.codes, "rows": lane.rows, "depth": lane.depth,
            "union_starts": same(lane.union.starts, "starts"), "union_ends": same(lane.union.ends, "ends", "reach"),
            "union_cum": lane.union_cum,
            "own": lane.own, "overview": None if ov is None else [ov.lo, ov.bin_ns],
            "overview_codes": None if ov is None else ov.codes, "overview_weights": None if ov is None else ov.weights}


def _stored_lane(a: dict) -> LaneIndex:
    ov = None if a["overview"] is None else Level(*a["overview"], a["overview_codes"], a["overview_weights"])
    return LaneIndex(a["name"], a["rank"], a["group"], a["starts"], a["ends"], a["reach"], a["codes"], a["rows"],
                     a["depth"], Spans(a["union_starts"], a["union_ends"]), a["union_cum"], own=a.get("own"), overview=ov)


def _kept_pyramid(shelf: "Shelf", k: int, lane: LaneIndex) -> list[Level]:
    """Lane ``k``'s pyramid from the store, else built and stored."""
    kept = shelf.levels(k)
    if kept is not None:
        return [Level(*lv) for lv in kept]
    levels = _pyramid(lane)
    shelf.keep_levels(k, [(lv.lo, lv.bin_ns, lv.codes, lv.weights) for lv in levels])
    return levels


def _made_on_read(name: str, doc: str) -> property:
    """A TimelineIndex attribute that a reopened index makes the first time it is read (``_made``)."""
    def read(self):
        self._made()
        return getattr(self, f"_{name}")

    def write(self, value) -> None:
        setattr(self, f"_{name}", value)
    return property(read, write, doc=doc)


@dataclass
class TimelineIndex:
    """Every lane of a trace, built once; :meth:`query` answers a view. Times are ns from
    ``origin`` (the first step's start, in the trace's clock), so float64 holds them to the ns
    (an absolute clock near 1e18 ns would round to 256 ns); the answers are in ms from it."""

    lanes: list[LaneIndex]
    names: np.ndarray  # operator names by code
    steps: pd.DataFrame  # rank, step, start_ns, end_ns
    origin: int
    lo: int
    hi: int
    series: list[dict] = field(default_factory=list)  # memory and counter lines: lane, label, unit, ts, values
    name_kinds: np.ndarray = field(default_factory=lambda: np.array([], dtype=object))  # each name's kind, by code
    # the trace's events, until :attr:`launches` is first read (made from them, then let go)
    launch_events: pd.DataFrame | None = field(default=None, repr=False)
    # where the findings are (:func:`~npumagic.analysis.marks.marks`), start_ns/end_ns from origin
    marks: pd.DataFrame = field(default_factory=pd.DataFrame)
    # the rows of regions and modules lanes' spans follow the other events' from this row (paths, threads)
    nested_from: int = 0
    drawn_kinds: set[str] = field(default_factory=set)  # the kinds of the events and spans drawn (the legend's)

    shelf: "Shelf | None" = None  # where the index is stored beside the run (None: nowhere)
    in_store: bool = False  # whether the store holds the lanes (read from it, or written by keep)
    # each step's critical path (critical.critical_spans), its lanes among the others; None until
    # add_critical_path has built it (an index built critical_later, for a first view that does not wait)
    critical: pd.DataFrame | None = None
    # held by whoever reads the index (the widget's answers) and by add_critical_path while it swaps in
    # what it built: no answer sees lanes whose rows or names are not there yet
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)
    _growing: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)  # add_critical_path, keep
    _launches: pd.DataFrame | None = field(default=None, repr=False, compare=False)
    _launching: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _events: pd.DataFrame | None = field(default=None, repr=False)  # :attr:`events`, once made
    _paths: np.ndarray = field(default_factory=lambda: np.array([], dtype=object), repr=False)
    _threads: np.ndarray = field(default_factory=lambda: np.array([], dtype=object), repr=False)
    # makes the events frame, paths and threads of a reopened index (:func:`_reopened_events`)
    _make_events: Callable[[], tuple] | None = field(default=None, repr=False, compare=False)
    _making: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def build(cls, trace: Trace, stored: bool = True, critical_later: bool = False) -> "TimelineIndex":
        """The index of ``trace``. ``stored``: its lanes are read from the store beside the run
        (``trace.meta.path``) where one matches the sources, and :meth:`keep` writes them there.
        ``critical_later``: the critical path's lanes are left to :meth:`add_critical_path` (the
        widget's first view does not wait for them), unless the store holds them."""
        events = trace.events
        drawn = _drawn_rows(events)
        count = int(drawn.sum())
        steps = trace.steps
        if len(steps) or not count:
            origin = int(steps["start_ns"].min()) if len(steps) else 0
        else:  # the first event drawn (no copy of the times)
            origin = int(np.min(events["ts_ns"].to_numpy(), where=drawn, initial=np.iinfo(np.int64).max))
        kind_counts = np.bincount(events["kind"].cat.codes.to_numpy() + 1, minlength=len(events["kind"].cat.categories) + 1)
        shelf = Shelf.of(trace.meta.path, count, kind_counts.tolist()) if stored else None
        kept = shelf.lanes() if shelf is not None else None
        if kept is not None:
            # reopened: the lanes, the names and their kinds are read, and the extent found from
            # the lanes, all the first view needs; the events' frame (hover, click, search, selection)
            # and the regions, modules and critical path's spans are made the first time they are read
            path = shelf.critical()  # the critical path of every step, read back with the lanes
            names, kinds, drawn_kinds = shelf.names()
            lanes = [_stored_lane(a) for a in kept]
            lo, hi = _extent(lanes, steps, origin)
            index = cls(lanes, names, steps, origin, lo, hi, series_of(trace, origin), kinds, events, shelf.marks(), count,
                        drawn_kinds=drawn_kinds, shelf=shelf, _make_events=partial(_reopened_events, trace, drawn, path, origin))
        else:
            path = None
            del drawn  # the build finds the events drawn again: their mask is not held while the lanes are made
            index = cls._built(trace, count, origin, shelf)
        index.in_store, index.critical = kept is not None, path
        for k, lane in enumerate(index.lanes):
            lane.pyramid = partial(_kept_pyramid, shelf, k) if shelf is not None else _pyramid
        if path is None and not critical_later:
            index.add_critical_path(trace)
        return index

    @classmethod
    def _built(cls, trace: Trace, count: int, origin: int, shelf: "Shelf | None") -> "TimelineIndex":
        """The index of ``trace`` built from its ``count`` events drawn, its regions and modules."""
        events, steps = trace.events, trace.steps
        ev = _drawn(events, _drawn_rows(events))
        names = np.asarray(events["name"].cat.categories.astype(str)) if count else np.array([], dtype=object)
        name_codes, kind_codes = (ev[c].cat.codes.to_numpy() for c in ("name", "kind"))
        kind_names = events["kind"].cat.categories.astype(str)
        kinds = _name_kinds(name_codes, kind_codes, kind_names, len(names))
        drawn_kinds = {str(kind_names[c]) for c in np.flatnonzero(np.bincount(kind_codes, minlength=len(kind_names)))}
        del kind_codes
        nested = nested_spans(trace)
        # the marks before the lanes' arrays exist, so that the peaks of memory of both do not add up
        marks = _marks(trace, origin)
        ts = ev["ts_ns"].to_numpy()
        end = np.maximum(ev["dur_ns"].to_numpy(), 0)
        end += ts - origin  # in place: at 10M events each array less is 80 MB less
        ts = ts - origin
        lo = int(min(ts.min(), 0)) if len(ts) else 0
        hi = int(max(end.max(), steps["end_ns"].max() - origin if len(steps) else 0)) if len(ts) else 1
        codes_all = name_codes.astype(np.int32, copy=False)
        details = ev[DETAILS]
        own, nested_depth, more = None, None, []
        if len(nested):  # regions and modules: lanes of their own, their spans rows of their own
            names, details, codes_all, ts, end, own, nested_depth, more = with_nested(
                nested, names, details, codes_all, ts, end, origin)
            kinds = nested_kinds(names, kinds, name_codes, nested)
            drawn_kinds |= set(kind_of_group(nested["group"].unique()).tolist())
        del name_codes
        order = [(rank, GROUP_ORDER[group], int(ts[rows].min()), lane, group, rows) for rank, group, lane, rows in more]
        for rank, lane, rows in _lane_rows(ev):
            group = _lane_group(ev["kind"].iloc[rows], int(ev["device"].iloc[rows].max()))
            order.append((int(rank), GROUP_ORDER[group], int(ts[rows].min()), lane, group, rows))
        lanes = [_lane(lane, rank, group, rows, ts=ts, end=end, codes_all=codes_all, own=own, nested_depth=nested_depth)
                 for rank, _, _, lane, group, rows in sorted(order, key=lambda o: o[:3])]
        paths, threads = (nested[c].to_numpy(object) if len(nested) else np.array([], dtype=object) for c in ("path", "thread"))
        # the launches wait for the first click that draws a flow (0.16 s of a reopened first view's
        # 0.26 s at 681k events: a third of the events are launches, their names and lanes made texts)
        return cls(lanes, names, steps, origin, lo, hi, series_of(trace, origin), kinds, events, marks, count,
                   drawn_kinds=drawn_kinds, shelf=shelf, _events=details, _paths=paths, _threads=threads)

    def _made(self) -> None:
        """A reopened index's events frame and its nested spans' paths and threads, made once."""
        with self._making:
            if self._make_events is not None:
                self._events, self._paths, self._threads = self._make_events()
                self._make_events = None

    events = _made_on_read("events", "name, ts_ns, dur_ns, step, shapes, source, kind and correlation of each "
                           "indexed event (the rows lanes point into); on a reopened index, made the first time "
                           "they are read.")
    paths = _made_on_read("paths", "The tree path of each span of regions and modules lanes (rows from nested_from).")
    threads = _made_on_read("threads", "The host thread of each span of regions and modules lanes (rows from "
                                       "nested_from).")

    @property
    def launches(self) -> pd.DataFrame:
        """The host calls carrying a launch's correlation id (not drawn): rank, lane, name,
        start_ns/end_ns from origin, correlation, queued_lane, queued_ns (:func:`~.launches.launches`;
        an event's rank is its lane's: the events frame does not repeat it). Made the first time
        they are read (the widget's thread after the first view, else the first flow asked)."""
        with self._launching:
            if self._launches is None:
                events = self.launch_events
                self._launches = launches(events, self.origin) if events is not None else pd.DataFrame()
                self.launch_events = None
            return self._launches

    def add_critical_path(self, trace: Trace) -> bool:
        """Each step's critical path (:func:`~.critical.critical_spans` of ``trace``, the trace
        this index was built from) as a lane per rank, where the index has none yet; whether lanes
        were added. They come after every other lane, their spans' rows after every other row and
        their new names after the others: lane numbers, rows and name codes answered before stay
        true. Built without :attr:`lock`, swapped in under it."""
        with self._growing:
            if self.critical is not None:
                return False
            path = critical_spans(trace)
            first, before = len(self.events), len(self.lanes)
            if not len(path):
                with self.lock:
                    self.critical, self.in_store = path, False  # a store that had none: kept again with it
                return False
            names, details, codes, ts, end, own, depth, more = nested_rows(path, self.names, self.events, self.origin)
            kinds = nested_kinds(names, self.name_kinds, self.events["name"].cat.codes.to_numpy()[:self.nested_from], path)
            lanes = [_lane(lane, rank, group, rows, ts=ts, end=end, codes_all=codes, own=own, nested_depth=depth)
                     for rank, group, lane, rows in sorted(more, key=lambda m: (m[0], int(ts[m[3]].min())))]
            for k, lane in enumerate(lanes, start=before):
                lane.rows = _narrow(lane.rows.astype(np.int64) + first)  # the rows of the events frame
                lane.pyramid = partial(_kept_pyramid, self.shelf, k) if self.shelf is not None else _pyramid
            paths = np.concatenate([self.paths, path["path"].to_numpy(object)]).astype(object)
            threads = np.concatenate([self.threads, path["thread"].to_numpy(object)]).astype(object)
            with self.lock:  # the lanes last: what they point into is there before them
                self.names, self.events, self.name_kinds, self.paths, self.threads = names, details, kinds, paths, threads
                self.drawn_kinds = self.drawn_kinds | set(kind_of_group(path["group"].unique()).tolist())
                self.critical, self.in_store = path, False
                self.lanes = self.lanes + lanes
            log.debug("timeline: the critical path's %d spans added in %d lanes", len(path), len(lanes))
            return True

    def keep(self) -> bool:
        """Write the lanes to the store beside the run, unless they came from there (or there is
        none); whether the store holds them now. Pyramids built later are added as they are built."""
        if self.shelf is None:
            return False
        with self._growing:  # not while add_critical_path adds lanes
            if not self.in_store:
                self.in_store = self.shelf.write([_lane_arrays(ln) for ln in self.lanes], self.marks, self.critical,
                                                 self.names, self.name_kinds, self.drawn_kinds)
        return self.in_store

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


def _joined(regions: pd.DataFrame, path: pd.DataFrame | None) -> pd.DataFrame:
    """The spans drawn in lanes of their own: regions, modules and each step's critical path."""
    if path is None:
        return regions
    return pd.concat([regions, path], ignore_index=True) if len(regions) and len(path) else path if len(path) else regions


def _marks(trace: Trace, origin: int) -> pd.DataFrame:
    from ...analysis.marks import marks

    table = marks(trace)
    return table.assign(start_ns=table["start_ns"] - origin, end_ns=table["end_ns"] - origin)


def duration(us: float) -> str:
    """A time as the tables write it: ms with two decimals from 1 ms, else us with one."""
    return f"{us / 1e3:,.2f} ms" if abs(us) >= 1e3 else f"{us:,.1f} µs"


def _name_kinds(name_codes: np.ndarray, kind_codes: np.ndarray, kind_names, names: int) -> np.ndarray:
    """The kind of each name code: the kind most of its events (their name and kind codes) have
    (one bincount, no sort)."""
    if not names:
        return np.array([], dtype=object)
    k = len(kind_names)
    table = np.bincount(name_codes.astype(np.int64) * k + kind_codes, minlength=names * k).reshape(names, k)
    return np.asarray(kind_names)[table.argmax(axis=1)]
