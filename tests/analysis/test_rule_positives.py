"""Rules that fire: each on genuine data where it shows, else on a genuine sample changed minimally
(the test says what was changed), and silent on the same sample without the problem."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

import npumagic
from npumagic.analysis import schema
from npumagic.analysis import thresholds as T

from ..conftest import ASCEND, shared_summary


@pytest.fixture(scope="module")
def level1():
    return shared_summary(ASCEND / "level1" / "rank0_ascend_pt")


def _with_memory(summary, **columns):
    return dataclasses.replace(summary, memory=summary.memory.assign(**columns))


def _titles(summary, category):
    return [f.title for f in npumagic.advise(summary) if f.category == category]


def test_memory_near_capacity_fires_only_when_the_peak_is_near_the_device_size(level1):
    # GIVEN the genuine rank (peak allocated 1.16 GiB, capacity not in its files) told its device
    # holds 1.2 GiB, then 32 GiB
    peak = float(level1.memory["peak_allocated_bytes"].iloc[0])
    near = _with_memory(level1, capacity_bytes=1.2 * 2**30)
    roomy = _with_memory(level1, capacity_bytes=32 * 2**30)
    assert peak / (1.2 * 2**30) > T.MEMORY_NEAR_CAPACITY
    # THEN only the first is a finding, with the figures it rests on
    [title] = [t for t in _titles(near, "memory") if "of 1.2 GiB" in t]
    assert f"{peak / (1.2 * 2**30):.0%}" in title
    assert not [t for t in _titles(roomy, "memory") if "GiB is" in t]


def test_fragmentation_fires_when_reserved_far_exceeds_allocated(level1):
    # GIVEN the genuine rank (reserved 1.42 GiB vs 1.16 GiB allocated: not fragmented) and the
    # same with 3 GiB reserved
    assert not [t for t in _titles(level1, "memory") if "fragmented" in t]
    # fragmentation is judged on reserved at the peak: the samples (the files left aside) hold 3 GiB
    fragmented = _with_memory(level1, peak_reserved_bytes=3 * 2**30)
    fragmented = dataclasses.replace(fragmented, meta={**level1.meta, "path": ""},
                                     memory_timeline=level1.memory_timeline.assign(reserved_bytes=3 * 2**30))
    [finding] = [f for f in npumagic.advise(fragmented) if "fragmented" in f.title]
    # THEN the fix names the NPU allocator setting
    assert "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True" in finding.fix
    assert finding.evidence["reserved_gib"] == pytest.approx(3.0)


def test_low_block_dim_names_the_long_kernel_that_runs_on_few_cores(level1):
    # GIVEN the genuine rank, where every long kernel uses at least 16 blocks, and the same with
    # its Addmm matmul (5.8% of compute, 21 blocks) launched on 2 blocks
    assert not [f for f in npumagic.advise(level1) if "fewer than" in f.title]
    metrics = level1.kernel_metrics.copy()
    matmul = metrics["name"] == "aclnnAddmm_MatMulCommon_MatMulV2"
    metrics.loc[matmul, "block_dim"] = 2
    share = metrics.loc[matmul, "dur_ns"].sum() / metrics["dur_ns"].sum()
    assert share >= T.KERNEL_SHARE
    changed = dataclasses.replace(level1, kernel_metrics=metrics)
    # THEN the finding names it with its block dim
    [finding] = [f for f in npumagic.advise(changed) if "fewer than" in f.title]
    assert "aclnnAddmm_MatMulCommon_MatMulV2 (block dim 2)" in finding.title


def test_memory_bound_kernels_are_counted_as_the_kernel_table_says(level1):
    # GIVEN the genuine level-1 rank; the count computed independently from kernel_details.csv
    raw = pd.read_csv(ASCEND / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", dtype=str)
    raw = raw[raw["Type"] != "HCCL"]
    num = lambda c: pd.to_numeric(raw[c], errors="coerce")  # noqa: E731
    cube = (raw["Accelerator Core"] == "AI_CORE") & (num("aic_mte2_ratio") > T.MEMORY_BOUND_MTE2_RATIO) \
        & (num("aic_mac_ratio") < T.MEMORY_BOUND_COMPUTE_RATIO)
    vector = (raw["Accelerator Core"] == "AI_VECTOR_CORE") & (num("aiv_mte2_ratio") > T.MEMORY_BOUND_MTE2_RATIO) \
        & (num("aiv_vec_ratio") < T.MEMORY_BOUND_COMPUTE_RATIO)
    expected = int((cube | vector).sum())
    assert expected > 0
    # THEN the finding counts exactly those kernels
    [finding] = [f for f in npumagic.advise(level1) if "memory_bound_kernels" in f.evidence]
    assert finding.evidence["memory_bound_kernels"] == expected


def _device_trace(busy_fraction: float, steps: int = 4, step_ms: float = 10.0) -> schema.Trace:
    """One stream's kernels covering ``busy_fraction`` of each step, the rest waiting for the host."""
    ms = 1_000_000
    starts = np.arange(steps) * int(step_ms * ms)
    step_frame = pd.DataFrame({"rank": 0, "step": np.arange(1, steps + 1), "start_ns": starts,
                               "end_ns": starts + int(step_ms * ms)})
    kernel_ns = int(busy_fraction * step_ms * ms / 10)
    ts = (starts[:, None] + np.arange(10)[None, :] * int(step_ms * ms / 10)).ravel()
    kernels = pd.DataFrame({"name": "volta_sgemm_128x64_nn", "kind": "kernel", "ts_ns": ts, "dur_ns": kernel_ns,
                            "lane": "GPU 0/Stream 7", "stream": 7, "device": 0, "rank": 0, "type": "volta_sgemm",
                            "correlation": np.arange(len(ts))})
    launches = kernels.assign(name="cudaLaunchKernel", kind="runtime", dur_ns=5_000, lane="Host/Thread 1", stream=-1,
                              device=-1, type="cudaLaunchKernel")
    host = pd.DataFrame({"name": "aten::mm", "kind": "host_op", "ts_ns": starts, "dur_ns": int(step_ms * ms * 0.95),
                         "lane": "Host/Thread 1", "stream": -1, "device": -1, "rank": 0, "type": "aten::mm",
                         "correlation": -1})
    events = pd.concat([kernels, launches, host], ignore_index=True)
    return schema.finish(events, step_frame, meta={"backend": "cuda", "device_name": "V100"})


