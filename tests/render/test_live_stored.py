"""The live timeline fast from the first view: the first view is answered from each lane's coarse
pass (no pyramid built), which holds per bin the dominant operator and the busy time the events
themselves give; a lane's pyramid is built when a zoom needs it; the index is stored beside a
real run and read back on reopening with the same answers; a changed source is not trusted; a
read-only folder still shows the timeline (no store, said once)."""

from __future__ import annotations

import dataclasses
import os
import stat

import numpy as np
import pandas as pd
import pytest

from npumagic.analysis import schema
from npumagic.render.live import lane_index, lod, shelf
from npumagic.render.live.lod import TimelineIndex


def _crowded(n: int = 3_000, seed: int = 0) -> schema.Trace:
    """A device stream of ``n`` kernels of 7 names (a few long enough to cross bins) and a host
    thread of nested ops, over one step."""
    rng = np.random.default_rng(seed)
    ts = np.cumsum(rng.integers(50, 400, n))
    dur = np.where(rng.random(n) < 0.02, rng.integers(2_000, 20_000, n), rng.integers(20, 300, n))
    host = ts[::5]
    events = pd.DataFrame({
        "name": np.concatenate([np.array(list("abcdefg"))[rng.integers(0, 7, n)], np.repeat(["outer", "inner"], host.size)]),
        "kind": np.repeat(["kernel", "host_op"], [n, 2 * host.size]),
        "ts_ns": np.concatenate([ts, host, host + 10]), "dur_ns": np.concatenate([dur, np.full(host.size, 900), np.full(host.size, 400)]),
        "lane": np.repeat(["GPU 0/Stream 7", "Python/Thread 1"], [n, 2 * host.size]),
        "stream": np.repeat([7, -1], [n, 2 * host.size]), "device": np.repeat([0, -1], [n, 2 * host.size]), "rank": 0})
    end = int((events["ts_ns"] + events["dur_ns"]).max())
    return schema.finish(events, pd.DataFrame({"rank": [0], "step": [1], "start_ns": [0], "end_ns": [end]}))


def _brute_bins(lane, lo: float, bin_ns: float, bins: int):
    """Per bin: the union of the lane's spans in it and each code's summed time in it, from the events."""
    union, per = np.zeros(bins), np.zeros((bins, int(lane.codes.max()) + 1))
    edges = lo + np.arange(bins + 1) * bin_ns
    for b in range(bins):
        a, z = edges[b], edges[b + 1]
        piece = np.clip(np.minimum(lane.ends, z) - np.maximum(lane.starts, a), 0, None)
        np.add.at(per[b], lane.codes, piece)
        us, ue = lane.union.starts, lane.union.ends
        union[b] = np.clip(np.minimum(ue, z) - np.maximum(us, a), 0, None).sum()
    return union, per


def test_the_first_view_comes_from_the_coarse_pass_which_holds_what_the_events_give(monkeypatch):
    # GIVEN lanes over the exact limit (lowered to 500 events), so no view of them reads the events one by one
    monkeypatch.setattr(lane_index, "EXACT_LIMIT", 500)
    monkeypatch.setattr(lane_index, "OVERVIEW_BINS", 128)
    index = TimelineIndex.build(_crowded())
    big = [ln for ln in index.lanes if ln.starts.size > 500]
    assert len(big) == 2
    # WHEN the whole run is shown
    lo, hi = index.layout()["extent"]
    answer = lod_columns(index, lo, hi, 32)  # columns of two bins or more
    # THEN no pyramid was built: the answer came from the coarse pass
    assert all(ln._levels is None for ln in index.lanes)
    # AND each bin of the coarse pass holds the lane's busy time and its dominant name as the events give them
    for lane in big:
        ov = lane.overview
        union, per = _brute_bins(lane, ov.lo, ov.bin_ns, len(ov.codes))
        np.testing.assert_allclose(ov.weights, union, atol=1e-6)
        has = per.max(axis=1) > 0
        assert (ov.codes[~has] == -1).all()
        np.testing.assert_allclose(per[has, ov.codes[has]], per[has].max(axis=1), rtol=1e-9)
    # AND each column's busy share is the union of the spans in it, as from the fully built index
    fresh = TimelineIndex.build(_crowded())
    for ln in fresh.lanes:
        assert ln.levels is not None  # the pyramid built first
    expected = lod_columns(fresh, lo, hi, 32)
    for part, same in zip(answer["lanes"], expected["lanes"]):
        np.testing.assert_allclose(part["busy"], same["busy"], atol=1e-4)


