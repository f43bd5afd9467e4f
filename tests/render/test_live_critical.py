"""The live timeline's critical path lane (render/live/critical.py): each step's critical path of a
real CUDA trace, span for span, in a lane of its own under the rank's device lanes."""

from __future__ import annotations

import numpy as np
import pytest

from npumagic.analysis.critical_path import critical_path
from npumagic.render.live.critical import critical_spans
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


def _spans_of(index, path) -> tuple[np.ndarray, np.ndarray]:
    lanes = _critical(index)
    starts = np.sort(np.concatenate([ln.starts for ln in lanes])) if lanes else np.empty(0, np.int64)
    return starts, np.sort(path["ts_ns"].to_numpy(np.int64) - index.origin)


@pytest.fixture()
def held(monkeypatch):
    """critical_spans held until the test sets the event returned (or 30 s pass), then walked."""
    import threading

    from npumagic.render.live import lod

    release, walked = threading.Event(), threading.Event()
    real = lod.critical_spans

    def slow(trace):
        release.wait(30)
        try:
            return real(trace)
        finally:
            walked.set()

    monkeypatch.setattr(lod, "critical_spans", slow)
    return release, walked


def _join_after_first_view():
    import threading

    from npumagic.render.live.frontend import AFTER_FIRST_VIEW

    for thread in threading.enumerate():
        if thread.name == AFTER_FIRST_VIEW:
            thread.join(120)


def test_the_widgets_first_view_does_not_wait_for_the_path_which_arrives_after(built, held):
    from npumagic.render.live.frontend import timeline_widget

    trace, whole = built
    release, _ = held
    # GIVEN a widget over a GPU run whose critical path is still being walked
    widget = timeline_widget(trace)
    # THEN its first view is answered, every lane but the path's
    assert widget.tiles["lanes"] and len(widget.tiles["lanes"]) == len(widget.frame["lanes"])
    assert "critical" not in {ln["group"] for ln in widget.frame["lanes"]}
    # WHEN the path is walked
    release.set()
    _join_after_first_view()
    # THEN its lane is sent (last, with its legend), it holds each step's path, and the view asked
    # again (as the browser does on a new frame) is answered with it
    lanes = widget.frame["lanes"]
    assert lanes[-1]["group"] == "critical" and lanes[-1]["name"] == "critical path"
    assert "critical" in {item["kind"] for item in widget.frame["legend"]}
    starts, want = _spans_of(widget.index, critical_spans(trace))
    assert want.size and np.array_equal(starts, want)
    widget.view = dict(widget.view, seq=widget.view["seq"] + 1)
    assert len(widget.tiles["lanes"]) == len(lanes) and widget.tiles["lanes"][-1]["lane"] == len(lanes) - 1
    # and the index grown is the index built with the path at once, answer for answer
    assert widget.index.layout() == whole.layout()
    lo, hi = whole.layout()["extent"]
    for t0, t1 in ((lo, hi), (lo, lo + (hi - lo) / 50)):
        assert widget.index.query(t0, t1, 800) == whole.query(t0, t1, 800)
    row = int(_critical(whole)[0].rows[3])
    assert widget.index.details(row) == whole.details(row)


def test_an_answer_in_flight_never_sees_the_lanes_grow(built, held):
    import threading
    import time

    trace, _ = built
    release, walked = held
    index = TimelineIndex.build(trace, stored=False, critical_later=True)
    lanes, events = index.lanes, index.events
    # GIVEN an answer in flight (the index's lock held) while the path is added on another thread
    with index.lock:
        adding = threading.Thread(target=index.add_critical_path, args=(trace,))
        adding.start()
        release.set()
        walked.wait(60)
        time.sleep(1)  # time for the thread to reach its swap (a pause, not a measure)
        # THEN the lanes, their rows and names do not change under it
        assert index.lanes is lanes and index.events is events and index.critical is None
    adding.join(60)
    assert len(index.lanes) == len(lanes) + 1 and len(index.events) > len(events)


def test_a_steps_path_walked_over_its_own_events_is_the_path_over_the_whole_trace():
    # each step's events are taken out (its window's and those sharing their correlation ids): the
    # device work of ns_resolution's step 101 runs far into the next steps, nccl's has three streams
    for name in ("ns_resolution", "nccl"):
        trace = shared_trace(CUDA / name)
        spans = critical_spans(trace)
        whole = [critical_path(trace.events, trace.steps, int(s), rank=int(r)).segments
                 for r, s in trace.steps.sort_values(["rank", "start_ns"])[["rank", "step"]].itertuples(index=False)]
        starts = np.concatenate([w["start_ns"].to_numpy() for w in whole])
        paths = np.concatenate([(w["kind"] + ": " + w["name"]).to_numpy(object) for w in whole])
        assert np.array_equal(spans["ts_ns"].to_numpy(), starts) and list(spans["path"]) == list(paths), name


