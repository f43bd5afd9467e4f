"""CUDA expert rules (torch-tb-profiler's recommendations, Nsight Systems' expert rules) on the
genuine shared Kineto traces; where none shows a problem, on the loaded trace changed minimally
(each test says what it changed), and silent on the unchanged one."""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import npumagic
from npumagic.analysis import schema
from npumagic.analysis import thresholds as T

from ..conftest import ASCEND, CUDA, need, shared_summary, shared_trace


# what only an Ascend run can use (npumagic's own %npu... magics aside)
NPU_NAMES = re.compile(r"torch_npu|torch\.npu|torchair|ascend|hccl|TASK_QUEUE_ENABLE|backend=\"npu\"|'npu'", re.I)


def _trace(sample: str) -> npumagic.Trace:
    return shared_trace(next(need(CUDA / sample).glob("*.json.gz")))


@functools.cache
def _sample_rules(sample: str) -> dict[str, npumagic.Finding]:
    return _rules(_trace(sample))


def _rules(trace) -> dict[str, npumagic.Finding]:
    return {f.rule: f for f in npumagic.advise(npumagic.summarize(trace))}


def _rebuild(trace, events: pd.DataFrame) -> npumagic.Trace:
    return schema.finish(events, trace.steps, memory=trace.memory, comm=trace.comm, meta=trace.meta)


def test_tensor_core_eligible_ops_without_tensor_cores_on_a_v100():
    found = _sample_rules("ns_resolution")["tensor_cores"]
    assert 0 < found.evidence["eligible_kernel_share"] < 1
    # a V100 (compute capability 7.0) has no bf16 Tensor Cores: fp16 with loss scaling
    assert "torch.float16" in found.fix and "GradScaler" in found.fix and "bfloat16" not in found.fix


def test_tf32_kernels_use_tensor_cores():
    # alexnet_sync on an A100 runs sm80_xmma_fprop_implicit_gemm_..._tf32 kernels: Tensor Cores in use
    assert "tensor_cores" not in _sample_rules("alexnet_sync")


def test_pageable_copies_are_found():
    found = _sample_rules("alexnet_sync")["pageable_memcpy"]
    assert found.evidence["pageable_copies"] == 16  # "Memcpy HtoD (Pageable -> Device)" x16
    assert "pin_memory=True" in found.fix
    assert "pageable_memcpy" not in _sample_rules("ns_resolution")


def _host_bound_silenced(sample: str) -> dict[str, npumagic.Finding]:
    """The sample's rules with the core host_bound rule silenced: alexnet_sync is one inferred
    43 s step whose device idles 99.8% of it, which host_bound names first (and the GPU rules
    then stay silent); change: the step's idle time set to 20% of its wall."""
    summary = npumagic.summarize(_trace(sample))
    steps = summary.steps.assign(idle_us=summary.steps["wall_us"] * 0.2)
    return {f.rule: f for f in npumagic.advise(dataclasses.replace(summary, steps=steps))}


def test_gpu_gaps_name_what_the_host_runs():
    assert "gpu_gaps" not in _sample_rules("alexnet_sync")  # host_bound names that idle time
    found = _host_bound_silenced("alexnet_sync")["gpu_gaps"]
    assert found.evidence["gaps"] == 18 and found.evidence["largest"][0]["gap_us"] > T.CUDA_GAP_US
    assert found.evidence["largest"][0]["host_op"] == "aten::cudnn_convolution"
    assert "gpu_gaps" not in _sample_rules("ns_resolution")
    nccl = _sample_rules("nccl")
    assert "host_bound" in nccl and "gpu_gaps" not in nccl  # the core rule names that idle time


def test_host_bound_on_a_trace_without_step_marks_says_start_up_counts_and_to_profile_steps_first():
    # alexnet_sync has no ProfilerStep marks: its one "step" is the whole 43 s trace, 30.5 s of
    # it before the first kernel (CUDA start-up), which is no launch overhead to cut
    advice = npumagic.advise(shared_summary(next(need(CUDA / "alexnet_sync").glob("*.json.gz"))))
    found = next(f for f in advice if f.rule == "host_bound")
    assert advice.steps_inferred
    assert "whole trace" in found.title and "start-up" in found.title and "per step" not in found.title
    assert found.fix.startswith("profile steady-state steps") and "CUDA graphs" in found.fix
    head, caveat, first = str(advice).splitlines()[:3]
    assert "no ProfilerStep marks" in caveat and first.startswith("1. [high] host_bound")  # said before the findings
    # a trace with step marks: the finding speaks per step, no caveat
    nccl = npumagic.advise(shared_summary(next(need(CUDA / "nccl").glob("*.json.gz"))))
    assert not nccl.steps_inferred and "no ProfilerStep" not in str(nccl)
    assert "per step" in next(f for f in nccl if f.rule == "host_bound").title