def test_a_zoom_builds_the_pyramid_of_the_lanes_it_needs_only(monkeypatch):
    monkeypatch.setattr(lane_index, "EXACT_LIMIT", 500)
    monkeypatch.setattr(lane_index, "OVERVIEW_BINS", 128)
    index = TimelineIndex.build(_crowded())
    lo, hi = index.layout()["extent"]
    device = next(k for k, ln in enumerate(index.lanes) if ln.group == "device")
    # WHEN a view narrower than the coarse pass's bins, over more events than the exact limit, is asked for one lane
    lod_columns(index, lo, lo + (hi - lo) / 4, 400, lanes=[device])
    # THEN that lane's pyramid exists, the others' not yet
    assert [ln._levels is not None for ln in index.lanes] == [k == device for k in range(len(index.lanes))]


def lod_columns(index, t0_ms, t1_ms, width, lanes=None):
    """A query forced into columns for every lane (no lane sends its events)."""
    old = lod.EVENTS_MAX_PER_LANE
    lod.EVENTS_MAX_PER_LANE = -1
    try:
        return index.query(t0_ms, t1_ms, width, lanes)
    finally:
        lod.EVENTS_MAX_PER_LANE = old


LOOP = """%%npuprofile --wait 0 --warmup 1 --steps 2 --no-plot --name stored
for _ in range(3):
    train_step()
"""


@pytest.fixture
def recorded(trainer, monkeypatch):
    """A real CPU run's trace (its profiler output in a temporary folder), the store on."""
    result = trainer.run_cell(LOOP)
    assert result.success, result.error_in_exec
    monkeypatch.setenv("NPUMAGIC_STORE", "1")
    monkeypatch.setattr(shelf, "MIN_EVENTS", 0)  # a small run's index is stored as a large one's
    return trainer.magics_manager.registry["NpuMagics"].session.runs.trace("stored")


def _views(index) -> list[tuple[float, float, int]]:
    lo, hi = index.layout()["extent"]
    mid = (lo + hi) / 2
    return [(lo, hi, 900), (lo, hi, 50), (mid - (hi - lo) / 40, mid, 700), (mid, mid + (hi - lo) / 3000, 300)]


def test_a_reopened_run_answers_from_its_stored_index_as_the_fresh_one(recorded, monkeypatch):
    monkeypatch.setattr(lane_index, "EXACT_LIMIT", 50)  # pyramids and coarse passes even on a small run
    fresh = TimelineIndex.build(recorded)
    assert fresh.keep()
    folder = fresh.shelf.folder
    assert (folder / "manifest.json").is_file() and folder.parent.name.endswith("npumagic_store")
    # WHEN the run is opened again (a kernel restart: a new index of the same trace)
    again = TimelineIndex.build(recorded)
    # THEN its lanes are the stored ones, memory-mapped, and every view is answered as the fresh index answers it
    assert all(isinstance(ln.starts, np.memmap) for ln in again.lanes)
    for view in _views(fresh):
        assert again.query(*view) == fresh.query(*view)
    assert again.layout() == fresh.layout()
    assert again.details(int(again.lanes[0].rows[0])) == fresh.details(int(fresh.lanes[0].rows[0]))
    # AND a pyramid built on the reopened index is stored, and read back by the next one
    big = max(range(len(again.lanes)), key=lambda k: again.lanes[k].starts.size)
    assert again.lanes[big].levels
    third = TimelineIndex.build(recorded)
    assert all(isinstance(lv.codes, np.memmap) for lv in third.lanes[big].levels)
    for view in _views(fresh):
        assert third.query(*view) == fresh.query(*view)


def test_a_changed_source_is_not_trusted(recorded, capsys):
    TimelineIndex.build(recorded).keep()
    # WHEN a source file of the run changes (its size and mtime)
    source = next(p for p in map(__import__("pathlib").Path, recorded.meta.files) if p.is_file())
    with open(source, "a") as fh:
        fh.write(" ")
    capsys.readouterr()
    index = TimelineIndex.build(recorded)
    # THEN the index is built again from the trace, not read from the store, and that is said
    assert not any(isinstance(ln.starts, np.memmap) for ln in index.lanes)
    assert "is not used" in capsys.readouterr().err
    assert index.keep() and all(isinstance(ln.starts, np.memmap) for ln in TimelineIndex.build(recorded).lanes)


