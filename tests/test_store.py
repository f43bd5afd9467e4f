"""The store of every analysed job's tables (npumagic.analysis.store): on real shared profiler
output, copied where it may be written."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import warnings

import pytest
from pandas.testing import assert_frame_equal

from npumagic.analysis import job, sources, store

from .conftest import ASCEND, CUDA, nccl_job, need

LEVEL1 = ASCEND / "level1"  # a 2-rank torch_npu job
KINETO = CUDA / "alexnet_sync"  # a real Kineto trace
STEPS = CUDA / "nccl"  # a real Kineto trace of three steps on a device (its fixes' bounds replay two)


@pytest.fixture(autouse=True)
def store_on(monkeypatch):
    monkeypatch.setenv("NPUMAGIC_STORE", "1")
    monkeypatch.setattr(store, "WORTH_S", 0.0)  # the shared samples parse quicker than a store is worth
    store._said.clear()


def writable_copy(source, target):
    """``source`` (read-only shared data) as a folder this user may write in: copies, never hard
    links (a test that changes a file's mtime would change the shared file's)."""
    shutil.copytree(need(source), target)
    for folder, _, _ in os.walk(target):
        os.chmod(folder, os.stat(folder).st_mode | stat.S_IWUSR)
    return target


def analyze(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return job.analyze(path, scheduler="serial", every_rank=True, **kw)


def same(a, b, where="job"):
    """Every table, the meta and the vendor tables of Summaries ``a`` and ``b`` are equal."""
    mine, theirs = store._tables(a), store._tables(b)
    assert set(mine) == set(theirs), where
    for name, frame in mine.items():
        assert_frame_equal(frame, theirs[name], obj=f"{where}.{name}")
    assert a.meta == b.meta, where
    # what was made from the events, which a store has not: the findings' places, the fixes' bounds
    assert (a.placed, a.path_bounds) == (b.placed, b.path_bounds), where
    assert set(a.vendor) == set(b.vendor), where
    for name, frame in a.vendor.items():
        assert_frame_equal(frame, b.vendor[name], obj=f"{where}.vendor.{name}")
    assert sorted(a.per_rank) == sorted(b.per_rank)


@pytest.mark.parametrize("source", [LEVEL1, KINETO, STEPS], ids=["ascend-level1", "kineto", "kineto-steps"])
def test_the_store_gives_back_the_parsed_summary_and_a_second_read_parses_nothing(source, tmp_path, monkeypatch,
                                                                                   capsys):
    path = writable_copy(source, tmp_path / "job")
    parsed = analyze(path)
    assert (store.location(path) / store.MANIFEST).is_file()
    assert "not parsed" not in capsys.readouterr().err
    calls = []
    monkeypatch.setattr(sources, "load", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(job, "summarize_group", lambda *a, **k: calls.append(a))
    again = analyze(path)
    assert calls == []
    assert "read from its store" in capsys.readouterr().err
    same(parsed, again)
    for rank in parsed.per_rank:
        same(parsed.per_rank[rank], again.per_rank[rank], f"rank {rank}")
    assert again.places is not None or parsed.places is None  # the findings' places come back too
    if len(parsed.per_rank) > 1:  # another rank of a job read in full: from the store as well
        monkeypatch.undo()
        other = analyze(path, rank=1)
        assert other.meta["rank"] == 1 and calls == []


def test_a_changed_source_file_invalidates_the_store(tmp_path, capsys):
    path = writable_copy(LEVEL1, tmp_path / "job")
    analyze(path)
    step_trace = path / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    os.utime(step_trace, ns=(step_trace.stat().st_atime_ns, step_trace.stat().st_mtime_ns + 10**9))
    capsys.readouterr()
    analyze(path)
    err = capsys.readouterr().err
    assert "step_trace_time.csv changed since" in err and "read from its store" not in err
    analyze(path)  # the rewritten store, trusted again
    assert "read from its store" in capsys.readouterr().err


def test_a_store_of_another_version_is_not_trusted(tmp_path, capsys, monkeypatch):
    path = writable_copy(KINETO, tmp_path / "job")
    analyze(path)
    manifest = store.location(path) / store.MANIFEST
    manifest.write_text(json.dumps(dict(json.loads(manifest.read_text()), npumagic="0.0.0")))
    calls = []
    real = sources.load
    monkeypatch.setattr(sources, "load", lambda *a, **k: calls.append(a) or real(*a, **k))
    analyze(path)
    assert calls and "written by npumagic 0.0.0" in capsys.readouterr().err


def test_a_read_only_folder_gets_no_store_and_no_error(tmp_path, capsys):
    path = writable_copy(KINETO, tmp_path / "job")
    os.chmod(path, stat.S_IRUSR | stat.S_IXUSR)
    try:
        first, second = analyze(path), analyze(path)
    finally:
        os.chmod(path, stat.S_IRWXU)
    assert not store.location(path).exists()
    err = capsys.readouterr().err
    assert err.count("no store of the tables analysed here") == 1 and "read-only" in err
    same(first, second)


def test_a_quick_analysis_is_not_stored(tmp_path, monkeypatch):
    # the default: parsing a small trace again costs less than writing its store
    monkeypatch.setattr(store, "WORTH_S", 3600.0)
    path = writable_copy(LEVEL1, tmp_path / "job")
    analyze(path)
    assert not store.location(path).exists()


@pytest.mark.parametrize("collecting", [True, False])
def test_reading_a_store_leaves_the_garbage_collector_as_it_found_it(tmp_path, collecting):
    # GIVEN a stored job WHEN it is read again (the collector paused meanwhile: the read makes many
    # objects and frees none) THEN the collector is on again, or still off where the caller had it off
    import gc

    path = writable_copy(LEVEL1, tmp_path / "job")
    analyze(path)
    try:
        gc.enable() if collecting else gc.disable()
        again = analyze(path)
        assert gc.isenabled() is collecting and len(again.per_rank) == 2
    finally:
        gc.enable()


def test_a_jobs_bounds_made_from_its_ranks_together_come_back_from_its_store(tmp_path, monkeypatch, capsys):
    # GIVEN a 2-rank NCCL job: the genuine rank 0 and a copy of it as rank 1
    path = nccl_job(tmp_path / "job")
    parsed = analyze(path)
    assert sorted(parsed.per_rank) == [0, 1]
    assert {b["ranks"] for b in parsed.path_bounds.values()} == {2}  # replayed together, not rank 0's own
    calls = []
    monkeypatch.setattr(sources, "load", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(job, "summarize_group", lambda *a, **k: calls.append(a))
    # WHEN it is read again, of rank 0 and of rank 1, from its store (no events there to replay)
    again, other = analyze(path), analyze(path, rank=1)
    assert calls == [] and "read from its store" in capsys.readouterr().err
    # THEN both keep the job's bounds
    assert again.path_bounds == parsed.path_bounds == other.path_bounds
