"""What the host runs while the device idles: the host operators under the device's largest
idle gaps inside the steps, each with the idle time it covers and the device launches it made
(an operator that covers long idle time and launches little is CPU work, not launch overhead)."""

from __future__ import annotations

import weakref

import numpy as np
import pandas as pd

from .intervals import Spans, spans_of
from .schema import LAUNCH_KINDS, device_work_rows, kind_in

GAP_OP_COLUMNS = ["op", "idle_us", "launches", "calls"]


# The last table made and the events it was made of: the host_bound rule and the critical-path
# bound (path_bound.made) ask for the same one, a whole-trace pass each
_LAST: list = [None, 0, None]


def gap_operators(ev: pd.DataFrame | None, largest: int = 10) -> pd.DataFrame:
    """The top-level host operators under the ``largest`` device idle gaps of the steps, by the
    idle time they cover (:data:`GAP_OP_COLUMNS`); empty without device work or events."""
    if ev is None or ev.empty:
        return pd.DataFrame(columns=GAP_OP_COLUMNS)
    made, of, table = _LAST
    if made is not None and made() is ev and of == largest:
        return table.copy()
    table = _gap_operators(ev, largest)
    _LAST[:] = [weakref.ref(ev), largest, table]
    return table.copy()


def _gap_operators(ev: pd.DataFrame, largest: int) -> pd.DataFrame:
    busy, rows, lanes, start, end = _busy_and_top_calls(ev)
    if len(busy) < 2 or not rows.size:
        return pd.DataFrame(columns=GAP_OP_COLUMNS)
    gap_lo, gap_hi = busy.ends[:-1], busy.starts[1:]
    pick = longest_first(gap_hi - gap_lo, largest)
    covered = Spans.union_of(gap_lo[pick], gap_hi[pick]).covered(start, end)
    keep = np.flatnonzero(covered > 0)
    if not keep.size:
        return pd.DataFrame(columns=GAP_OP_COLUMNS)
    # each thread's in turn (by lane), each by start, the enclosing first: the order a table by thread had
    keep = keep[np.lexsort((-end[keep], start[keep], lanes[keep]))]
    launched = (ev["step"].to_numpy() >= 0) & kind_in(ev["kind"], LAUNCH_KINDS) & (ev["correlation"].to_numpy() >= 0)
    t = ev["ts_ns"].to_numpy()[launched]
    if not (t[1:] >= t[:-1]).all():  # a trace's events come in time order (schema.finish sorts them)
        t = np.sort(t)
    tops = pd.DataFrame({"op": ev["name"].iloc[rows[keep]].astype(str).to_numpy(), "idle_ns": covered[keep],
                         "launches": np.searchsorted(t, end[keep]) - np.searchsorted(t, start[keep])})
    table = tops.groupby("op", sort=False).agg(idle_us=("idle_ns", "sum"), launches=("launches", "sum"),
                                               calls=("idle_ns", "size")).reset_index()
    table["idle_us"] = table["idle_us"] / 1000.0
    return table.sort_values("idle_us", ascending=False, kind="stable").reset_index(drop=True)[GAP_OP_COLUMNS]


def longest_first(lengths: np.ndarray, largest: int) -> np.ndarray:
    """The positions of the ``largest`` longest of ``lengths``, longest first, ties in position
    order: a stable sort's first ``largest``, without sorting every gap (a million at 10M events)."""
    if lengths.size <= largest:
        return np.argsort(-lengths, kind="stable")
    shortest_kept = np.partition(lengths, lengths.size - largest)[lengths.size - largest]
    candidates = np.flatnonzero(lengths >= shortest_kept)
    return candidates[np.argsort(-lengths[candidates], kind="stable")][:largest]


