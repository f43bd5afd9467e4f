"""The live timeline's level-of-detail index against the events themselves: per pixel column,
the busy share equals the union of the lane's spans within the column (not their sum), the
dominant operator has the most time in it, and few events come back as themselves."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npumagic.analysis import schema
from npumagic.render.live import columns, lane_index, lod
from npumagic.render.live.lod import TimelineIndex

from ..conftest import ASCEND, NEED_SHARED

spans = st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 3_000), st.sampled_from("abcd")), min_size=1, max_size=60)


def _trace(host=(), device=(), device2=()) -> schema.Trace:
    """One rank: a host thread (nested ops allowed), two device streams (overlapping each other)."""
    rows = [dict(name=n, kind="host_op", ts_ns=s, dur_ns=d, lane="Python/Thread 1", stream=-1, device=-1, rank=0)
            for s, d, n in host]
    rows += [dict(name=n, kind="kernel", ts_ns=s, dur_ns=d, lane=f"GPU 0/Stream {k}", stream=k, device=0, rank=0)
             for k, lane in ((7, device), (8, device2)) for s, d, n in lane]
    return schema.finish(pd.DataFrame(rows), pd.DataFrame({"rank": [0], "step": [1], "start_ns": [0], "end_ns": [13_000]}))


def _union_in(starts, ends, a, b) -> float:
    """Brute force: the length of the union of [starts, ends) clipped to [a, b)."""
    covered = np.zeros(int(np.ceil(b)) - int(np.floor(a)) + 1, bool)
    base = int(np.floor(a))
    for s, e in zip(starts, ends):
        lo, hi = max(s, a), min(e, b)
        if hi > lo:
            covered[int(np.ceil(lo)) - base:int(np.ceil(hi)) - base] = True
    return float(covered.sum())


def _brute(index: TimelineIndex, lane: int, t0: float, t1: float, width: int):
    """Per column: (union length, {name: summed overlap}) from the lane's events."""
    ln = index.lanes[lane]
    edges = np.linspace(t0, t1, width + 1)
    out = []
    for a, b in zip(edges[:-1], edges[1:]):
        per = {}
        for s, e, c in zip(ln.starts, ln.ends, ln.codes):
            o = min(e, b) - max(s, a)
            if o > 0:
                per[str(index.names[c])] = per.get(str(index.names[c]), 0) + o
        out.append((_union_in(ln.starts, ln.ends, a, b), per))
    return edges, out


def _columns(index, t0_ns, t1_ns, width):
    """A query forced into columns for every lane (no lane sends its events)."""
    old = lod.EVENTS_MAX_PER_LANE
    lod.EVENTS_MAX_PER_LANE = -1
    try:
        return index.query(t0_ns / 1e6, t1_ns / 1e6, width)
    finally:
        lod.EVENTS_MAX_PER_LANE = old


@settings(max_examples=60, deadline=None)
@given(host=spans, device=spans, device2=spans, window=st.tuples(st.integers(0, 12_000), st.integers(50, 12_000)),
       width=st.integers(1, 40))
