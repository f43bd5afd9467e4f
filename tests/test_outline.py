"""A torch_npu job of many ranks read as an outline: every rank's step_trace_time.csv and
communication files (as msprof-analyze's cluster analysis reads them), one rank in full. Checked
against torch_npu's own tables and against the job read in full."""

from __future__ import annotations

import dataclasses
import json
import re

import pandas as pd
import pytest
from IPython.core.error import UsageError

import npumagic
from npumagic.analysis import job as job_reader
from npumagic.analysis import cluster
from npumagic.analysis.persist import dump_summary, load_summary
from npumagic.analysis.sources import detect, reader_for
from npumagic.analysis.sources.ascend import outline as ascend_outline
from npumagic.cli import main
from npumagic.errors import TraceError

from .test_parallel import _assert_same, copy_job

OUTPUT = "ASCEND_PROFILER_OUTPUT"
# what the outline replaces (the job's views) or leaves out (the other ranks' own tables)
JOB_FIELDS = ("ranks", "per_rank", "links", "matrix", "temporal", "meta")


@pytest.fixture(scope="module")
def job8(tmp_path_factory):
    job = copy_job(tmp_path_factory.mktemp("outline") / "job8", 8)
    # rank 4 as torch_npu writes three steps: its rank row must be their mean and median
    path = job / "rank4_ascend_pt" / OUTPUT / "step_trace_time.csv"
    path.chmod(0o644)
    one = pd.read_csv(path)
    three = pd.concat([one, one.assign(Step=51, Computing=one["Computing"] * 3, Stage=one["Stage"] * 2),
                       one.assign(Step=52, Free=0.0)], ignore_index=True)
    three.to_csv(path, index=False)
    # rank 6 as torch_npu writes a capture without steps: Step left empty, one row for the whole
    path = job / "rank6_ascend_pt" / OUTPUT / "step_trace_time.csv"
    path.chmod(0o644)
    pd.read_csv(path).assign(Step="").to_csv(path, index=False)
    return job


@pytest.fixture(scope="module")
def outline8(job8):
    return job_reader.analyze(job8)


@pytest.fixture(scope="module")
def full8(job8):
    return job_reader.analyze(job8, scheduler="serial")  # every rank read and summarised, in this process


@pytest.fixture
def outline_from_3(monkeypatch):
    """Jobs of 3 ranks on are read as an outline: the tests of what the outline does with a rank
    need no 8 ranks (each rank read in full to compare costs ~0.3 s)."""
    monkeypatch.setattr(job_reader, "OUTLINE_MIN_RANKS", 3)


def _vendor_steps(rank_dir) -> pd.DataFrame:
    return pd.read_csv(rank_dir / OUTPUT / "step_trace_time.csv")


def test_eight_ranks_are_read_as_an_outline_with_the_lowest_rank_in_full(job8, outline8, full8):
    assert job_reader.reads_apart(job8) and not job_reader.reads_apart(job8, "serial")
    assert sorted(outline8.per_rank) == [0] and sorted(full8.per_rank) == list(range(8))
    assert "step_trace_time.csv" in outline8.meta["rank_table"] and "8 ranks" in outline8.meta["rank_table"]
    assert "rank_table" not in full8.meta
    # the rank read in full is exactly what reading every rank gives for it
    for field in dataclasses.fields(npumagic.Summary):
        if field.name not in JOB_FIELDS:
            _assert_same(getattr(outline8, field.name), getattr(full8, field.name), field.name)
    assert {k: v for k, v in outline8.meta.items() if k != "rank_table"} == full8.meta
    _assert_same(outline8.per_rank[0].steps, full8.per_rank[0].steps, "rank 0 steps")


