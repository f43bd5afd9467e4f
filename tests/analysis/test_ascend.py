"""The torch_npu reader and the step breakdown, cross-checked against the vendor's own files.

npumagic computes Computing / Communication(Not Overlapped) / Overlapped / Free itself from the
raw device tasks (kernel_details.csv, Ascend Hardware streams) and the HCCL group lanes; the
vendor's step_trace_time.csv and op_statistic.csv are only read here, to compare."""

from __future__ import annotations

import pandas as pd
import pytest

import npumagic
from npumagic.analysis.operators import kernel_types

from ..conftest import ASCEND, ASCEND_RANKS, need, shared_summary, shared_trace

TOLERANCE = 0.01


def _vendor(rank_dir, name):
    return pd.read_csv(rank_dir / "ASCEND_PROFILER_OUTPUT" / name)


@pytest.fixture(scope="module", params=ASCEND_RANKS, ids=lambda p: f"{p.parent.name}-{p.name}")
def sample(request):
    return need(request.param), shared_summary(request.param)


@pytest.mark.parametrize("ours, theirs", [
    ("computing_us", "Computing"),
    ("comm_not_overlapped_us", "Communication(Not Overlapped)"),
    ("overlapped_us", "Overlapped"),
    ("communication_us", "Communication"),
    ("free_us", "Free"),
    ("stage_us", "Stage"),
    ("preparing_us", "Preparing"),
])
def test_step_breakdown_agrees_with_step_trace_time(sample, ours, theirs):
    rank_dir, summary = sample
    vendor = _vendor(rank_dir, "step_trace_time.csv").set_index("Step")
    steps = summary.steps.set_index("step")
    assert list(steps.index) == list(vendor.index)
    for step, row in vendor.iterrows():
        assert steps.loc[step, ours] == pytest.approx(row[theirs], rel=TOLERANCE), (step, ours)


def test_top5_kernel_types_agree_with_op_statistic(sample):
    rank_dir, summary = sample
    path = rank_dir / "ASCEND_PROFILER_OUTPUT" / "op_statistic.csv"
    if not path.exists():
        pytest.skip(f"{rank_dir.parent.name} exports no op_statistic.csv (profiler level 0)")
    vendor = pd.read_csv(path).sort_values("Total Time(us)", ascending=False).head(5)
    ours = kernel_types(summary.kernels).set_index(["type", "core"])
    for _, row in vendor.iterrows():
        mine = ours.loc[(row["OP Type"], row["Core Type"])]
        assert mine["total_us"] == pytest.approx(row["Total Time(us)"], rel=TOLERANCE)
        assert mine["count"] == row["Count"]


@pytest.mark.parametrize("ours, theirs", [
    ("block_dim", "Block Dim"), ("mix_block_dim", "Mix Block Dim"), ("task_id", "Task ID"),
    ("aic_mac_ratio", "aic_mac_ratio"), ("aiv_vec_ratio", "aiv_vec_ratio"), ("aic_mte2_ratio", "aic_mte2_ratio"),
    ("aiv_mte3_time_us", "aiv_mte3_time(us)"), ("aicore_time_us", "aicore_time(us)"),
])
def test_kernel_metrics_carry_the_values_of_kernel_details(sample, ours, theirs):
    # GIVEN kernel_details.csv read on its own by pandas ("N/A" is NaN), its compute rows only
    rank_dir, summary = sample
    raw = _vendor(rank_dir, "kernel_details.csv")
    raw = raw[(raw["Type"] != "HCCL") & (raw["Accelerator Core"] != "HCCL")]
    metrics = summary.kernel_metrics
    # THEN the normalized table has the same rows and the same figures (absent: NaN, or -1 for ids)
    assert len(metrics) == len(raw)
    assert metrics["dur_ns"].sum() / 1e3 == pytest.approx(raw["Duration(us)"].sum(), rel=1e-9)
    if theirs not in raw:
        assert (metrics[ours] == -1).all() if ours == "task_id" else metrics[ours].isna().all()
        return
    assert metrics[ours].notna().sum() == raw[theirs].notna().sum()
    assert metrics[ours].sum() == pytest.approx(raw[theirs].sum(), rel=1e-9)


