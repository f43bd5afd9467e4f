"""Two per-summary passes over host lanes done on arrays instead of text per row or a frame per
lane (issue 45's start-up: `npumagic analyze` of a small trace) give what the per-row way gives,
on the shared V100 trace."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npumagic.analysis.crossbackend import _split_thread, _thread
from npumagic.analysis.gaps import _top_level_mask

from ..conftest import CUDA, need, shared_trace


def _top_level_ops(host: pd.DataFrame) -> pd.DataFrame:
    """The reference: each thread's operators as a frame, those no earlier one of it reaches past."""
    def top_level(ops: pd.DataFrame) -> pd.DataFrame:
        start = ops["ts_ns"].to_numpy()
        end = start + ops["dur_ns"].to_numpy()
        order = np.lexsort((-end, start))
        reach = np.maximum.accumulate(end[order])
        top = np.ones(order.size, dtype=bool)
        top[1:] = start[order][1:] >= reach[:-1]
        return ops.iloc[order[top]]

    return pd.concat([top_level(g) for _, g in host.groupby("lane", observed=True)], ignore_index=True)


def _host_ops() -> pd.DataFrame:
    ev = shared_trace(need(CUDA / "ns_resolution")).events
    return ev[((ev["kind"] == "host_op") & (ev["device"] < 0)).to_numpy()]


def test_a_lanes_thread_is_split_once_per_lane_as_per_row():
    # GIVEN every event's lane (categorical), one event without a lane among them
    lane = shared_trace(need(CUDA / "ns_resolution")).events["lane"]
    lane = pd.concat([lane, pd.Series(pd.Categorical([None], dtype=lane.dtype))], ignore_index=True)
    # WHEN threads are read per lane THEN they are the per-row split's, missing included
    per_row, per_lane = _split_thread(lane), _thread(lane)
    assert per_lane.tolist()[:-1] == per_row.tolist()[:-1] and "Thread 1102" in set(per_lane)
    assert per_lane[-1] == per_row[-1] == "nan"


def test_a_run_without_any_host_lane_splits_to_no_thread():
    # GIVEN a lane column without categories (an empty run's): its float categories are no text
    lane = pd.Series(pd.Categorical.from_codes([-1, -1], categories=pd.Index([], dtype=float)))
    # THEN each row's thread is "nan", as for a row without a lane, not an error
    assert _thread(lane).tolist() == ["nan", "nan"]


def test_top_level_calls_on_arrays_are_those_of_a_frame_per_lane():
    # GIVEN the host operators WHEN the top-level ones are marked on arrays THEN they are the rows
    # the frame-per-lane way returns, and some calls are nested (so the test tells them apart)
    ops = _host_ops().assign(_row=lambda f: np.arange(len(f)))
    start = ops["ts_ns"].to_numpy()
    top = _top_level_mask(pd.factorize(ops["lane"])[0], start, start + ops["dur_ns"].to_numpy())
    assert sorted(np.flatnonzero(top)) == sorted(_top_level_ops(ops)["_row"])
    assert 0 < top.sum() < len(ops)


def test_a_call_starting_where_another_ends_is_top_level_and_one_without_a_lane_never():
    # GIVEN lane 0: [0, 10), [10, 20) touching it, [2, 5) inside it; lane 1: [0, 3); no lane: [0, 9)
    lanes, start, end = np.array([0, 0, 0, 1, -1]), np.array([0, 10, 2, 0, 0]), np.array([10, 20, 5, 3, 9])
    # WHEN marked THEN the touching call is top-level, the nested one not, the lane-less one never
    assert _top_level_mask(lanes, start, end).tolist() == [True, True, False, True, False]


def test_the_top_level_operators_are_found_once_and_forgotten_with_their_events():
    import gc

    from npumagic.analysis import gaps

    # GIVEN the host operators of a trace's events, asked for twice (the gap tables, the dispatch
    # measures and the blocking units of one summary each ask)
    ev = shared_trace(need(CUDA / "ns_resolution")).events.copy()
    first = gaps.top_host_ops(ev)
    # THEN the second answer is the first, not a second pass; they are the frame-per-lane reference's
    assert gaps.top_host_ops(ev) is first
    assert gaps.top_host_ops(ev.reset_index(drop=True)) is first  # the summary's table: the same arrays
    moved = ev.assign(ts_ns=ev["ts_ns"] + 1)
    assert gaps.top_host_ops(moved) is not first  # other values: found again
    del moved
    first = gaps.top_host_ops(ev)
    ops = ev.assign(_row=np.arange(len(ev)))[((ev["kind"] == "host_op") & (ev["device"] < 0)).to_numpy()]
    assert sorted(first[0]) == sorted(_top_level_ops(ops)["_row"])
    # WHEN the events are gone THEN so is the answer held for them (a notebook holds no copy of it)
    del ev, ops
    gc.collect()
    assert gaps._MEMO == {} and gaps._MEMO_OF == [None, None]


def test_calls_starting_together_in_time_order_keep_the_enclosing_one():
    # GIVEN calls sorted by start (as the reader sorts a trace): on lane 0 a child listed before its
    # parent, both starting at 0, then [5, 6) inside the parent and [10, 12) after it; on lane 1 two
    # equal calls and one [0, 4) interleaved with lane 0's; a lane-less call
    lanes = np.array([0, 1, 0, 1, 1, 0, 0, -1])
    start = np.array([0, 0, 0, 0, 1, 5, 10, 11])
    end = np.array([3, 4, 8, 4, 2, 6, 12, 20])
    # WHEN marked THEN the parent is top-level, not the child listed first; of two equal calls the
    # first; what starts after its lane's calls end is top-level, what lies inside one is not
    top = _top_level_mask(lanes, start, end)
    assert top.tolist() == [False, True, True, False, False, False, True, False]
    # and in any order of the rows
    shuffled = np.random.default_rng(1).permutation(lanes.size)
    assert _top_level_mask(lanes[shuffled], start[shuffled], end[shuffled]).tolist() == top[shuffled].tolist()


def test_launch_threads_as_text_are_the_per_row_split():
    from npumagic.analysis.crossbackend import _at, _text_thread

    # GIVEN the trace's events, one without a lane among them
    ev = shared_trace(need(CUDA / "ns_resolution")).events
    lane = pd.concat([ev["lane"], pd.Series(pd.Categorical([None], dtype=ev["lane"].dtype))], ignore_index=True)
    calls = pd.DataFrame({"lane": lane, "ts_ns": np.arange(len(lane)), "correlation": np.arange(len(lane))})
    # WHEN their threads are made as text per lane THEN they are the per-row split's, dtype and all
    per_row = _text_thread(pd.DataFrame({"thread": _split_thread(lane), "ts": calls["ts_ns"].to_numpy(),
                                         "correlation": calls["correlation"].to_numpy()}))
    pd.testing.assert_frame_equal(_at(calls), per_row)
    assert _at(calls)["thread"].iat[-1] == "nan" and "Thread 1102" in set(_at(calls)["thread"])