def test_gpu_utilization_when_no_other_rule_explains_the_idle_time():
    found = _host_bound_silenced("alexnet_sync")["gpu_utilization"]
    assert found.evidence["gpu_utilization"] < T.CUDA_GPU_UTIL
    assert "gpu_utilization" not in _sample_rules("alexnet_sync")
    assert "gpu_utilization" not in _sample_rules("nccl")  # the core host_bound rule speaks there
    assert "gpu_utilization" not in _sample_rules("ns_resolution")


def test_explicit_synchronisation_calls():
    found = _sample_rules("nccl")["sync_apis"]
    assert found.evidence["sync_calls"] == 24 and "cudaEventSynchronize x24" in found.title
    assert "sync_apis" not in _sample_rules("ns_resolution")


def test_a_sync_inside_a_torch_operator_is_the_librarys_not_an_explicit_call():
    # GIVEN the AlexNet trace: cudaStreamSynchronize calls, most made inside torch operators
    from npumagic.analysis.rules.cuda import _inside
    from npumagic.analysis.syncs import SYNC_APIS

    ev = _trace("alexnet_sync").events
    calls = ev[ev["kind"].isin(["runtime", "sync"]) & (ev["step"] >= 0) & ev["name"].isin(SYNC_APIS) & (ev["device"] < 0)]
    ops = ev[(ev["kind"] == "host_op") & (ev["device"] < 0)]
    # WHEN the rule asks which lie inside an operator of their own thread
    inside = _inside(calls, ops)
    # THEN it answers as a call-by-call search of the operators does
    by_hand = [bool(((ops["lane"].astype(str) == str(c.lane)) & (ops["ts_ns"] <= c.ts_ns)
                     & (c.ts_ns < ops["ts_ns"] + ops["dur_ns"])).any()) for c in calls.itertuples()]
    assert inside.tolist() == by_hand and 0 < sum(by_hand) < len(by_hand)
    # and the lanes need not share one categorical: the same answer from plain text lanes
    assert _inside(calls.assign(lane=calls["lane"].astype(str)), ops).tolist() == by_hand


def test_synchronous_copies():
    trace = _trace("ns_resolution")
    assert "sync_memcpy" not in _rules(trace)
    ev = trace.events.copy()  # change: the cudaMemcpyAsync runtime calls renamed cudaMemcpy (synchronous)
    ev["name"] = ev["name"].astype(str).replace({"cudaMemcpyAsync": "cudaMemcpy"})
    found = _rules(_rebuild(trace, ev))["sync_memcpy"]
    assert found.evidence["sync_copies"] == (ev["name"].eq("cudaMemcpy") & (ev["step"] >= 0)).sum() > 0


def test_data_parallel_on_two_gpus():
    trace = _trace("ns_resolution")
    assert "data_parallel" not in _rules(trace)  # DistributedDataParallel.forward: fine
    ev = trace.events.copy()
    # change: DistributedDataParallel.forward renamed DataParallel.forward, every other kernel on GPU 1
    ev["name"] = ev["name"].astype(str).replace({"DistributedDataParallel.forward": "DataParallel.forward"})
    kernels = np.flatnonzero((ev["kind"] == "kernel").to_numpy())
    ev.loc[kernels[::2], "device"] = 1
    found = _rules(_rebuild(trace, ev))["data_parallel"]
    assert found.evidence["devices"] == 2 and "DistributedDataParallel" in found.fix


def test_dataloader_between_five_and_ten_percent():
    trace = _trace("ns_resolution")
    assert "cuda_dataloader" not in _rules(trace)
    steps = trace.steps.sort_values("start_ns")
    first = steps.iloc[0]
    wall = int(steps["end_ns"].sum() - steps["start_ns"].sum())
    # change: one DataLoader wait of 7% of the profiled step time at the start of the first step
    host = trace.events[trace.events["device"] < 0].iloc[[0]].astype(object)
    wait = host.assign(name="enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", kind="dataloader",
                       ts_ns=int(first["start_ns"]), dur_ns=int(0.07 * wall))
    events = pd.concat([trace.events.astype(object), wait], ignore_index=True)
    summary = npumagic.summarize(_rebuild(trace, events))
    found = {f.rule: f for f in npumagic.advise(summary)}["cuda_dataloader"]
    # 7% of the host's step time; the share is of the device step windows, which the GPU's lag
    # makes longer than the host's
    device_wall_ns = summary.steps["wall_us"].sum() * 1e3
    assert found.evidence["dataloader_share"] == pytest.approx(0.07 * wall / device_wall_ns, abs=0.002)
    assert 0.05 < found.evidence["dataloader_share"] < 0.10
    assert "num_workers" in found.fix