def test_host_bound_fires_on_a_device_trace_whose_device_waits_and_not_on_a_busy_one():
    idle = npumagic.summarize(_device_trace(0.1))
    busy = npumagic.summarize(_device_trace(0.95))
    [finding] = [f for f in npumagic.advise(idle) if f.category == "host_bound"]
    assert 0.8 <= finding.evidence["free_share"] <= 0.91  # idle 8.1 of the 9.1 ms device window, or of the 10 ms step
    assert npumagic.checklist(idle).bottleneck == "host_bound"
    assert not [f for f in npumagic.advise(busy) if f.category == "host_bound"]


def _cpu_ops_trace(pattern: list[tuple[str, int]], repeats: int, steps: int = 3) -> schema.Trace:
    """CPU operators back to back: ``pattern`` (name, duration ns) ``repeats`` times per step."""
    names = [n for n, _ in pattern] * repeats
    durs = np.array([d for _, d in pattern] * repeats, dtype=np.int64)
    step_ns = int(durs.sum()) + 1000
    rows = []
    for k in range(steps):
        ts = k * step_ns + np.concatenate([[0], np.cumsum(durs)[:-1]])
        rows.append(pd.DataFrame({"name": names, "kind": "host_op", "ts_ns": ts, "dur_ns": durs,
                                  "lane": "Host/Thread 1", "device": -1, "rank": 0, "type": names, "core": "cpu"}))
    step_frame = pd.DataFrame({"rank": 0, "step": range(1, steps + 1), "start_ns": np.arange(steps) * step_ns,
                               "end_ns": np.arange(1, steps + 1) * step_ns})
    return schema.finish(pd.concat(rows, ignore_index=True), step_frame, meta={"backend": "cpu"})


def test_small_ops_where_names_the_users_operators_not_free_view_ops():
    # GIVEN 600 iterations per step of y.t() * a + b on the CPU: two cheap transposes per
    # multiply and add, so the view ops are the most frequent
    trace = _cpu_ops_trace([("aten::t", 800), ("aten::t", 800), ("aten::mul", 3000), ("aten::add", 3000)], 600)
    finding = next(f for f in npumagic.advise(trace) if f.category == "small_ops")
    # THEN the finding points at the multiply and add, not at the transposes
    assert "aten::mul x600" in finding.where and "aten::add x600" in finding.where
    assert "aten::t" not in finding.where
