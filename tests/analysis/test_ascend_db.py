"""The torch_npu db export reader, cross-checked against torch_npu's own analysis.db.

npumagic recomputes the step breakdown and the link bandwidths from the raw tables (TASK,
COMPUTE_TASK_INFO, COMMUNICATION_OP, COMMUNICATION_TASK_INFO, STEP_TIME); analysis.db's
StepTraceTime, CommAnalyzerBandwidth and CommAnalyzerMatrix are only read here, to compare."""

from __future__ import annotations

import hashlib
import re
import shutil
import sqlite3
from contextlib import closing

import pandas as pd
import pytest

import npumagic
from npumagic.errors import TraceError

from ..conftest import ASCEND, need, shared_summary

DB = ASCEND / "db" / "level1"
TOLERANCE = 0.01


def _analysis(rank: int, table: str) -> pd.DataFrame:
    path = need(DB / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "analysis.db")
    with sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True) as conn:
        return pd.read_sql_query(f"SELECT * FROM {table}", conn)


@pytest.fixture(scope="module")
def job():
    return shared_summary(DB)


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("ours, theirs", [
    ("computing_us", "computing"),
    ("comm_not_overlapped_us", "communication_not_overlapped"),
    ("overlapped_us", "overlapped"),
    ("communication_us", "communication"),
    ("free_us", "free"),
    ("stage_us", "stage"),
    ("preparing_us", "preparing"),
])
def test_breakdown_agrees_with_analysis_db_step_trace_time(job, rank, ours, theirs):
    vendor = _analysis(rank, "StepTraceTime")
    steps = job.per_rank[rank].steps.set_index("step")
    assert len(vendor) == len(steps)
    for _, row in vendor.iterrows():
        step = int(row["step"])
        # within 1% of the step, as the vendor's figures are themselves shares of it
        assert abs(steps.loc[step, ours] - float(row[theirs])) <= TOLERANCE * float(row["stage"]), (rank, step, ours)


DB_2024 = ASCEND / "msinsight_2024" / "db_level0"
STEP_TRACE = {"computing_us": "computing", "comm_not_overlapped_us": "communication_not_overlapped",
              "overlapped_us": "overlapped", "communication_us": "communication", "free_us": "free",
              "stage_us": "stage", "preparing_us": "preparing"}


@pytest.mark.parametrize("rank", [0, 1])
def test_a_2024_export_is_its_step_trace_time_from_the_union_of_hccl_tasks(rank):
    # GIVEN a 2024 db export whose COMMUNICATION_OP spans hold time none of their HCCL tasks runs
    path = need(DB_2024 / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "analysis.db")
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as conn:
        vendor = pd.read_sql_query("SELECT * FROM StepTraceTime", conn).iloc[0]
    # WHEN it is read; THEN every column is the vendor's to the nanosecond (the op spans read
    # rank 0's communication as 38,522.184 us, free as 3,508.839 us: 1.0% of the step off)
    ours = shared_summary(DB_2024).per_rank[rank].steps.iloc[0]
    for column, theirs in STEP_TRACE.items():
        assert ours[column] == pytest.approx(float(vendor[theirs]), abs=1e-3), column


def test_both_ranks_are_read_with_their_device(job):
    assert list(job.ranks["rank"]) == [0, 1]
    assert job.meta["device_name"] == "Ascend910B"
    assert "ascend_pytorch_profiler_0.db" in job.meta["sources"]["breakdown"]


@pytest.mark.parametrize("rank", [0, 1])
def test_each_links_bandwidth_agrees_with_comm_analyzer_bandwidth(job, rank):
    vendor = _analysis(rank, "CommAnalyzerBandwidth").drop_duplicates(["hccl_op_name", "transport_type"])
    links = job.links[job.links["rank"] == rank].set_index(["op", "link_type"])
    for _, row in vendor.iterrows():
        mine = links.loc[(row["hccl_op_name"], row["transport_type"])]
        assert mine["transit_mb"] == pytest.approx(row["transit_size"], rel=1e-6)
        assert mine["transit_ms"] == pytest.approx(row["transit_time"], rel=TOLERANCE)
        assert mine["bandwidth_gbps"] == pytest.approx(row["bandwidth"], rel=TOLERANCE)


def test_matrix_pairs_agree_with_comm_analyzer_matrix(job):
    vendor = _analysis(0, "CommAnalyzerMatrix")
    ours = job.matrix[job.matrix["rank"] == 0]
    by_op = ours.set_index(["op", "src_rank", "dst_rank"])
    total = ours.groupby(["src_rank", "dst_rank"])[["transit_mb", "transit_ms"]].sum()
    for _, row in vendor.iterrows():
        pair = (int(row["src_rank"]), int(row["dst_rank"]))
        if row["op_name"]:  # the top/middle/bottom op of the pair
            mine = by_op.loc[(row["op_name"], *pair)]
            assert mine["link_type"] == row["transport_type"]
            assert mine["bandwidth_gbps"] == pytest.approx(row["bandwidth"], rel=TOLERANCE)
        else:  # "total": every op of the pair
            mine = total.loc[pair]
            assert mine["transit_mb"] / mine["transit_ms"] == pytest.approx(row["bandwidth"], rel=TOLERANCE)
        assert mine["transit_mb"] == pytest.approx(row["transit_size"], rel=1e-4)