def _busy_and_top_calls(ev: pd.DataFrame) -> tuple[Spans, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The device's work inside the steps as spans, and the steps' top-level host operators
    (:func:`_top_calls`)."""
    return (_memo(ev, "busy", _step_busy), *_top_calls(ev))


def _step_busy(ev: pd.DataFrame) -> Spans:
    return spans_of(ev, (ev["step"].to_numpy() >= 0) & device_work_rows(ev))


def _top_calls(ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The steps' top-level host operators (:func:`top_host_ops` inside a step)."""
    rows, lanes, start, end = top_host_ops(ev)
    inside = ev["step"].to_numpy()[rows] >= 0
    return rows[inside], lanes[inside], start[inside], end[inside]


def top_host_ops(ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The host operators of ``ev`` that no other operator of their thread encloses: their rows,
    lane codes (:func:`lane_codes`), starts and ends, by row. On arrays, not frames of the rows: at
    10M events such copies had been a summary's peak memory."""
    return _memo(ev, "tops", _top_host_ops)


def _top_host_ops(ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rows = np.flatnonzero(((ev["kind"] == "host_op") & (ev["device"] < 0)).to_numpy())
    lanes = lane_codes(ev)[rows]
    start = ev["ts_ns"].to_numpy()[rows]
    end = start + ev["dur_ns"].to_numpy()[rows]
    top = _top_level_mask(lanes, start, end)
    return rows[top], lanes[top], start[top], end[top]


# What the passes over the last events asked about found: the top-level host operators and the
# device's busy time, which the gap tables, the dispatch measures and the blocking units of one
# summary each ask for (a pass over millions of events at 10M), of the trace's events or of the
# summary's table of them, a frame over the same arrays. Held with the columns they were made of
# (their buffers: alive while the frame is) and forgotten with that frame: a notebook that reads
# one large trace holds no copy after it.
_MEMO: dict = {}
_MEMO_OF: list = [None, None]  # a weak reference to the frame, and its columns' buffers
_READS = ("kind", "device", "lane", "step", "ts_ns", "dur_ns")


def _memo(ev: pd.DataFrame, key: str, make):
    columns = _buffers(ev)
    held, made_of = _MEMO_OF
    if held is None or held() is None or made_of != columns:
        _MEMO.clear()
        _MEMO_OF[:] = [weakref.ref(ev, lambda _: (_MEMO.clear(), _MEMO_OF.__setitem__(slice(None), [None, None]))),
                       columns]
    if key not in _MEMO:
        _MEMO[key] = make(ev)
    return _MEMO[key]


def _buffers(ev: pd.DataFrame) -> tuple:
    """Where the columns the passes read hold their values (a categorical's codes), and how many:
    equal for two frames over the same arrays."""
    arrays = [ev[c].array.codes if isinstance(ev[c].dtype, pd.CategoricalDtype) else ev[c].to_numpy() for c in _READS]
    return (len(ev), *(a.__array_interface__["data"][0] if isinstance(a, np.ndarray) else id(a) for a in arrays))


def lane_codes(ev: pd.DataFrame) -> np.ndarray:
    """Each event's lane as an integer (its category's, or its rank among the lanes by name), -1 for none."""
    lane = ev["lane"]
    return lane.cat.codes.to_numpy() if isinstance(lane.dtype, pd.CategoricalDtype) else pd.factorize(lane, sort=True)[0]


def gap_cover_ns(ev: pd.DataFrame) -> np.ndarray:
    """For each event of ``ev``: the device idle time inside the steps (every gap between device
    work) that it covers, if it is a top-level host operator of a step; 0 for every other event."""
    out = np.zeros(len(ev))
    busy, rows, _, start, end = _busy_and_top_calls(ev)
    if len(busy) < 2 or not rows.size:
        return out
    out[rows] = Spans(busy.ends[:-1], busy.starts[1:]).covered(start, end)
    return out


def _top_level_mask(lanes: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Which calls no other call of their lane encloses (on arrays, in place of a frame per lane: it
    ran once per summary); ``lanes`` codes, -1 (no lane) never."""
    order = np.lexsort((-end, start, lanes))
    top = np.zeros(order.size, dtype=bool)
    cuts = np.flatnonzero(np.diff(lanes[order])) + 1
    for part in np.split(order, cuts):
        if part.size and lanes[part[0]] >= 0:
            reach = np.maximum.accumulate(end[part])
            top[part[0]] = True
            top[part[1:]] = start[part][1:] >= reach[:-1]
    return top


# torch's own wrappers (autograd's backward nodes, optimizer steps): their host time is dispatch
# of the operators inside them, which launch the device work, not CPU work to move elsewhere
_FRAMEWORK = ("autograd::engine", "Backward", "Optimizer.", "optimizer", "AccumulateGrad", "DataParallel", "nn.Module")


def cpu_work(table: pd.DataFrame, per_launch_us: float) -> pd.DataFrame:
    """The rows of :func:`gap_operators` that are CPU work: more idle time per device launch
    than ``per_launch_us`` (launching a kernel costs a few microseconds), outside torch's own
    autograd and optimizer wrappers."""
    framework = table["op"].str.contains("|".join(_FRAMEWORK), regex=True)
    return table[(table["idle_us"] > per_launch_us * np.maximum(table["launches"], 1)) & ~framework]


# Between two operators the host runs the Python that dispatches the next: microseconds an operator
# (tens under load); a longer gap is the step's own Python (a loop, logging, a sleep), which fusing the
# operators leaves in place
DISPATCH_GAP_US = 50.0


def _top_level_calls(ev: pd.DataFrame | None) -> tuple[np.ndarray, ...] | None:
    """The top-level host operators inside steps (:func:`_top_calls`), in order per thread: lane codes,
    starts, ends and steps; None without events."""
    if ev is None or ev.empty:
        return None
    rows, lanes, start, end = _top_calls(ev)
    order = np.lexsort((start, lanes))
    return lanes[order], start[order], end[order], ev["step"].to_numpy()[rows][order]


def dispatch_ms(ev: pd.DataFrame | None, steps: int) -> float | None:
    """The host's time per step (ms) between consecutive top-level operators of each thread inside
    a step, in gaps under :data:`DISPATCH_GAP_US`: the dispatch that fewer, fused operators save;
    None without events."""
    calls = _top_level_calls(ev)
    if calls is None:
        return None
    lanes, start, end, step = calls
    gap = start[1:] - end[:-1]
    same = (lanes[1:] == lanes[:-1]) & (step[1:] == step[:-1]) & (gap > 0) & (gap < DISPATCH_GAP_US * 1000)
    return float(gap[same].sum()) / 1e6 / max(steps, 1)


# A run of small operators: at least RUN_MIN_CALLS top-level operators in a row, typically (their median)
# under DISPATCH_GAP_US, none and no pause between two longer than RUN_BREAK_US (a loop of small
# operators; a longer call or pause is other work, a sleep or a read, that fusing them leaves in place)
RUN_MIN_CALLS = 16
RUN_BREAK_US = 1000.0


def short_runs_ms(ev: pd.DataFrame | None, steps: int) -> float | None:
    """The host's time per step (ms) from the first to the last operator of each run of small
    operators: what compiling the loop that makes them removes at most (the operators, the Python
    dispatching each, its allocations and their garbage collection); None without events."""
    calls = _top_level_calls(ev)
    if calls is None:
        return None
    lanes, start, end, step = calls
    took = end - start
    brief = took < RUN_BREAK_US * 1000
    joined = (lanes[1:] == lanes[:-1]) & (step[1:] == step[:-1]) & brief[1:] & brief[:-1] & \
        (start[1:] - end[:-1] < RUN_BREAK_US * 1000)
    cuts = np.flatnonzero(~joined) + 1  # runs: maximal stretches of joined neighbours
    total = 0
    for first, last in zip(np.r_[0, cuts], np.r_[cuts, lanes.size] - 1):
        if last - first + 1 >= RUN_MIN_CALLS and np.median(took[first:last + 1]) < DISPATCH_GAP_US * 1000:
            total += int(end[first:last + 1].max() - start[first])
    return total / 1e6 / max(steps, 1)