def test_kernel_metrics_carry_names_cores_shapes_and_dtypes_as_text(sample):
    # GIVEN kernel_details.csv read on its own by pandas, its compute rows only
    rank_dir, summary = sample
    raw = _vendor(rank_dir, "kernel_details.csv")
    raw = raw[(raw["Type"] != "HCCL") & (raw["Accelerator Core"] != "HCCL")]
    metrics = summary.kernel_metrics

    def text(column):  # "N/A" and absent columns are "", shapes lose torch_npu's quotes
        return raw[column].fillna("").astype(str).str.strip('"').tolist() if column in raw else [""] * len(raw)

    # THEN row by row, in the file's order
    assert metrics["name"].astype(str).tolist() == raw["Name"].tolist()
    assert metrics["core"].astype(str).tolist() == text("Accelerator Core")
    assert metrics["input_shapes"].astype(str).tolist() == text("Input Shapes")
    assert metrics["output_dtypes"].astype(str).tolist() == text("Output Data Types")


def test_level0_kernel_types_from_names_match_what_level1_names_them():
    # GIVEN level 0 (Type is N/A) and level 1 (Type filled by the vendor) of the same job
    level0 = shared_summary(ASCEND / "level0" / "rank0_ascend_pt").kernels
    level1 = shared_summary(ASCEND / "level1" / "rank0_ascend_pt").kernels
    vendor = dict(zip(level1["name"].astype(str), level1["type"].astype(str)))
    # THEN every level-0 kernel the vendor typed at level 1 gets that type from its name alone
    typed = level0[level0["name"].astype(str).isin(vendor)]
    assert len(typed) == len(level1)
    assert typed["type"].astype(str).tolist() == [vendor[n] for n in typed["name"].astype(str)]
    assert {"MatMulV2", "TransData", "Conv2D", "MemSet"} <= set(typed["type"].astype(str))


def test_timestamps_are_exact_integer_nanoseconds_despite_the_stray_tab():
    # kernel_details.csv: "1736408883704643.212\t" -- float64 would round it to a multiple of 0.25 us
    trace = shared_trace(ASCEND / "level1" / "rank0_ascend_pt")
    kernels = trace.events[trace.events["kind"] == "kernel"]
    first = kernels.sort_values("ts_ns").iloc[0]
    assert first["ts_ns"] == 1736408883704643212
    assert first["name"] == "trans_TransData_0"
    assert first["dur_ns"] == 53741


def test_na_cells_become_empty_not_errors():
    trace = shared_trace(ASCEND / "level0" / "rank0_ascend_pt")
    kernels = trace.events[trace.events["kind"] == "kernel"]
    assert set(kernels["core"].astype(str)) == {""}  # "N/A" at level 0


def test_rank0_level1_is_communication_bound_with_the_vendor_figures():
    summary = shared_summary(ASCEND / "level1" / "rank0_ascend_pt")
    step = summary.steps.iloc[0]
    assert step["communication_us"] == pytest.approx(105991.878, rel=1e-4)
    assert step["computing_us"] == pytest.approx(8873.756, rel=1e-4)
    verdict = npumagic.checklist(summary)
    assert verdict.bottleneck == "communication"
    assert "66%" in verdict.steps[1][1]  # 101.96 ms not overlapped of the 154.48 ms device step (host step 155.99 ms)


def test_a_folder_of_ranks_gives_per_rank_summaries_and_the_slowest_rank_only_past_5_percent():
    summary = shared_summary(ASCEND / "level1")
    ranks = summary.ranks.set_index("rank")
    assert list(ranks.index) == [0, 1]
    assert ranks.loc[0, "computing_us"] == pytest.approx(8873.756, rel=TOLERANCE)
    assert ranks.loc[1, "computing_us"] == pytest.approx(8878.295, rel=TOLERANCE)
    # rank0's step is 154.48 ms vs 152.35 ms: within msprof-analyze's 5%, so no rank is the slowest
    assert not ranks["slowest"].any()
    assert set(summary.per_rank) == {0, 1}
    # level0: 135.61 vs 119.52 ms (13% of the mean step): rank 0 is
    level0 = shared_summary(ASCEND / "level0").ranks.set_index("rank")
    assert level0["slowest"].tolist() == [True, False]