def test_cuda_communication_when_overlapped():
    trace = _trace("nccl")
    summary = npumagic.summarize(trace)
    assert summary.share("communication_us") < T.CUDA_COMM_SHARE and "cuda_communication" not in _rules(trace)
    ev = trace.events.copy()
    # change: NCCL kernels stretched 3x (their starts kept), so collectives exceed 10% of the step
    comm = (ev["kind"] == "comm").to_numpy()
    ev.loc[comm, "dur_ns"] = ev.loc[comm, "dur_ns"] * 3
    changed = npumagic.summarize(_rebuild(trace, ev))
    found = {f.rule: f for f in npumagic.advise(changed)}
    assert changed.share("communication_us") > T.CUDA_COMM_SHARE
    assert "cuda_communication" in found or "communication" in found  # exactly one of the two speaks
    assert not ("cuda_communication" in found and "communication" in found)


@pytest.mark.parametrize("sample", ["ns_resolution", "nccl", "alexnet_sync", "rocm_mi250"])
def test_gpu_advice_names_no_npu_api(sample):
    for finding in npumagic.advise(npumagic.analyze(next(need(CUDA / sample).glob("*.json.gz")))):
        if finding.rule == "sync":
            continue  # the core sync rule (issue 10's) names both backends' synchronize()
        assert not NPU_NAMES.search(finding.fix), (finding.rule, finding.fix)


def test_gpu_rules_stay_silent_on_ascend_and_ascend_rules_on_gpus():
    from npumagic.analysis.rules import REGISTRY, run_rules

    npu_only = {r.id for r in REGISTRY if r.backends == {"npu"}}
    cuda_only = {r.id for r in REGISTRY if r.backends == {"cuda"}}
    ascend = {f.rule for f in run_rules(shared_summary(ASCEND / "level1" / "rank0_ascend_pt"))}
    gpu = {f.rule for s in ("ns_resolution", "nccl", "alexnet_sync")
           for f in run_rules(npumagic.summarize(_trace(s)))}
    assert ascend and gpu and not ascend & cuda_only and not gpu & npu_only


def test_amd_gpus_get_no_tensor_core_advice():
    # computeMajor 9 on an MI250 is AMD's gfx9, not CUDA compute capability
    assert "tensor_cores" not in _sample_rules("rocm_mi250")


def test_a_real_cpu_run_gets_no_gpu_or_npu_rule(tmp_path: Path):
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    model = torch.nn.Linear(64, 64)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3),
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path))) as prof:
        for _ in range(4):
            model(torch.randn(32, 64)).sum().backward()
            prof.step()
    from npumagic.analysis.rules import REGISTRY

    device_rules = {r.id for r in REGISTRY if r.backends is not None and "cpu" not in r.backends}
    advice = npumagic.advise(npumagic.analyze(tmp_path))
    assert not {f.rule for f in advice} & device_rules
    assert not any(NPU_NAMES.search(f.fix) or "cuda" in f.fix.lower() for f in advice)


def test_long_times_read_with_thousands_separators_in_every_line():
    # alexnet_sync's steps are 43 s long: the verdict and every finding write 43,283.46 ms alike
    summary = shared_summary(need(CUDA / "alexnet_sync"))
    lines = [text for _, text in npumagic.checklist(summary).steps] + [f.title for f in npumagic.advise(summary)]
    assert any(re.search(r"\d,\d{3}\.\d\d ms", line) for line in lines)
    assert not [line for line in lines if re.search(r"\d{4}\.\d+ ms", line)]


def test_a_compute_bound_gpu_already_in_bf16_is_not_told_to_turn_on_mixed_precision():
    # h100_qwen: its GEMMs (sm90_xmma_gemm_bf16...) and flash attention already run in bf16
    qwen = shared_summary(CUDA / "tracelens" / "h100_qwen")
    verdict = npumagic.checklist(qwen)
    assert verdict.bottleneck == "compute_bound"
    assert "autocast" not in verdict.next_change and "already runs in reduced precision (100%" in verdict.next_change
    # resnet50 in fp32 (sgemm, implicit convolutions): mixed precision is still the first fix
    fp32 = shared_summary(CUDA / "legacy_kineto" / "resnet50_nw4.pt.trace.json.gz")
    assert "torch.autocast('cuda'" in npumagic.checklist(fp32).next_change