def test_a_read_only_folder_still_shows_the_timeline_and_says_once_why_nothing_is_stored(recorded, capsys):
    folder = __import__("pathlib").Path(recorded.meta.path)
    folder = folder if folder.is_dir() else folder.parent
    mode = folder.stat().st_mode
    os.chmod(folder, mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        capsys.readouterr()
        first = TimelineIndex.build(recorded)
        assert not first.keep()
        second = TimelineIndex.build(recorded)
        assert not second.keep()
        err = capsys.readouterr().err
        # THEN both answer, and the reason is said once
        assert err.count("no store of the timeline's index") == 1 and "read-only" in err
        assert second.query(*_views(second)[0]) == first.query(*_views(first)[0])
        assert not list(folder.glob("*npumagic_store"))
    finally:
        os.chmod(folder, mode)


def test_a_small_runs_index_is_not_stored(trainer, monkeypatch):
    assert trainer.run_cell(LOOP).success
    monkeypatch.setenv("NPUMAGIC_STORE", "1")
    trace = trainer.magics_manager.registry["NpuMagics"].session.runs.trace("stored")
    assert len(trace.events) < shelf.MIN_EVENTS and lod.TimelineIndex.build(trace).shelf is None


def test_a_trace_without_a_path_is_never_stored():
    trace = _crowded(200)
    assert not trace.meta.path and TimelineIndex.build(trace).shelf is None
    assert TimelineIndex.build(dataclasses.replace(trace)).keep() is False


def test_the_widget_stores_its_index_once_the_first_view_is_answered(recorded):
    import threading

    from npumagic.render.live.frontend import AFTER_FIRST_VIEW, timeline_widget

    # GIVEN a widget over a run never opened
    first = timeline_widget(recorded)
    assert first.tiles["lanes"]  # its first view answered
    for thread in threading.enumerate():
        if thread.name == AFTER_FIRST_VIEW:  # the thread that stores it
            thread.join(60)
    # WHEN the run is shown again THEN its index is read from the store
    again = timeline_widget(recorded)
    assert all(isinstance(ln.starts, np.memmap) for ln in again.index.lanes)
    assert again.tiles["lanes"] == first.tiles["lanes"]


def test_a_reopened_gpu_run_reads_its_critical_path_with_its_lanes(tmp_path, monkeypatch):
    import shutil

    import npumagic
    from ..conftest import CUDA, need

    # GIVEN a genuine GPU trace of its own folder, its index built (the critical path drawn) and stored
    source = next(need(CUDA / "ns_resolution").glob("*.json.gz"))
    path = tmp_path / source.name
    shutil.copy(source, path)
    monkeypatch.setenv("NPUMAGIC_STORE", "1")
    monkeypatch.setattr(shelf, "MIN_EVENTS", 0)
    trace = npumagic.load(path)
    fresh = TimelineIndex.build(trace)
    assert any(ln.group == "critical" for ln in fresh.lanes) and fresh.keep()
    # WHEN it is opened again THEN the path comes from the store, not from walking every step again
    def walked(_trace):
        raise AssertionError("the critical path was computed again on reopening")

    monkeypatch.setattr(lod, "critical_spans", walked)
    again = TimelineIndex.build(trace)
    assert again.in_store and again.layout() == fresh.layout()
    for view in _views(fresh):
        assert again.query(*view) == fresh.query(*view)
    lane = next(k for k, ln in enumerate(fresh.lanes) if ln.group == "critical")
    row = int(fresh.lanes[lane].rows[len(fresh.lanes[lane].rows) // 2])
    assert again.details(row) == fresh.details(row)


@pytest.fixture()
def gpu_run(tmp_path, monkeypatch):
    """A genuine GPU trace in a folder of its own, its store on (whatever its size)."""
    import shutil

    import npumagic
    from ..conftest import CUDA, need

    source = next(need(CUDA / "ns_resolution").glob("*.json.gz"))
    shutil.copy(source, tmp_path / source.name)
    monkeypatch.setenv("NPUMAGIC_STORE", "1")
    monkeypatch.setattr(shelf, "MIN_EVENTS", 0)
    return npumagic.load(tmp_path / source.name)


def _not_walked(monkeypatch):
    def walked(_trace):
        raise AssertionError("the critical path was computed again on reopening")

    monkeypatch.setattr(lod, "critical_spans", walked)


def test_the_widget_stores_the_path_it_built_after_the_first_view(gpu_run, monkeypatch):
    import threading

    from npumagic.render.live.frontend import AFTER_FIRST_VIEW, timeline_widget

    # GIVEN a widget over a GPU run never opened: its first view without the path, the path after
    first = timeline_widget(gpu_run)
    for thread in threading.enumerate():
        if thread.name == AFTER_FIRST_VIEW:
            thread.join(120)
    assert first.frame["lanes"][-1]["group"] == "critical" and first.index.in_store
    # WHEN the run is shown again THEN the path's lanes are read from the store with the others,
    # in the first view (no walk)
    _not_walked(monkeypatch)
    again = timeline_widget(gpu_run)
    assert again.index.in_store and again.frame["lanes"] == first.frame["lanes"]
    assert again.tiles["lanes"] == first.index.query(*first.frame["extent"], again.view["width"])["lanes"]


def test_an_index_stored_before_its_path_was_built_gets_it_on_reopening(gpu_run, monkeypatch):
    # GIVEN an index stored before its critical path was added (keep() called first)
    early = TimelineIndex.build(gpu_run, critical_later=True)
    assert early.critical is None and early.keep()
    # WHEN it is reopened THEN the path is built (the store said none was), and the index stored again with it
    again = TimelineIndex.build(gpu_run)
    assert any(ln.group == "critical" for ln in again.lanes) and not again.in_store and again.keep()
    _not_walked(monkeypatch)
    third = TimelineIndex.build(gpu_run, critical_later=True)
    assert third.in_store and third.layout() == again.layout()
    assert third.critical.equals(again.critical.astype(third.critical.dtypes.to_dict()))


def test_a_reopened_runs_first_view_makes_neither_its_events_nor_its_launches_which_come_as_the_fresh_ones(
        gpu_run, monkeypatch):
    from npumagic.render.live.legend import legend
    from npumagic.render.live.launches import launches

    # GIVEN a GPU run's index stored with its critical path (spans of their own after the events)
    fresh = TimelineIndex.build(gpu_run)
    assert len(fresh.launches) and fresh.nested_from < len(fresh.events) and fresh.keep()

    # WHEN it is reopened and its first view answered, with the events' frame and the launches unmakeable
    def unmade(*_args):
        raise AssertionError("made before the first view was answered")

    with monkeypatch.context() as m:
        m.setattr(lod, "_drawn", unmade)
        m.setattr(lod, "launches", unmade)
        again = TimelineIndex.build(gpu_run, critical_later=True)
        assert again.in_store and again.layout() == fresh.layout() and legend(again) == legend(fresh)
        assert again.query(*fresh.layout()["extent"], 900) == fresh.query(*fresh.layout()["extent"], 900)
    # THEN read later they are the fresh index's, and the trace's events are let go once the launches are made
    pd.testing.assert_frame_equal(again.events, fresh.events)
    pd.testing.assert_frame_equal(again.launches, launches(gpu_run.events, fresh.origin))
    assert again.launch_events is None
    assert again.names.tolist() == fresh.names.tolist() and again.name_kinds.tolist() == fresh.name_kinds.tolist()


def test_a_store_of_the_format_before_is_built_again_and_written_anew(gpu_run, capsys):
    import json

    # GIVEN a store as format 3 wrote it (no names, kinds or kinds drawn; its count of events as this one's)
    fresh = TimelineIndex.build(gpu_run)
    assert fresh.keep()
    folder = fresh.shelf.folder
    doc = json.loads((folder / "manifest.json").read_text())
    for key in ("kinds", "drawn_kinds"):
        del doc[key]
    doc["timeline"] = 3
    (folder / "manifest.json").write_text(json.dumps(doc))
    for name in ("names.npy", "name_kinds.npy"):
        (folder / name).unlink()
    capsys.readouterr()
    # WHEN the run is reopened THEN the index is built again (said once), answers as the fresh one
    again = TimelineIndex.build(gpu_run, critical_later=True)
    assert not again.in_store and "written for another index" in capsys.readouterr().err
    assert again.layout()["lanes"] == [ln for ln in fresh.layout()["lanes"] if ln["group"] != "critical"]
    # AND once kept with its path, the next reopening reads it
    assert again.add_critical_path(gpu_run) and again.keep()
    third = TimelineIndex.build(gpu_run, critical_later=True)
    assert third.in_store and third.layout() == fresh.layout() and third.names.tolist() == fresh.names.tolist()