def _stitched():
    """Five copies of a real step one after another, their correlation ids the same (as a
    benchmark's file scaled up by copying is): each step's launches would link every copy's
    kernels. No path: nothing to store the index beside."""
    import dataclasses

    import pandas as pd

    trace = shared_trace(CUDA / "alexnet_sync")
    ev, steps = trace.events, trace.steps
    span = int((ev["ts_ns"] + ev["dur_ns"]).max() - ev["ts_ns"].min()) + 1_000
    copies = [ev.assign(ts_ns=ev["ts_ns"] + k * span) for k in range(5)]
    return trace, dataclasses.replace(trace, events=pd.concat(copies, ignore_index=True), steps=pd.concat(
        [steps.assign(step=steps["step"] + 1000 * k, start_ns=steps["start_ns"] + k * span,
                      end_ns=steps["end_ns"] + k * span) for k in range(5)], ignore_index=True),
        meta=dataclasses.replace(trace.meta, path=""))


def test_a_trace_stitched_from_copies_of_one_gets_no_path_lane_and_says_why():
    # GIVEN a trace stitched from copies of one step
    trace, stitched = _stitched()
    assert len(critical_spans(trace))
    # THEN the lane is left out, saying why, rather than walking every copy from every step
    with pytest.warns(UserWarning, match="ids repeat from step to step"):
        assert critical_spans(stitched).empty


def test_the_widget_answers_a_view_under_the_index_lock(built):
    import threading
    import time

    from npumagic.render.live.widget import TimelineWidget

    trace, _ = built
    widget = TimelineWidget(TimelineIndex.build(trace, stored=False, critical_later=True))
    answered = widget.tiles["seq"]
    # GIVEN the index's lock held (lanes being swapped in), WHEN the browser asks a view
    with widget.index.lock:
        asking = threading.Thread(target=setattr, args=(widget, "view", dict(widget.view, seq=answered + 1)))
        asking.start()
        time.sleep(1)  # time for the answer to be made, were it not waiting (a pause, not a measure)
        # THEN it is answered only once the lock is given back
        assert widget.tiles["seq"] == answered
    asking.join(60)
    assert widget.tiles["seq"] == answered + 1


def test_what_the_widgets_own_thread_is_told_is_said_on_the_widget_not_in_the_cell_running(held, monkeypatch):
    import contextlib
    import io
    import logging
    import warnings

    from npumagic.render.live.frontend import timeline_widget

    _, stitched = _stitched()
    release, _ = held
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # a kernel whose logging nobody configured
    # GIVEN a widget whose critical path, walked on its own thread after the first view, cannot be
    # drawn (a stitched trace: the walk says why it leaves the lane out)
    widget = timeline_widget(stitched)
    assert widget.notes == []
    # WHEN the walk runs while another cell runs (its warnings and its stderr caught, as a cell's are)
    cell_err = io.StringIO()
    with warnings.catch_warnings(record=True) as cell_warnings, contextlib.redirect_stderr(cell_err):
        warnings.simplefilter("always")
        release.set()
        _join_after_first_view()
    # THEN the cell got nothing, no warning, no log line; the widget says it (shown under its legend)
    assert [str(w.message) for w in cell_warnings] == [] and cell_err.getvalue() == ""
    assert len(widget.notes) == 1 and "no critical path lane" in widget.notes[0]
    assert "ids repeat from step to step" in widget.notes[0]
    assert "critical" not in {ln["group"] for ln in widget.frame["lanes"]}


def test_a_walk_that_fails_on_the_widgets_thread_is_said_on_the_widget_and_logged(monkeypatch, caplog):
    import logging

    from npumagic.render.live import lod
    from npumagic.render.live.frontend import timeline_widget

    def broken(_trace):
        raise MemoryError("the walk ran out of memory")

    monkeypatch.setattr(lod, "critical_spans", broken)
    with caplog.at_level(logging.WARNING):
        widget = timeline_widget(shared_trace(CUDA / "ns_resolution"))
        _join_after_first_view()
    said = "timeline: the critical path's lane could not be built: MemoryError: the walk ran out of memory"
    assert widget.notes == [said] and said in caplog.messages
