"""Partial torch_npu text exports: each rank is read from what it holds, says what it lacks, and
one unreadable rank does not stop the others. Built by copying a shared rank and deleting files."""

from __future__ import annotations

import re
import shutil
import warnings

import pytest

import npumagic
from npumagic.errors import TraceError

from ..conftest import ASCEND, need, sampled

OUT = "ASCEND_PROFILER_OUTPUT"


def _copy(tmp_path, level="level1", ranks=(0, 1)):
    job = tmp_path / level
    for r in ranks:
        src = need(ASCEND / level / f"rank{r}_ascend_pt")
        dst = job / src.name
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.png"))
        for p in [dst, *dst.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
    return job


def _quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


@pytest.mark.parametrize("level", sampled(["level1", "level0", "level2"]))
def test_without_trace_view_the_breakdown_matches_the_full_rank(tmp_path, level):
    job = _copy(tmp_path, level)
    for rank in job.iterdir():
        (rank / OUT / "trace_view.json").unlink()
    full = _quiet(npumagic.analyze, ASCEND / level)
    partial = _quiet(npumagic.analyze, job)
    for r in (0, 1):
        ours, theirs = partial.per_rank[r].steps.iloc[0], full.per_rank[r].steps.iloc[0]
        for column in ("computing_us", "communication_us", "comm_not_overlapped_us", "free_us"):
            assert ours[column] == pytest.approx(theirs[column], rel=0.01), (r, column)


@pytest.mark.parametrize("trace_view", [False, True], ids=["kernel_details-only", "with-trace_view"])
def test_accelerator_core_communication_is_a_collective_not_computing(tmp_path, trace_view):
    # GIVEN a rank whose kernel_details.csv calls its collectives' Accelerator Core COMMUNICATION,
    # as newer CANN writes it (msprof-analyze's CoreType.HCCL), and the same rank calling them HCCL
    job = _copy(tmp_path, ranks=(0,))
    rank = job / "rank0_ascend_pt"
    if not trace_view:
        (rank / OUT / "trace_view.json").unlink()
    before = _quiet(npumagic.analyze, rank).steps
    details = rank / OUT / "kernel_details.csv"
    text = details.read_text()
    assert text.count(",HCCL,") == 4
    details.write_text(text.replace(",HCCL,", ",COMMUNICATION,"))
    # WHEN it is read; THEN the 4 allReduce tasks are communication, not computing
    after = _quiet(npumagic.analyze, rank).steps
    for column in ("computing_us", "communication_us", "comm_not_overlapped_us", "free_us"):
        assert after[column].tolist() == pytest.approx(before[column].tolist()), column


def test_a_truncated_trace_view_is_read_as_without_it_and_said(tmp_path):
    # GIVEN trace_view.json cut at 100 kB (a full disk), kernel_details.csv whole
    job = _copy(tmp_path, ranks=(0,))
    path = job / "rank0_ascend_pt" / OUT / "trace_view.json"
    path.write_bytes(path.read_bytes()[:100_000])
    # THEN the rank is read from kernel_details.csv, with its breakdown, and the note says why
    with pytest.warns(UserWarning, match=r"rank 0: trace_view\.json unreadable \(.*truncated.*\), so read with no"):
        summary = npumagic.analyze(job / "rank0_ascend_pt")
    full = _quiet(npumagic.analyze, ASCEND / "level1" / "rank0_ascend_pt")
    for column in ("computing_us", "comm_not_overlapped_us"):
        assert summary.steps.iloc[0][column] == pytest.approx(full.steps.iloc[0][column], rel=0.01), column
    assert summary.meta["sources"]["breakdown"].startswith("kernel_details.csv")


def test_a_partial_rank_says_what_is_missing_and_where_figures_come_from(tmp_path):
    job = _copy(tmp_path, ranks=(0,))
    (job / "rank0_ascend_pt" / OUT / "trace_view.json").unlink()
    with pytest.warns(UserWarning, match=r"rank 0: no trace_view\.json: .*no host lanes"):
        summary = npumagic.analyze(job / "rank0_ascend_pt")
    assert summary.meta["note"].startswith("no trace_view.json")
    assert summary.meta["sources"]["breakdown"].startswith("kernel_details.csv")
    assert set(summary.host_ops["name"]) == set()  # no host view without the host lanes
    assert summary.comm.loc[0, "op"] == "allReduce"  # collectives still from communication.json


def test_step_trace_time_alone_gives_the_vendors_breakdown_marked_as_such(tmp_path):
    job = _copy(tmp_path, ranks=(0,))
    out = job / "rank0_ascend_pt" / OUT
    for p in out.iterdir():
        if p.name != "step_trace_time.csv":
            p.unlink()
    with pytest.warns(UserWarning, match="only step_trace_time.csv"):
        summary = npumagic.analyze(job / "rank0_ascend_pt")
    step = summary.steps.iloc[0]
    assert step["computing_us"] == pytest.approx(8873.756)
    assert step["comm_not_overlapped_us"] == pytest.approx(101963.203)
    assert step["free_us"] == pytest.approx(25744.05)
    assert summary.meta["sources"]["breakdown"] == "step_trace_time.csv (vendor)"
    assert npumagic.checklist(summary).bottleneck == "communication"


def test_a_step_only_rank_beside_a_full_rank_is_one_job(tmp_path):
    # GIVEN rank 0 with only step_trace_time.csv and rank 1 whole
    job = _copy(tmp_path)
    for p in (job / "rank0_ascend_pt" / OUT).iterdir():
        if p.name != "step_trace_time.csv":
            p.unlink()
    # WHEN the job is read THEN both ranks are there, rank 1's events keep their steps
    summary = _quiet(npumagic.analyze, job)
    assert sorted(summary.per_rank) == [0, 1]
    assert summary.per_rank[0].steps.iloc[0]["computing_us"] == pytest.approx(8873.756)
    full = _quiet(npumagic.analyze, ASCEND / "level1")
    assert summary.per_rank[1].steps.iloc[0]["computing_us"] == pytest.approx(
        full.per_rank[1].steps.iloc[0]["computing_us"])


def test_one_unreadable_rank_is_named_and_the_others_are_analysed(tmp_path):
    job = _copy(tmp_path)
    broken = job / "rank1_ascend_pt" / OUT
    for p in broken.iterdir():
        if p.name not in ("operator_details.csv", "l2_cache.csv"):
            p.unlink()
    with pytest.warns(UserWarning, match=r"rank1_ascend_pt/ASCEND_PROFILER_OUTPUT: nothing npumagic can read "
                                         r"\(it holds l2_cache\.csv, operator_details\.csv\)"):
        summary = npumagic.analyze(job)
    assert list(summary.ranks["rank"]) == [0]
    assert str(job / "rank1_ascend_pt") in summary.meta["unreadable"]


def test_when_no_rank_is_readable_the_error_names_them(tmp_path):
    job = _copy(tmp_path)
    for rank in job.iterdir():
        for p in (rank / OUT).iterdir():
            p.unlink()
    with pytest.raises(TraceError, match=r"no rank could be read: .*rank0_ascend_pt.*it is empty.*rank1_ascend_pt"):
        _quiet(npumagic.load, job)


def test_a_text_export_beside_analysis_db_is_read_as_text(tmp_path):
    # text exports write analysis.db too: it must not be taken for the db export
    job = _copy(tmp_path, ranks=(0,))
    (job / "rank0_ascend_pt" / OUT / "analysis.db").write_bytes(b"")
    summary = _quiet(npumagic.analyze, job / "rank0_ascend_pt")
    assert summary.meta["sources"]["timeline"] == "trace_view.json"


def test_a_partial_export_whose_files_disagree_says_so_and_uses_step_trace_time():
    # GIVEN a job whose kernel_details.csv was trimmed to 21 rows while step_trace_time.csv is whole
    job = need(ASCEND / "partial" / "job2")
    # WHEN it is analysed; THEN each rank says its files disagree, by how much, and which is used
    with pytest.warns(UserWarning) as said:
        summary = npumagic.analyze(job)
    lines = [str(w.message) for w in said]
    assert any(re.search(r"rank 1: step_trace_time\.csv and the figures computed from its tasks disagree by more "
                         r"than 1% of the step \(step 2 Stage: 16\.42 ms from the tasks, 294\.59 ms in "
                         r"step_trace_time\.csv.*\); step_trace_time\.csv's figures are used", line) for line in lines)
    assert any(line.startswith("rank 0: step_trace_time.csv and the figures computed") for line in lines)
    # and the step breakdown is the vendor's (rank 1's stage read 16.42 ms), so no slow rank follows
    for rank, stage in ((0, 291_698.0), (1, 294_586.5)):
        steps = summary.per_rank[rank].steps
        assert steps["stage_us"].tolist() == [stage]
        assert summary.per_rank[rank].meta["sources"]["breakdown"].startswith("step_trace_time.csv")
    assert not [f for f in npumagic.advise(summary).findings if f.rule == "cluster"]


# -- captures torch_npu never parsed: only the raw PROF_* data ------------------------------------
def _raw_rank(parent, name="node7_123_20240929_ascend_pt"):
    rank = parent / name
    (rank / "PROF_000001_20240929162113526_ABCDEFGHIJ" / "device_0" / "data").mkdir(parents=True)
    (rank / "FRAMEWORK").mkdir()
    (rank / "profiler_info_0.json").write_text('{"rank_id": 0}')
    return rank


def test_a_capture_never_parsed_says_exactly_which_command_parses_it(tmp_path):
    # GIVEN a job folder whose one rank holds only torch_npu's raw data (its export failed)
    _raw_rank(tmp_path)
    # THEN the error names it and gives torch_npu's offline analysis of the folder, to run where it imports
    command = f"python -c \"from torch_npu.profiler.profiler import analyse; analyse('{tmp_path}')\""
    with pytest.raises(TraceError, match=re.escape("node7_123_20240929_ascend_pt holds only torch_npu's raw data "
                                                   "(PROF_*), never parsed") + r".*" + re.escape(command)):
        npumagic.load(tmp_path)


def test_a_never_parsed_rank_beside_parsed_ones_is_said_with_the_command(tmp_path):
    job = _copy(tmp_path, ranks=(0,))
    _raw_rank(job, "rank1_ascend_pt")
    with pytest.warns(UserWarning, match=r"rank1_ascend_pt holds only torch_npu's raw data \(PROF_\*\), never parsed "
                                         r".*analyse\(.*\).*; until then they are left out"):
        summary = npumagic.analyze(job)
    assert list(summary.ranks["rank"]) == [0] or summary.ranks.empty