def test_the_rank_table_is_torch_npus_step_breakdown_of_each_rank(job8, outline8, full8):
    table = outline8.ranks.set_index("rank")
    assert list(table.index) == list(range(8))
    for rank in range(8):
        vendor = _vendor_steps(job8 / f"rank{rank}_ascend_pt")
        row = table.loc[rank]
        assert row["steps"] == len(vendor)
        assert row["computing_us"] == pytest.approx(vendor["Computing"].mean())
        assert row["comm_not_overlapped_us"] == pytest.approx(vendor["Communication(Not Overlapped)"].mean())
        assert row["communication_us"] == pytest.approx(vendor["Communication"].mean())
        assert row["free_us"] == pytest.approx(vendor["Free"].mean())
        assert row["step_median_us"] == pytest.approx((vendor["Stage"] + vendor["Preparing"]).median())
        assert pd.isna(row["dataloader_us"])  # torch_npu's table has no DataLoader time
    # the parallel indices come from the same metadata either way
    pd.testing.assert_frame_equal(outline8.ranks[["rank", "dp", "pp", "tp", "stage"]],
                                  full8.ranks[["rank", "dp", "pp", "tp", "stage"]])
    # ranks 0 and 2 are copies of one rank: 154.48 vs 152.35 ms is within msprof-analyze's 5%
    assert not outline8.ranks["slowest"].any()


def test_links_matrix_and_link_findings_equal_the_full_read(outline8, full8):
    pd.testing.assert_frame_equal(outline8.links, full8.links.reset_index(drop=True), check_categorical=False)
    pd.testing.assert_frame_equal(outline8.comm_matrix, full8.comm_matrix)
    assert len(outline8.links) and outline8.links["rank"].nunique() == 8
    slow = lambda s: [(f.title, f.evidence) for f in cluster.slow_links(s)]  # noqa: E731
    assert slow(outline8) == slow(full8)


def test_another_rank_is_the_one_read_in_full_on_request(job8, full8):
    five = job_reader.analyze(job8, rank=5)
    assert sorted(five.per_rank) == [5] and five.meta["rank"] == 5
    _assert_same(five.steps, full8.per_rank[5].steps, "rank 5 steps")
    _assert_same(five.kernels, full8.per_rank[5].kernels, "rank 5 kernels")
    with pytest.raises(ValueError, match=r"rank 99 not in trace"):
        job_reader.analyze(job8, rank=99)


def test_unlabelled_ranks_are_numbered_in_directory_order_as_the_reader_does(tmp_path, outline_from_3):
    job = copy_job(tmp_path / "job", 3, relabel=False)
    outline = job_reader.analyze(job, rank=2)
    full = npumagic.load(job)
    assert list(outline.ranks["rank"]) == full.ranks == list(range(3))
    assert sorted(outline.per_rank) == [2] and outline.meta["rank"] == 2
    pd.testing.assert_frame_equal(outline.links[["rank", "transit_mb"]],
                                  full.links[["rank", "transit_mb"]].reset_index(drop=True))


def test_a_broken_rank_is_left_out_with_its_error_as_the_full_reader_does(tmp_path, outline_from_3):
    job = copy_job(tmp_path / "job", 5)
    broken = job / "rank3_ascend_pt" / OUTPUT / "communication.json"
    broken.chmod(0o644)
    broken.write_text(json.dumps({"step50": {"collective": {"allreduce@1": {
        "Communication Bandwidth Info": {"HCCS": {"Transit Size(MB)": "lots", "Transit Time(ms)": 1.0}}}}}}))
    with pytest.warns(UserWarning, match=re.escape(str(broken))) as outline_said:
        outline = job_reader.analyze(job)
    assert list(outline.ranks["rank"]) == [0, 1, 2, 4]
    assert "'lots'; expected a finite number" in outline.meta["unreadable"][str(job / "rank3_ascend_pt")]
    with pytest.warns(UserWarning, match=re.escape(str(broken))) as full_said:
        assert npumagic.load(job).meta.unreadable.keys() == outline.meta["unreadable"].keys()
    # both readers leave it out in one way (one shared helper): said once, in the same words
    left_out = [[str(w.message) for w in said if "is left out" in str(w.message)] for said in (outline_said, full_said)]
    assert left_out[0] == left_out[1] and len(left_out[0]) == 1