def test_kernels_carry_core_types_and_ai_core_metrics(job):
    kernels = job.per_rank[0].kernels
    assert {"AI_CORE", "AI_VECTOR_CORE"} <= set(kernels["core"])
    assert kernels["count"].sum() == 187  # COMPUTE_TASK_INFO rows of rank 0
    assert kernels["aic_mac_ratio"].notna().any()


def _profiler_db(rank: int, sql: str) -> pd.DataFrame:
    path = need(DB / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / f"ascend_pytorch_profiler_{rank}.db")
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as conn:
        return pd.read_sql_query(sql, conn)


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("ours, sql", [
    ("block_dim", "SELECT blockDim AS v FROM COMPUTE_TASK_INFO"),
    ("mix_block_dim", "SELECT mixBlockDim AS v FROM COMPUTE_TASK_INFO"),
    ("aic_mac_ratio", "SELECT p.value AS v FROM TASK_PMU_INFO AS p JOIN STRING_IDS AS s ON s.id = p.name "
                      "WHERE s.value = 'aic_mac_ratio'"),
    ("aiv_mte2_ratio", "SELECT p.value AS v FROM TASK_PMU_INFO AS p JOIN STRING_IDS AS s ON s.id = p.name "
                       "WHERE s.value = 'aiv_mte2_ratio'"),
    # PMU times are ns in the db, us in the schema (as kernel_details.csv writes them)
    ("aicore_time_us", "SELECT p.value / 1000.0 AS v FROM TASK_PMU_INFO AS p JOIN STRING_IDS AS s ON s.id = p.name "
                       "WHERE s.value = 'aic_total_time'"),
    ("aiv_mte3_time_us", "SELECT p.value / 1000.0 AS v FROM TASK_PMU_INFO AS p JOIN STRING_IDS AS s "
                         "ON s.id = p.name WHERE s.value = 'aiv_mte3_time'"),
])
def test_kernel_metrics_carry_the_values_of_the_profiler_db(job, rank, ours, sql):
    # GIVEN the column queried on its own from the rank's profiler db
    theirs = _profiler_db(rank, sql)["v"]
    metrics = job.per_rank[rank].kernel_metrics
    # THEN the normalized table has one value per compute task, with the same total
    assert len(metrics) == len(_profiler_db(rank, "SELECT globalTaskId FROM COMPUTE_TASK_INFO"))
    assert metrics[ours].notna().sum() == len(theirs) > 0
    assert metrics[ours].sum() == pytest.approx(theirs.sum(), rel=1e-9)


def test_kernel_metrics_carry_output_shapes_so_the_ai_core_groups_are_analysed(job):
    # GIVEN COMPUTE_TASK_INFO's output shapes (STRING_IDS values, quoted as in kernel_details.csv)
    raw = _profiler_db(0, "SELECT s.value AS v FROM COMPUTE_TASK_INFO AS c JOIN STRING_IDS AS s "
                          "ON s.id = c.outputShapes")["v"]
    metrics = job.per_rank[0].kernel_metrics
    # THEN they are in the table without quotes, and the AI Core operator groups get analysed
    assert sorted(metrics["output_shapes"].astype(str)) == sorted(raw.str.strip('"').replace("N/A", ""))
    assert metrics["output_shapes"].astype(str).ne("").sum() > 100
    assert [f for f in npumagic.advise(job.per_rank[0]) if f.rule == "aicore_performance"]


def test_collective_wait_time_from_analysis_db(job):
    comm = job.per_rank[0].comm.set_index("op")
    timing = _analysis(0, "CommAnalyzerTime")
    assert comm.loc["allReduce", "wait_us"] == pytest.approx(timing["wait_time"].sum() * 1000, rel=1e-6)


