"""HCCL's own kernels on the compute lanes (AIV collectives, superkernels, LCCL, MoE dispatch/combine)
count as communication; MC2 (a matmul fused with its collective) stays computing, as msprof-analyze
keeps it. Each case is the shared level1 rank with some of its genuine kernels renamed, in every
file that names them, so the format is torch_npu's own."""

from __future__ import annotations

import shutil
import sqlite3
import warnings
from contextlib import closing

import numpy as np
import pandas as pd
import pytest

import npumagic
from npumagic.analysis.collectives import is_comm_kernel

from ..conftest import ASCEND, need

RANK = ASCEND / "level1" / "rank0_ascend_pt"
DB_RANK = ASCEND / "db" / "level1" / "rank0_ascend_pt"
OUT = "ASCEND_PROFILER_OUTPUT"
# the optimizer's three ForeachAddList kernels (AI_VECTOR_CORE, 1.96 ms of the step's 8.87 ms computing)
VECTOR = "aclnnForeachAddListV2_ForeachAddListV2_ForeachAddList"
MATMULS = ("aclnnMm_MatMulCommon_MatMulV2", "aclnnAddmm_MatMulCommon_MatMulV2")  # AI_CORE
COMM_NAMES = ["aiv_all_reduce_910b_bigdata_float", "aiv_all_gather_910b_smalldata", "aiv_reduce_scatter_910b_middata",
              "aiv_all_to_all_v_910b_direct_fullmesh", "aiv_broadcast_910b_bigdata", "sk_allreduce_mesh_1d_oneshot",
              "hcom_allGather__901_0_1", "kernel_aivec", "MoeDistributeDispatchV2", "MoeDistributeCombine"]
# MC2 (ops-transformer's mc2 operators) by their kernel names; the all-to-all ones would read as
# all-to-all communication by name alone
MC2_NAMES = ["MatmulAllReduce", "AllGatherMatmul", "MatmulReduceScatter", "AllGatherMatmulV2",
             "aclnnMatmulAllReduce_MatmulAllReduce_MatmulAllReduce", "MatmulAlltoAll", "AlltoAllMatmul",
             "GroupedMatMulAlltoAllv", "AlltoAllvGroupedMatMul", "BatchMatMulReduceScatterAlltoAll"]
FIGURES = ["computing_us", "communication_us", "comm_not_overlapped_us", "overlapped_us", "free_us", "stage_us",
           "busy_us", "wall_us"]


def _renamed_text(tmp_path, names: dict[str, str], trace_view: bool = True):
    """A copy of the level1 rank with its kernels ``names`` renamed in kernel_details.csv and
    trace_view.json (or without trace_view.json)."""
    rank = tmp_path / RANK.name
    shutil.copytree(need(RANK), rank)
    for file, quote in (("kernel_details.csv", ","), ("trace_view.json", '"')):
        path = rank / OUT / file
        if file == "trace_view.json" and not trace_view:
            path.unlink()
            continue
        text = path.read_text()
        for old, new in names.items():
            assert f"{quote}{old}{quote}" in text, (file, old)
            text = text.replace(f"{quote}{old}{quote}", f"{quote}{new}{quote}")
        path.write_text(text)
    return rank


def _renamed_db(tmp_path, names: dict[str, str]):
    rank = tmp_path / DB_RANK.name
    shutil.copytree(need(DB_RANK), rank)
    with closing(sqlite3.connect(rank / OUT / "ascend_pytorch_profiler_0.db")) as conn, conn:
        for old, new in names.items():
            assert conn.execute("UPDATE STRING_IDS SET value = ? WHERE value = ?", (new, old)).rowcount == 1
    return rank