def test_collectives_come_from_communication_json():
    summary = shared_summary(ASCEND / "level1" / "rank0_ascend_pt")
    comm = summary.comm.set_index("op")
    assert comm.loc["allReduce", "count"] == 4
    # communication.json: Elapse Time(ms) 79.0895 + 2.2811 + 2.4024 + 22.2189
    assert comm.loc["allReduce", "elapsed_us"] == pytest.approx(105991.88, rel=1e-3)
    assert comm.loc["allReduce", "link"] == "HCCS"


def test_memory_peak_from_memory_record():
    summary = shared_summary(ASCEND / "level1" / "rank0_ascend_pt")
    record = _vendor(ASCEND / "level1" / "rank0_ascend_pt", "memory_record.csv")
    pta = record[record["Component"] == "PTA"]
    mem = summary.memory.set_index("device")
    assert mem.loc["NPU:0", "peak_allocated_bytes"] == pytest.approx(pta["Total Allocated(MB)"].max() * 2**20)
    assert mem.loc["NPU:0", "peak_reserved_bytes"] == pytest.approx(pta["Total Reserved(MB)"].max() * 2**20)


def test_syncs_point_at_the_user_source_line():
    summary = shared_summary(ASCEND / "level1" / "rank0_ascend_pt")
    syncs = summary.syncs.set_index("name")
    assert syncs.loc["aten::_local_scalar_dense", "count"] == 27
    assert "imagenet_script/main.py" in syncs.loc["aten::_local_scalar_dense", "source"]


def test_vendor_tables_are_kept_for_reference_not_used():
    trace = shared_trace(ASCEND / "level2" / "rank1_ascend_pt")
    vendor = trace.meta.vendor[1]
    assert {"step_trace_time", "op_statistic", "kernel_details", "api_statistic"} <= set(vendor)
    assert trace.meta.settings["experimental_config"]["_profiler_level"] == "Level2"


def test_link_bandwidth_uses_each_links_own_transit_time():
    summary = shared_summary(ASCEND / "level1")
    links = summary.links
    # communication.json, rank 0, hcom_allReduce__586_0_1 over HCCS: 28.647232 MB in 1.81684 ms
    first = links[(links["rank"] == 0) & (links["op"] == "hcom_allReduce__586_0_1") & (links["link_type"] == "HCCS")]
    assert first["bandwidth_gbps"].iat[0] == pytest.approx(15.7676, rel=1e-4)
    # the op's main link over the step: 427.6 MB in 27.3 ms of HCCS transfers (not the 3.68 ms op transit)
    assert summary.comm.loc[0, "bandwidth_gbps"] == pytest.approx(427.596 / 27.3157, rel=1e-3)
    # msprof-analyze's slow-link analysis on this job: SDMA 15.654 (rank 0) and 15.502 GB/s (rank 1), mean 15.578
    sdma = links[links["link_type"] == "SDMA"].groupby("rank")[["transit_mb", "transit_ms"]].sum()
    per_rank = sdma["transit_mb"] / sdma["transit_ms"]
    assert per_rank.to_list() == pytest.approx([15.654, 15.502], rel=1e-3)
    assert per_rank.median() == pytest.approx(15.58, rel=0.05)


@pytest.mark.parametrize("inside", ["ASCEND_PROFILER_OUTPUT", "ASCEND_PROFILER_OUTPUT/trace_view.json"])
def test_a_path_inside_a_rank_reads_that_rank_not_a_kineto_trace(inside):
    # trace_view.json is Chrome-trace JSON too: read alone as a Kineto trace it was a "CPU" run
    rank = need(ASCEND / "level1" / "rank0_ascend_pt")
    trace = npumagic.load(rank / inside)
    assert trace.meta.backend == "npu" and trace.meta.format == "ascend"
    pd.testing.assert_frame_equal(npumagic.summarize(trace).steps, shared_summary(rank).steps)