def _copy(tmp_path):
    dst = tmp_path / "job" / "rank0_ascend_pt"
    shutil.copytree(need(DB / "rank0_ascend_pt"), dst)
    for p in [dst, *dst.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def _state(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_reading_never_writes_to_the_users_files(tmp_path):
    rank = _copy(tmp_path)
    before = _state(rank)
    npumagic.summarize(npumagic.load(rank))
    assert _state(rank) == before  # same bytes, and no -journal/-wal/-shm file left beside them


def test_a_corrupt_db_names_itself(tmp_path):
    rank = _copy(tmp_path)
    (rank / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db").write_bytes(b"not sqlite" * 100)
    with pytest.raises(TraceError, match=r"ascend_pytorch_profiler_0\.db: not a readable SQLite database"):
        npumagic.load(rank)


def test_a_db_without_the_task_table_says_what_it_expected(tmp_path):
    rank = _copy(tmp_path)
    path = rank / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE TASK")
    with pytest.raises(TraceError, match=r"lacks the tables \['TASK'\]"):
        npumagic.load(rank)


def test_the_db_is_opened_read_only(tmp_path):
    from npumagic.analysis.sources.ascend.db import connect

    path = _copy(tmp_path) / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    conn = connect(path)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        conn.execute("CREATE TABLE scratch (a)")
    conn.close()


def _damaged(tmp_path, *statements):
    """A copy of db/level1/rank0 whose profiler database ran ``statements``: (rank dir, db)."""
    rank = tmp_path / "rank0_ascend_pt"
    shutil.copytree(need(DB / "rank0_ascend_pt"), rank, copy_function=shutil.copyfile)
    db = next((rank / "ASCEND_PROFILER_OUTPUT").glob("ascend_pytorch_profiler*.db"))
    db.chmod(0o644)
    with closing(sqlite3.connect(db)) as conn:
        for statement in statements:
            conn.execute(statement)
        conn.commit()
    return rank, db


@pytest.mark.parametrize("value", ["'abc'", "NULL"], ids=["text", "null"])
def test_a_value_torch_npu_never_writes_is_one_error_naming_the_database(tmp_path, value):
    rank, db = _damaged(tmp_path, f"UPDATE STEP_TIME SET startNs = {value}")
    with pytest.raises(TraceError, match=f"{db}: holds values torch_npu does not write"):
        npumagic.load(rank)


def test_rows_with_times_no_profiler_writes_are_skipped_and_counted_not_clipped(tmp_path):
    # GIVEN a collective that ends before it starts and a kernel that ends at the end of int64
    rank, db = _damaged(tmp_path,
                        "UPDATE COMMUNICATION_OP SET endNs = startNs - 5000000 WHERE rowid = (SELECT MIN(rowid) FROM COMMUNICATION_OP)",
                        "UPDATE TASK SET endNs = 9223372036854775807 WHERE rowid = (SELECT MIN(t.rowid) FROM TASK AS t "
                        "JOIN COMPUTE_TASK_INFO AS c ON c.globalTaskId = t.globalTaskId)")
    # WHEN read THEN each is left out and counted under its table, and the step keeps its length
    with pytest.warns(UserWarning) as caught:
        summary = npumagic.analyze(rank)
    said = " ".join(str(w.message) for w in caught)
    assert f"{db} COMMUNICATION_OP: 1 of 4 rows skipped (1 end before start)" in said
    assert f"{db} TASK: 1 of" in said and "(1 time out of range)" in said
    whole = shared_summary(DB / "rank0_ascend_pt")
    assert summary.steps["wall_us"].tolist() == whole.steps["wall_us"].tolist()
    assert summary.comm["count"].sum() == whole.comm["count"].sum() - 1  # the broken allReduce, not a 0 ms one


def test_a_step_that_step_time_lists_twice_is_refused(tmp_path):
    rank, db = _damaged(tmp_path, "INSERT INTO STEP_TIME SELECT * FROM STEP_TIME")
    with pytest.raises(TraceError, match=f"{db}: STEP_TIME lists step 50 more than once"):
        npumagic.load(rank)


@pytest.mark.parametrize("statement", ["DROP TABLE COMMUNICATION_OP", "DELETE FROM COMMUNICATION_OP"],
                         ids=["no-table", "no-rows"])
def test_communication_tasks_without_their_operators_are_refused_not_read_as_no_communication(tmp_path, statement):
    # GIVEN an export whose HCCL tasks are there but whose collectives (COMMUNICATION_OP) are not
    rank, db = _damaged(tmp_path, statement)
    # THEN reading it is one error naming the database, not a step with 0 ms of communication
    with pytest.raises(TraceError, match=rf"{re.escape(str(db))}: COMMUNICATION_TASK_INFO lists \d+ "
                                         r"communication tasks but COMMUNICATION_OP no collective"):
        npumagic.load(rank)


def test_a_db_rank_whose_step_trace_time_disagrees_with_its_tasks_says_so_and_uses_it(tmp_path):
    # GIVEN a db rank whose analysis.db StepTraceTime says twice the computing its tasks show
    rank = tmp_path / "rank1_ascend_pt"
    shutil.copytree(need(DB / "rank1_ascend_pt"), rank, copy_function=shutil.copyfile)
    analysis = rank / "ASCEND_PROFILER_OUTPUT" / "analysis.db"
    for p in [rank, *rank.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    with closing(sqlite3.connect(analysis)) as conn:
        conn.execute("UPDATE StepTraceTime SET computing = computing * 2")
        conn.commit()
    # THEN the warning names analysis.db's StepTraceTime, both values and which is used
    with pytest.warns(UserWarning, match=r"rank 1: analysis\.db's StepTraceTime and the figures computed from its "
                                         r"tasks disagree by more than 1% of the step \(step 50 Computing: 8\.92 ms "
                                         r"from the tasks, 17\.83 ms in analysis\.db's StepTraceTime.*\); analysis\.db's "
                                         r"StepTraceTime's figures are used"):
        summary = npumagic.analyze(rank)
    assert summary.steps["computing_us"].tolist() == pytest.approx([2 * 8915.634])
    assert summary.meta["sources"]["breakdown"].startswith("analysis.db's StepTraceTime")