def _analyze(path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = npumagic.analyze(path)
    assert not [w for w in caught if "disagree" in str(w.message)], [str(w.message) for w in caught]
    return summary


def _kernel_us(rank, name: str) -> float:
    details = pd.read_csv(rank / OUT / "kernel_details.csv")
    return float(details.loc[details["Name"] == name, "Duration(us)"].sum())


@pytest.fixture(scope="module")
def original():
    return _analyze(need(RANK)).steps.set_index("step")


@pytest.mark.parametrize("name", COMM_NAMES)
def test_hccl_kernels_on_the_compute_lanes_are_communication(tmp_path, original, name):
    # GIVEN the level1 rank whose three ForeachAddList kernels (AI_VECTOR_CORE) carry an HCCL kernel's name
    rank = _renamed_text(tmp_path, {VECTOR: name})
    moved = _kernel_us(rank, name)
    assert moved > 1000
    summary = _analyze(rank)
    steps = summary.steps.set_index("step")
    # THEN their time leaves computing and is exposed communication, as msprof-analyze splits a step
    # (Communication(Not Overlapped) = the union of computing and communication less computing)
    assert (original["computing_us"] - steps["computing_us"]).sum() == pytest.approx(moved, abs=0.01)
    assert (steps["comm_not_overlapped_us"] - original["comm_not_overlapped_us"]).sum() == pytest.approx(moved, abs=0.01)
    assert (steps["communication_us"] > original["communication_us"]).all()
    # the step's busy, free and stage time stay as they were
    for column in ("busy_us", "free_us", "stage_us", "wall_us"):
        assert steps[column].tolist() == pytest.approx(original[column].tolist(), abs=0.01), column
    # and the reader says why its figures differ from step_trace_time.csv, which it keeps as the tasks' figures
    assert "count as communication" in summary.meta["note"]
    assert "vendor" not in summary.meta["sources"]["breakdown"]


@pytest.mark.parametrize("name", MC2_NAMES)
def test_mc2_kernels_stay_computing(tmp_path, original, name):
    # GIVEN the level1 rank whose eight MatMulV2 kernels (AI_CORE) carry an MC2 kernel's name
    steps = _analyze(_renamed_text(tmp_path, {m: name for m in MATMULS})).steps.set_index("step")
    # THEN the step is split as before: msprof-analyze keeps MC2 in Computing
    for column in FIGURES:
        assert steps[column].tolist() == pytest.approx(original[column].tolist(), abs=0.01), column


def test_without_trace_view_the_same_rule_holds(tmp_path):
    # GIVEN the level1 rank read from kernel_details.csv alone, once as it is and once with
    # ForeachAddList named as an AIV all-reduce and MatMulV2 as MatmulAllReduce
    plain = _analyze(_renamed_text(tmp_path / "a", {}, trace_view=False)).steps.set_index("step")
    rank = _renamed_text(tmp_path / "b", {VECTOR: "aiv_all_reduce_910b_bigdata_float",
                                          **{m: "MatmulAllReduce" for m in MATMULS}}, trace_view=False)
    steps = _analyze(rank).steps.set_index("step")
    # THEN only the AIV kernels move from computing to communication
    moved = _kernel_us(rank, "aiv_all_reduce_910b_bigdata_float")
    assert (plain["computing_us"] - steps["computing_us"]).sum() == pytest.approx(moved, abs=0.01)
    assert (steps["comm_not_overlapped_us"] - plain["comm_not_overlapped_us"]).sum() == pytest.approx(moved, abs=0.01)


def test_db_export_counts_hccl_kernels_as_communication(tmp_path):
    # GIVEN the db export's rank 0, as it is and with its ForeachAddList compute tasks named as
    # an AIV all-gather in STRING_IDS (the one string COMPUTE_TASK_INFO names them by)
    plain = _analyze(need(DB_RANK)).steps.set_index("step")
    summary = _analyze(_renamed_db(tmp_path, {VECTOR: "aiv_all_gather_910b_bigdata"}))
    steps = summary.steps.set_index("step")
    # THEN their time moves from computing to communication not overlapped, the busy time stays,
    # and analysis.db's StepTraceTime (which counts them as computing) is not taken over the tasks
    lost = (plain["computing_us"] - steps["computing_us"]).to_numpy()
    gained = (steps["comm_not_overlapped_us"] - plain["comm_not_overlapped_us"]).to_numpy()
    assert lost.sum() > 1000
    assert gained == pytest.approx(lost, abs=0.01)
    assert steps["busy_us"].tolist() == pytest.approx(plain["busy_us"].tolist(), abs=0.01)
    assert "count as communication" in summary.meta["note"]


def test_one_rule_names_communication_and_leaves_mc2_and_compute_kernels_alone():
    names = pd.Series(COMM_NAMES + MC2_NAMES + ["ncclDevKernel_AllReduce_Sum_f32_RING_LL", "aiv_add_custom",
                                                "MatMulV2", "Conv2DBackpropInput", "sk_layernorm", VECTOR])
    expected = [True] * len(COMM_NAMES) + [False] * len(MC2_NAMES) + [True, False, False, False, False, False]
    assert is_comm_kernel(names).tolist() == expected
    assert is_comm_kernel(pd.Series([], dtype=object)).dtype == np.bool_