def test_jobs_the_outline_cannot_read_are_read_in_full_and_it_says_why(tmp_path, job8):
    _, paths = detect(job8)
    assert ascend_outline.unfit(paths) == []
    job = copy_job(tmp_path / "job", 8)
    step_trace = job / "rank6_ascend_pt" / OUTPUT / "step_trace_time.csv"
    step_trace.chmod(0o644)
    step_trace.unlink()
    _, paths = detect(job)
    assert ascend_outline.unfit(paths) == [job / "rank6_ascend_pt"]
    with pytest.warns(UserWarning, match=r"1 of the 8 ranks \(rank6_ascend_pt\) have no step_trace_time.csv .*"
                                         r"every rank is read in full"):
        assert not job_reader._outline_fits(reader_for("ascend"), paths, "", False)


@pytest.mark.parametrize("line, why", [
    ("51,abc,1,1,1,1,1,0,1,1", "line 3: Computing is 'abc'; expected a time in us"),
    ("step3,1,1,1,1,1,1,0,1,1", "line 3: Step is 'step3'; expected an integer"),
    ("51,-8873.7,1,1,1,1,1,0,1,1", "line 3: Computing is '-8873.7'; expected a time in us from 0"),
    *(pytest.param(line, why, marks=pytest.mark.slow) for line, why in [
        ("51,nan,1,1,1,1,1,0,1,1", "line 3: Computing is 'nan'"),
        ("51,1,1e300,1,1,1,1,0,1,1", "line 3: Communication(Not Overlapped) is '1e300'"),
        ("51,1,1,1,1,inf,1,0,1,1", "line 3: Free is 'inf'"),
        ("51,1,1,1", "line 3 has 4 fields; the header has 10"),
        ("99999999999999999999,1,1,1,1,1,1,0,1,1", "line 3: Step is '99999999999999999999'")]),
])
def test_a_step_trace_row_that_is_not_numbers_leaves_its_rank_out_naming_the_line(tmp_path, line, why,
                                                                                   outline_from_3):
    job = copy_job(tmp_path / "job", 5)
    path = job / "rank3_ascend_pt" / OUTPUT / "step_trace_time.csv"
    path.chmod(0o644)
    path.write_text(path.read_text().rstrip("\n") + "\n" + line + "\n")
    with pytest.warns(UserWarning, match=re.escape(f"{path}: {why}")):
        outline = job_reader.analyze(job)
    assert list(outline.ranks["rank"]) == [0, 1, 2, 4]


@pytest.mark.slow  # 12 ranks read in full
def test_repeated_rank_ids_are_numbered_in_natural_directory_order_and_said(tmp_path):
    job = copy_job(tmp_path / "job", 12)
    for n in range(12):  # each rank's computing time says which directory it came from
        path = job / f"rank{n}_ascend_pt" / OUTPUT / "step_trace_time.csv"
        path.chmod(0o644)
        pd.read_csv(path).assign(Computing=1000.0 * n).to_csv(path, index=False)
    info = next((job / "rank7_ascend_pt").glob("profiler_info*.json"))
    info.write_text(json.dumps(dict(json.loads(info.read_text()), rank_id=3)))
    with pytest.warns(UserWarning, match=r"rank ids \[3\] appear in more than one rank's profiler_info"):
        outline = job_reader.analyze(job)
    assert list(outline.ranks["computing_us"]) == [1000.0 * n for n in range(12)]  # rank10 after rank9
    with pytest.warns(UserWarning, match=r"rank ids \[3\] appear in more than one"):
        assert npumagic.load(job).ranks == list(range(12))


def test_a_lowest_rank_that_cannot_be_read_in_full_gives_way_to_the_next(tmp_path, outline_from_3):
    job = copy_job(tmp_path / "job", 3)
    broken = job / "rank0_ascend_pt" / OUTPUT / "trace_view.json"
    broken.chmod(0o644)
    broken.write_text('[{"ph": "X", "name": ')
    (job / "rank0_ascend_pt" / OUTPUT / "kernel_details.csv").unlink()  # nothing to read the rank from instead
    with pytest.warns(UserWarning, match="rank 0 cannot be read in full: the next rank is described"):
        outline = job_reader.analyze(job)
    assert outline.meta["rank"] == 1 and sorted(outline.per_rank) == [1]
    assert list(outline.ranks["rank"]) == list(range(3))  # its small files still are in the rank table
    with pytest.raises(npumagic.TraceError, match="trace_view.json"):
        job_reader.analyze(job, rank=0)