def test_busy_share_per_column_is_the_union_of_the_spans_in_it(host, device, device2, window, width):
    # GIVEN nested host ops and two overlapping device streams (integer ns, columns of whole ns)
    index = TimelineIndex.build(_trace(host, device, device2))
    t0 = window[0]
    t1 = t0 + max(window[1] // width, 1) * width
    # WHEN the view is asked for in columns
    answer = _columns(index, t0, t1, width)
    # THEN each column's busy share is the union of the lane's spans within it, over its width
    for k, part in enumerate(answer["lanes"]):
        edges, brute = _brute(index, k, t0, t1, width)
        expected = [u / (b - a) for (u, _), a, b in zip(brute, edges[:-1], edges[1:])]
        np.testing.assert_allclose(part["busy"], expected, atol=1e-4)


@settings(max_examples=60, deadline=None)
@given(host=spans, device=spans, window=st.tuples(st.integers(0, 12_000), st.integers(50, 12_000)),
       width=st.integers(1, 40))
def test_the_dominant_operator_has_the_most_time_in_its_column(host, device, window, width):
    index = TimelineIndex.build(_trace(host, device))
    t0, t1 = window[0], window[0] + window[1]
    answer = _columns(index, t0, t1, width)
    for k, part in enumerate(answer["lanes"]):
        _, brute = _brute(index, k, t0, t1, width)
        for code, (_, per) in zip(part["dominant"], brute):
            if not per:
                assert code == -1
                continue
            assert per[answer["names"][code]] == pytest.approx(max(per.values()), rel=1e-9, abs=1e-6)


def test_a_sparse_view_answers_with_the_events_themselves():
    # GIVEN nested host ops: an outer op holding two inner ones, and a later op
    index = TimelineIndex.build(_trace(host=[(0, 1000, "outer"), (100, 200, "a"), (400, 300, "b"), (5000, 100, "late")]))
    # WHEN the view covers the first three only
    part = index.query(0, 0.002, 800)["lanes"][0]
    names = index.query(0, 0.002, 800)["names"]
    # THEN they come back themselves, with their nesting depth, in ms
    assert part["mode"] == "events"
    assert [names[c] for c in part["name"]] == ["outer", "a", "b"]
    assert part["depth"] == [0, 1, 1]
    assert part["start"] == [0.0, 0.0001, 0.0004] and part["end"][0] == 0.001
    assert index.details(part["id"][1])["name"] == "a"


def test_idle_gaps_of_a_device_lane_are_the_holes_between_its_spans():
    index = TimelineIndex.build(_trace(device=[(0, 1000, "k"), (3000, 1000, "k"), (4050, 100, "k")]))
    part = index.query(0, 0.005, 100)["lanes"][0]
    assert part["gaps"] == [[0.001, 0.003]]  # the 50 ns hole is under 2% of the 5 us view
    # a hole running past either edge of the view is still one
    assert index.query(0.0005, 0.002, 100)["lanes"][0]["gaps"] == [[0.001, 0.003]]
    assert index.query(0.002, 0.0035, 100)["lanes"][0]["gaps"] == [[0.001, 0.003]]


def test_a_crowded_view_reads_the_dominant_operator_from_the_pyramid(monkeypatch):
    # GIVEN 4000 short kernels of one name, then 4000 of another, and a pyramid built from 1000 events on
    monkeypatch.setattr(lane_index, "EXACT_LIMIT", 1000)
    left = [(i * 10, 5, "left") for i in range(4000)]
    right = [(40_000 + i * 10, 5, "right") for i in range(4000)]
    index = TimelineIndex.build(_trace(device=left + right))
    assert index.lanes[0].levels
    # WHEN the whole lane is shown at 20 columns (each over many of the pyramid's bins)
    answer = index.query(0, 0.08, 20)
    part = answer["lanes"][0]
    # THEN the left half is "left", the right half "right", and each column is half busy
    assert [answer["names"][c] for c in part["dominant"]] == ["left"] * 10 + ["right"] * 10
    np.testing.assert_allclose(part["busy"], 0.5, atol=0.01)


@pytest.mark.skipif(not (ASCEND / "level1").exists(), reason=f"{NEED_SHARED} — {ASCEND / 'level1'} is absent")
def test_the_level1_job_gives_one_group_of_lanes_per_rank_host_before_device():
    import npumagic

    index = TimelineIndex.build(npumagic.load(ASCEND / "level1"))
    layout = index.layout()
    # the critical path's lanes come after every other (added after the first view, the numbers of
    # the lanes answered before stay theirs): the browser draws each rank's lanes as a group
    ranks = [ln["rank"] for ln in layout["lanes"] if ln["group"] != "critical"]
    assert ranks == sorted(ranks) and set(ranks) == {0, 1}
    assert [(ln["rank"], ln["group"]) for ln in layout["lanes"][len(ranks):]] == [(0, "critical"), (1, "critical")]
    for r in (0, 1):
        groups = [ln["group"] for ln in layout["lanes"] if ln["rank"] == r]
        # the host's threads, then its regions and nn.Module lanes (torch_npu recorded them), then the
        # device's, then the critical path
        assert groups == sorted(groups, key=["host", "regions", "modules", "device", "comm", "critical"].index)
        assert "device" in groups and "modules" in groups
    assert {s["lane"] for s in layout["series"]} >= {"memory"}


def test_columns_a_span_covers_whole_go_to_the_outermost_span(monkeypatch):
    # GIVEN an op (code 0) over ten columns with a short nested one (code 1) inside column 5
    s, e, codes = np.array([0, 520]), np.array([1000, 560]), np.array([0, 1])
    # THEN the pyramid's finest bins and a crowded view (beyond TABLE_LIMIT) both give every
    # column to the outer op, each column it covers whole at its full width
    assert columns.longest(s, e, codes, 0.0, 100.0, 10).tolist() == [0] * 10
    monkeypatch.setattr(columns, "TABLE_LIMIT", 0)
    out, best = columns.dominant(s, e, codes, 0.0, 1000.0, 10)
    assert out.tolist() == [0] * 10 and np.allclose(best[1:9], 100.0)


@pytest.mark.parametrize("t0, t1", [(-1e300, 1e300), (1e300, 1e300), (-1e308, -1e307), (0.0, 0.013)])
def test_any_window_is_answered_in_strict_json_even_with_an_infinite_counter_sample(t0, t1):
    # GIVEN a trace whose HBM counter holds an infinite sample (a corrupt vendor file)
    import json
    import warnings

    import dataclasses

    trace = _trace(host=[(0, 5_000, "a")], device=[(1_000, 2_000, "k")])
    trace = dataclasses.replace(trace, counters=schema.sort_counters(schema.coerce(pd.DataFrame(
        {"rank": 0, "device": 0, "group": "HBM", "name": "read", "unit": "B/s", "ts_ns": [0, 4_000, 8_000],
         "value": [1.0, float("inf"), 2.0]}), schema.COUNTER_COLUMNS)))
    index = TimelineIndex.build(trace)
    # WHEN a window at or beyond the clamp (±1e300 ms) is asked for
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflowing int64 cast on the way
        answer = index.query(t0, t1, 500)
    # THEN the answer is strict JSON (no Infinity, no NaN) and its window is inside the clamp
    json.dumps(answer, allow_nan=False)
    assert -lod.VIEW_LIMIT_MS <= answer["t0"] < answer["t1"] and answer["t0"] <= lod.VIEW_LIMIT_MS
    assert len(answer["series"]) == 1 and all(v is None or abs(v) < 1e300 for v in answer["series"][0])


def test_a_memory_lane_zoomed_in_answers_each_allocation_and_free_as_the_trace_records_it():
    import gzip
    import json

    import npumagic

    from ..conftest import CUDA, need

    folder = need(CUDA / "tracelens" / "h100_owlv2")
    index = TimelineIndex.build(npumagic.load(folder))
    with gzip.open(next(folder.glob("*.json.gz")), "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("name") == "[memory]" and e["args"]["Device Type"] == 1]
    # the json's microseconds with three decimals, to the ns, from the timeline's origin
    ts = np.array([round(e["ts"] * 1000) for e in events]) - index.origin
    k = next(i for i, s in enumerate(index.layout()["series"]) if s["label"] == "cuda:0 allocated")
    middle = len(events) // 2
    t0, t1 = ts[middle] / 1e6, ts[middle + 40] / 1e6  # 40 of its 12,270 allocations and frees
    answer = index.query(t0, t1, 1200)
    got = answer["memory"][k]
    inside = [e for e, t in zip(events, ts) if t0 * 1e6 <= t < t1 * 1e6]
    assert len(got["t"]) == len(inside) >= 40
    assert got["change"] == pytest.approx([e["args"]["Bytes"] / 2**20 for e in inside], abs=1e-6)
    assert got["total"] == pytest.approx([e["args"]["Total Allocated"] / 2**20 for e in inside], abs=1e-6)
    assert any(c > 0 for c in got["change"]) and any(c < 0 for c in got["change"])  # allocations and frees
    # the whole run: thousands of samples, the columns serve; other lines carry none
    whole = index.query(index.lo / 1e6, index.hi / 1e6, 1200)
    assert whole["memory"][k] is None and len(whole["series"][k]) == 1200
    assert all(m is None for s, m in zip(index.series, answer["memory"]) if s["lane"] != "memory")
