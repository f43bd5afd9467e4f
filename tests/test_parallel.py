"""Many ranks on Dask: the parallel path gives exactly the serial Summary, on a local cluster of
processes and on an existing scheduler, from the CLI and from %npuload."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import npumagic
from npumagic.analysis import job as job_reader
from npumagic.cli import main
from npumagic.errors import NpumagicError, TraceError

from .conftest import ASCEND, nccl_job, need

def copy_job(target: Path, ranks: int, relabel: bool = True) -> Path:
    """A ``ranks``-rank job copied from the shared level1 ranks (rank i from rank i % 2); with
    ``relabel`` each copy's profiler_info carries its new rank id, else the ids repeat."""
    sources = [need(ASCEND / "level1" / f"rank{r}_ascend_pt") for r in (0, 1)]
    for rank in range(ranks):
        out = target / f"rank{rank}_ascend_pt"
        shutil.copytree(sources[rank % 2], out, ignore=shutil.ignore_patterns("*.png"))
        out.chmod(0o755)
        for info in out.glob("profiler_info*.json"):
            info.chmod(0o644)
            if relabel:
                data = json.loads(info.read_text())
                data["rank_id"] = rank
                info.write_text(json.dumps(data))
    return target


def _assert_same(a, b, where: str) -> None:
    if isinstance(a, pd.DataFrame) or isinstance(b, pd.DataFrame):
        assert isinstance(a, pd.DataFrame) and isinstance(b, pd.DataFrame), where
        pd.testing.assert_frame_equal(a, b, obj=where)
    elif dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):  # e.g. Summary.places' trees
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            _assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _assert_same(a[key], b[key], f"{where}[{key!r}]")
    else:
        assert a == b, where


def assert_same_summary(a: npumagic.Summary, b: npumagic.Summary) -> None:
    """Every field of the job's Summary and of each rank's, tables, meta and vendor tables alike
    (steps, kernels, ..., host, temporal, events, vendor, hardware, l2, frequency_drops)."""
    assert sorted(a.per_rank) == sorted(b.per_rank)
    for name in (f.name for f in dataclasses.fields(npumagic.Summary) if f.name != "per_rank"):
        _assert_same(getattr(a, name), getattr(b, name), f"job {name}")
    for rank in a.per_rank:
        x, y = a.per_rank[rank], b.per_rank[rank]
        for name in (f.name for f in dataclasses.fields(npumagic.Summary) if f.name != "per_rank"):
            _assert_same(getattr(x, name), getattr(y, name), f"rank {rank} {name}")


@pytest.fixture(scope="module")
def job4(tmp_path_factory):
    return copy_job(tmp_path_factory.mktemp("job") / "job4", 4)


@pytest.fixture(scope="module")
def scheduler():
    """An existing dask.distributed cluster of two worker processes: its scheduler's address."""
    import dask

    distributed = pytest.importorskip("distributed")
    job_reader.spawnable_main()
    with dask.config.set(job_reader.LOCAL_TIMEOUTS):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
    yield cluster.scheduler_address
    cluster.close()


@pytest.mark.slow  # starts a cluster of worker processes (~7 s)
def test_local_cluster_equals_serial_even_after_ipython_reset(shell, job4):
    # GIVEN four ranks and a shell after %reset (which leaves a __main__ without __spec__, read
    # when worker processes start) WHEN the ranks run on a local Dask cluster THEN the Summary is
    # the serial one
    shell.run_line_magic("reset", "-f")
    serial = npumagic.summarize(npumagic.load(job4), rank=2)
    on_dask = job_reader.analyze(job4, rank=2, scheduler="local")
    assert sorted(on_dask.per_rank) == [0, 1, 2, 3]
    assert on_dask.meta["rank"] == 2 and on_dask.meta["world_size"] == 4
    assert_same_summary(serial, on_dask)
    pd.testing.assert_frame_equal(serial.steps, on_dask.steps)


@pytest.mark.slow  # starts a cluster of worker processes
def test_existing_scheduler_equals_serial_with_unlabelled_ranks(tmp_path, scheduler):
    # ranks whose ids repeat are numbered in directory order, as the serial reader does
    job = copy_job(tmp_path / "job", 3, relabel=False)
    on_dask = job_reader.analyze(job, scheduler=scheduler)
    assert sorted(on_dask.per_rank) == [0, 1, 2]
    assert_same_summary(npumagic.summarize(npumagic.load(job)), on_dask)


@pytest.mark.slow
def test_a_broken_rank_is_left_out_with_the_readers_error_as_serially(tmp_path, scheduler):
    job = copy_job(tmp_path / "job", 3)
    broken = job / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    broken.chmod(0o644)
    broken.write_text('[{"ph": "X", "name": ')
    (broken.parent / "kernel_details.csv").unlink()  # nothing to read the rank from instead
    with pytest.warns(UserWarning, match=re.escape(str(broken))):
        on_dask = job_reader.analyze(job, scheduler=scheduler)
    assert sorted(on_dask.per_rank) == [0, 2]
    assert str(job / "rank1_ascend_pt") in on_dask.meta["unreadable"]
    with pytest.warns(UserWarning):
        assert_same_summary(npumagic.summarize(npumagic.load(job)), on_dask)