def test_the_cli_names_where_the_rank_table_comes_from(tmp_path, capsys, outline_from_3):
    job = copy_job(tmp_path / "job", 3)
    assert main(["analyze", str(job)]) == 0
    out = capsys.readouterr().out
    assert ("ranks: torch_npu's own step breakdown (step_trace_time.csv) of each of the 3 ranks; rank 0 alone"
            in " ".join(out.split()))  # the caption wraps to the terminal
    assert main(["analyze", str(job), "--scheduler", "serial", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in payload["ranks"]] == list(range(3)) and "rank_table" not in payload["meta"]


def test_an_outline_run_survives_the_history_and_its_advice_says_what_it_left_out(shell, job8):
    report = shell.run_line_magic("npuload", f"{job8} --name job8 --no-plot")
    assert sorted(report.summary.per_rank) == [0]
    again = load_summary(dump_summary(report.summary))
    pd.testing.assert_frame_equal(again.ranks, report.summary.ranks)
    assert again.meta["rank_table"] == report.summary.meta["rank_table"]
    five = shell.run_line_magic("npuload", f"{job8} --name five --rank 5 --no-plot")
    assert sorted(five.summary.per_rank) == [5] and len(five.summary.ranks) == 8
    with pytest.raises(UsageError, match=r"rank 99 not in trace"):
        shell.run_line_magic("npuload", f"{job8} --name bad --rank 99 --no-plot")
    advice = shell.run_line_magic("npuadvise", "job8 --all")
    assert "only rank 0 of the 8 ranks was read in full" in str(advice)
    assert "only rank" not in str(shell.run_line_magic("npuadvise", "job8"))


def test_a_rank_directory_without_its_output_is_said_and_left_out(tmp_path):
    job = copy_job(tmp_path / "job", 3)
    (job / "rank3_ascend_pt").mkdir()  # as torch_npu leaves a rank it has not parsed
    with pytest.warns(UserWarning, match=r"rank3_ascend_pt has no ASCEND_PROFILER_OUTPUT .* is left out"):
        _, paths = detect(job)
    assert len(paths) == 3


def test_ranks_of_separate_runs_in_sibling_folders_are_refused(tmp_path, capsys):
    """level0/rank0 and level1/rank0 under one folder: two runs (or one job exported twice), not a
    job of four ranks. Read in full, as an outline and by the command, one error names both."""
    for run in ("level0", "level1"):
        copy_job(tmp_path / "runs" / run, 2)
    said = "holds rank directories of separate runs: level0/rank0_ascend_pt and level1/rank0_ascend_pt both record rank 0"
    with pytest.raises(TraceError, match=re.escape(said)) as raised:
        npumagic.load(tmp_path / "runs")
    assert str(raised.value).endswith("A folder is read as one job (a directory per rank): analyse each run's "
                                      "folder on its own")  # the Kineto reader's words
    with pytest.raises(TraceError, match=re.escape(said)):
        job_reader.analyze(tmp_path / "runs")
    assert main(["analyze", str(tmp_path / "runs")]) == 2
    assert said in capsys.readouterr().err


def test_a_job_whose_ranks_lie_in_a_folder_per_node_is_one_job(tmp_path):
    job = copy_job(tmp_path / "flat", 4)
    for rank in range(4):  # node0 holds ranks 0-1, node1 ranks 2-3: ids apart, one job
        (tmp_path / "job" / f"node{rank // 2}").mkdir(parents=True, exist_ok=True)
        (job / f"rank{rank}_ascend_pt").rename(tmp_path / "job" / f"node{rank // 2}" / f"rank{rank}_ascend_pt")
    assert npumagic.load(tmp_path / "job").ranks == [0, 1, 2, 3]
