"""The Kineto reader on genuine GPU traces (V100, A100 + NCCL, A100 + cuda_sync)."""

from __future__ import annotations

import gzip
import json

import pytest

import npumagic

from ..conftest import CUDA, need


@pytest.fixture(scope="module")
def v100():
    return npumagic.load(need(CUDA / "ns_resolution"))


def test_profiler_steps_become_the_step_table(v100):
    assert v100.steps["step"].tolist() == [101, 102, 103, 104, 105]
    assert v100.meta["backend"] == "cuda"
    assert v100.meta["device_name"] == "Tesla V100-SXM2-32GB"


def test_every_kernel_and_copy_is_read(v100):
    raw = json.load(gzip.open(next((CUDA / "ns_resolution").glob("*.gz"))))["traceEvents"]
    kernels = sum(1 for e in raw if e.get("cat") == "kernel" and e.get("ph") == "X")
    copies = sum(1 for e in raw if e.get("cat") in ("gpu_memcpy", "gpu_memset"))
    kinds = v100.events["kind"].value_counts()
    assert kinds["kernel"] + kinds["comm"] == kernels
    assert kinds["memcpy"] == copies


def test_device_events_keep_their_stream_and_launch_correlation(v100):
    kernels = v100.events[v100.events["kind"] == "kernel"]
    assert (kernels["stream"] >= 0).all()
    assert (kernels["correlation"] > 0).all()
    assert kernels["lane"].astype(str).str.match(r"GPU \d+/Stream \d+").all()


def test_float_timestamps_keep_sub_microsecond_precision(v100):
    raw = json.load(gzip.open(next((CUDA / "ns_resolution").glob("*.gz"))))["traceEvents"]
    first = next(e for e in raw if e.get("name", "").startswith("ProfilerStep#101") and e.get("cat") == "user_annotation")
    step = v100.steps.iloc[0]
    assert abs(step["start_ns"] - first["ts"] * 1000) < 1  # no 256 ns float64 rounding of ts*1000


def test_nccl_kernels_are_communication():
    summary = npumagic.analyze(need(CUDA / "nccl"))
    assert "AllReduce" in set(summary.comm["op"])
    assert summary.steps["communication_us"].gt(0).all()
    assert (summary.steps["overlapped_us"] <= summary.steps["communication_us"]).all()


def test_cuda_syncs_are_counted():
    trace = npumagic.load(need(CUDA / "alexnet_sync"))
    syncs = trace.events[trace.events["kind"] == "sync"]
    device_syncs = syncs[syncs["device"] >= 0]
    assert len(device_syncs) == 41  # the trace's cuda_sync events
    summary = npumagic.summarize(trace)
    assert summary.syncs["count"].sum() > 0
    assert summary.steps["sync_us"].iloc[0] > 0


def test_a_trace_without_profiler_steps_is_one_step():
    trace = npumagic.load(need(CUDA / "alexnet_sync"))
    assert len(trace.steps) == 1
    assert trace.meta["steps_inferred"] == [0]