@pytest.mark.slow
def test_a_job_of_broken_ranks_raises_a_trace_error(tmp_path, scheduler):
    job = copy_job(tmp_path / "job", 2)
    for rank in (0, 1):
        (job / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT").chmod(0o755)
        for f in (job / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT").iterdir():
            f.chmod(0o644)
            f.unlink()
    with pytest.raises(TraceError, match="no rank could be read"), pytest.warns(UserWarning):
        job_reader.analyze(job, scheduler=scheduler)


def test_one_rank_never_starts_dask(monkeypatch):
    import distributed

    def refuse(*args, **kwargs):
        raise AssertionError("Dask started for one rank")

    monkeypatch.setattr(distributed, "Client", refuse)
    monkeypatch.setattr(distributed, "LocalCluster", refuse)
    rank = need(ASCEND / "level1" / "rank0_ascend_pt")
    assert not job_reader.reads_apart(rank, "local")
    assert job_reader.analyze(rank, scheduler="local").meta["rank"] == 0


def test_small_jobs_stay_serial_unless_asked(job4):
    assert not job_reader.reads_apart(job4)
    assert job_reader.reads_apart(job4, "local")
    assert not job_reader.reads_apart(job4, "serial")


@pytest.mark.parametrize("bad", ["somewhere", "tcp://no-port", "local cluster"])
def test_a_bad_scheduler_is_refused_before_reading(bad, tmp_path):
    with pytest.raises(NpumagicError, match="not a Dask scheduler address"):
        job_reader.analyze(tmp_path / "does-not-exist", scheduler=bad)


def test_an_unreachable_scheduler_is_one_clear_error(job4, monkeypatch):
    monkeypatch.setattr(job_reader, "CONNECT_TIMEOUT_S", 1)
    with pytest.raises(NpumagicError, match="cannot reach the Dask scheduler tcp://127.0.0.1:9"):
        job_reader.analyze(job4, scheduler="tcp://127.0.0.1:9")


@pytest.mark.slow
def test_cli_analyze_sends_ranks_to_the_scheduler(job4, scheduler, capsys):
    assert main(["analyze", str(job4), "--scheduler", scheduler, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in payload["ranks"]] == [0, 1, 2, 3]
    assert payload["meta"]["world_size"] == 4


def test_cli_refuses_a_bad_scheduler(job4, capsys):
    assert main(["analyze", str(job4), "--scheduler", "nowhere"]) == 2
    assert "not a Dask scheduler address" in capsys.readouterr().err


@pytest.mark.slow
def test_npuload_uses_the_configured_scheduler(shell, job4, scheduler):
    shell.run_line_magic("config", f"NpuMagics.scheduler = {scheduler!r}")
    try:
        report = shell.run_line_magic("npuload", f"{job4} --name job4 --no-plot")
    finally:
        shell.run_line_magic("config", "NpuMagics.scheduler = ''")  # the shell's config outlives the test
    assert sorted(report.summary.per_rank) == [0, 1, 2, 3]
    assert_same_summary(npumagic.summarize(npumagic.load(job4)), report.summary)
    magics = shell.magics_manager.registry["NpuMagics"]
    assert magics.session.runs.summary("job4") is report.summary


def test_a_bad_configured_scheduler_is_refused(shell):
    from traitlets import TraitError

    magics = shell.magics_manager.registry["NpuMagics"]
    before = magics.scheduler
    with pytest.raises(TraitError, match="not a Dask scheduler address"):
        magics.scheduler = "nowhere"
    assert magics.scheduler == before


@pytest.mark.slow
def test_host_samples_go_to_the_lowest_rank_as_serially(tmp_path, scheduler):
    # GIVEN a job folder holding npumagic's host samples (a capture's run directory) and ranks
    # whose ids repeat WHEN it runs on Dask THEN the lowest rank carries them, as serially
    job = copy_job(tmp_path / "job", 3, relabel=False)
    steps = npumagic.load(job / "rank0_ascend_pt").steps
    ts = np.arange(int(steps["start_ns"].min()), int(steps["end_ns"].max()), 1_000_000, dtype=np.int64)
    pd.concat([pd.DataFrame({"ts_ns": ts, "name": "Process/CPU", "value": 50.0}),
               pd.DataFrame({"ts_ns": ts, "name": "Process/RSS", "value": 2.0**30})]).to_csv(
        job / "npumagic_host.csv", index=False)
    serial = npumagic.summarize(npumagic.load(job))
    assert len(serial.per_rank[0].host) and serial.per_rank[0].host["process_cpu_pct"].notna().any()
    assert serial.per_rank[1].host.empty
    assert_same_summary(serial, job_reader.analyze(job, scheduler=scheduler))


@pytest.mark.slow
def test_a_jobs_ranks_replayed_together_on_dask_as_serially(tmp_path, scheduler):
    # GIVEN a 2-rank NCCL job of three steps each WHEN its ranks are summarised on Dask's workers
    # THEN the bounds made from them together (their events sent back) are the serial ones
    job = nccl_job(tmp_path / "nccl")
    serial = job_reader.analyze(job, scheduler="serial")
    assert {b["ranks"] for b in serial.path_bounds.values()} == {2}
    assert_same_summary(serial, job_reader.analyze(job, scheduler=scheduler))
