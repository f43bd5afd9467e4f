"""The live timeline's critical path lane (render/live/critical.py): each step's critical path of a
real CUDA trace, span for span, in a lane of its own under the rank's device lanes."""

from __future__ import annotations

import numpy as np
import pytest

from npumagic.analysis.critical_path import critical_path
from npumagic.render.live.lod import TimelineIndex
from npumagic.render.live.lookup import search

from ..conftest import CUDA, shared_trace


@pytest.fixture(scope="module")
def built():
    trace = shared_trace(CUDA / "ns_resolution")
    return trace, TimelineIndex.build(trace, stored=False)


def _critical(index):
    return [lane for lane in index.lanes if lane.group == "critical"]


def test_each_steps_path_is_drawn_span_for_span(built):
    trace, index = built
    [lane] = _critical(index)
    paths = [critical_path(trace.events, trace.steps, int(s)).segments for s in trace.steps["step"]]
    starts = np.sort(np.concatenate([p["start_ns"].to_numpy() for p in paths])) - index.origin
    ends = np.sort(np.concatenate([p["end_ns"].to_numpy() for p in paths])) - index.origin
    assert np.array_equal(np.sort(lane.starts), starts) and np.array_equal(np.sort(lane.ends), ends)


def test_a_span_says_what_bounds_the_path_there(built):
    trace, index = built
    [lane] = _critical(index)
    first = critical_path(trace.events, trace.steps).segments.iloc[0]
    k = int(np.flatnonzero(lane.starts == first["start_ns"] - index.origin)[0])
    detail = index.details(int(lane.rows[k]))
    assert detail["path"] == f"{first['kind']}: {first['name']}" and detail["step"] == int(trace.steps["step"].iat[0])


def test_a_path_that_outlasts_the_next_steps_start_takes_a_row_below(built):
    # ns_resolution's GPU runs step 101's kernels until 97 ms, long after step 102 began (35 ms)
    _, index = built
    [lane] = _critical(index)
    assert set(np.unique(lane.depth)) == {0, 1}
    for row in (0, 1):
        order = np.argsort(lane.starts[lane.depth == row], kind="stable")
        s, e = lane.starts[lane.depth == row][order], lane.ends[lane.depth == row][order]
        assert (s[1:] >= e[:-1]).all()  # no two spans of a row overlap


def test_the_lane_comes_last_in_its_rank_and_is_answered(built):
    _, index = built
    layout = index.layout()
    assert layout["lanes"][-1]["group"] == "critical" and layout["lanes"][-1]["name"] == "critical path"
    answer = index.query(*layout["extent"], 600)
    assert len(answer["lanes"]) == len(layout["lanes"])


def test_search_finds_a_kernel_once_not_again_on_the_path(built):
    trace, index = built
    ev = trace.events
    name = str(ev.loc[ev["kind"] == "kernel", "name"].value_counts().index[0])
    on_path = (critical_path(ev, trace.steps).segments["name"] == name).any()
    assert on_path and len(search(index, name, regex=False).starts) == int((ev["name"] == name).sum())


def test_a_trace_without_launched_device_work_has_no_path_lane():
    trace = shared_trace(CUDA / "hta_more" / "cpu_only_2024")
    assert not _critical(TimelineIndex.build(trace, stored=False))
