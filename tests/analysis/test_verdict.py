"""One verdict: the checklist's Classify and Next change and the advice's first line are the same
answer on every shared input; a blocking call costs the device idle time it causes and is named by
the user's call; a run with nothing to judge gets no bottleneck; fixes fit the run's backend."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

import npumagic
from npumagic.analysis import schema
from npumagic.analysis import thresholds as T
from npumagic.analysis import whatif
from npumagic.analysis.advice import advise_run, compute_bound_fix
from npumagic.analysis.compare import compare
from npumagic.analysis.run_facts import RunFacts
from npumagic.analysis.trust import caveat, contention
from npumagic.render.text import advice_text

from ..conftest import ASCEND, CUDA, shared_summary

SHARED_INPUTS = [
    ASCEND / "level0", ASCEND / "level1", ASCEND / "level2", ASCEND / "db" / "level1",
    ASCEND / "msinsight_2024" / "db_level0", ASCEND / "msinsight_2024" / "text_level0", ASCEND / "partial" / "job2",
    CUDA / "alexnet_sync", CUDA / "nccl", CUDA / "ns_resolution", CUDA / "rocm_mi250",
    CUDA / "legacy_kineto" / "resnet50_nw0.pt.trace.json.gz", CUDA / "legacy_kineto" / "resnet50_nw4.pt.trace.json.gz",
    CUDA / "legacy_kineto" / "resnet50_autograd_api_nw0.pt.trace.json.gz",
    CUDA / "tracelens" / "h100_qwen", CUDA / "tracelens" / "h100_owlv2", CUDA / "tracelens" / "b200_eager",
    CUDA / "tracelens" / "mi300_bert", CUDA / "hta_more" / "cpu_only_2024", CUDA / "hta_more" / "cupti_profiler",
    CUDA / "hta_more" / "mtia_trace_single_rank", CUDA / "hta_more" / "cuda_event_sync_multi_stream",
    CUDA / "kineto_cycles" / "tb_test_nw0_folder",
]


@pytest.mark.parametrize("path", SHARED_INPUTS, ids=lambda p: "/".join(p.parts[-2:]))
def test_the_checklist_and_the_advice_give_one_answer(path):
    summary = shared_summary(path)
    verdict = npumagic.checklist(summary)
    advice = advise_run(summary, low=False)  # what %npuadvise shows by default
    lead = advice.lead
    assert verdict.bottleneck == lead.category
    assert verdict.next_change == lead.fix
    assert verdict.steps[1][1].endswith(lead.title)
    first = advice_text(advice).splitlines()[0]
    reaching = [f for f in advice.findings if whatif.reaches(summary, f)]
    if lead.finding is not None:  # the first finding whose fix can save 5% of the step is the verdict
        assert reaching[0].title == lead.title and lead.finding.predicted_interval[1] >= whatif.threshold_ms(summary)
    else:  # no fix can: the advice's first line says what the checklist says
        assert lead.title in first
        assert reaching == []


def test_a_busy_device_is_not_sync_bound_for_the_host_time_a_sync_blocks():
    # h100_qwen: torch.cuda.synchronize() blocks the host 14.1 ms of a 35 ms step, while the GPU
    # computes 90% of the step; it idles 0.72 ms during that call
    summary = shared_summary(CUDA / "tracelens" / "h100_qwen")
    call = summary.blocking.set_index("call").loc["torch.cuda.synchronize()"]
    assert call["blocked_us"] == pytest.approx(14102.53) and call["idle_us"] == pytest.approx(723.496)
    advice = npumagic.advise(summary)
    assert all(f.impact < T.VERDICT_MIN_IMPACT for f in advice.findings if f.category == "sync")
    assert npumagic.checklist(summary).bottleneck == "compute_bound"


def _trace(rows, steps=((1, 0, 10_000),), backend="cuda"):
    columns = ["name", "kind", "ts_ns", "dur_ns", "lane", "device", "stream", "correlation", "source"]
    events = pd.DataFrame(rows, columns=columns).assign(rank=0)
    return schema.finish(events, pd.DataFrame([{"rank": 0, "step": s, "start_ns": a, "end_ns": b} for s, a, b in steps]),
                         meta={"backend": backend})


HOST, GPU = "python/Thread 1", "GPU 0/Stream 7"


def test_an_item_copying_to_pageable_memory_is_named_as_item_at_its_line():
    # GIVEN .item() whose copy to the host goes to pageable memory (an async memcpy the host waits
    # for, no cudaStreamSynchronize at all), after 1 ms of kernels; the GPU then idles 3 ms
    trace = _trace([
        ("train.py(40): step", "python", 0, 10_000_000, HOST, -1, -1, -1, ""),
        ("cudaLaunchKernel", "runtime", 100_000, 10_000, HOST, -1, -1, 1, ""),
        ("aten::item", "host_op", 200_000, 4_000_000, HOST, -1, -1, -1, ""),
        ("aten::_local_scalar_dense", "host_op", 210_000, 3_900_000, HOST, -1, -1, -1, ""),
        ("cudaMemcpyAsync", "runtime", 220_000, 3_800_000, HOST, -1, -1, 2, ""),
        ("gemm", "kernel", 150_000, 1_000_000, GPU, 0, 7, 1, ""),
        ("Memcpy DtoH (Device -> Pageable)", "memcpy", 1_150_000, 5_000, GPU, 0, 7, 2, ""),
        ("cudaLaunchKernel", "runtime", 5_000_000, 10_000, HOST, -1, -1, 3, ""),  # the next step
        ("gemm", "kernel", 5_100_000, 1_000_000, GPU, 0, 7, 3, ""),
    ], steps=((1, 0, 5_000_000), (2, 5_000_000, 10_000_000)))
    summary = npumagic.summarize(trace)
    top = summary.blocking.iloc[0]
    assert top["call"].startswith(".item()") and top["source"] == "train.py(40): step"
    # blocked for aten::item's 4000 us; the GPU works 950 us of it (the gemm, then the 5 us copy)
    assert top["blocked_us"] == pytest.approx(4000.0) and top["idle_us"] == pytest.approx(4000.0 - 955.0)
    sync = next(f for f in npumagic.advise(summary) if f.category == "sync")
    assert sync.title.startswith(".item()") and sync.where == "train.py(40): step"
    assert sync.impact == pytest.approx(3045.0 / summary.total_wall_us)
    assert "synchronize()" not in sync.fix.split("avoid")[0]  # not told to drop a call the code never makes


def test_cudnn_autotuning_syncs_inside_a_convolution_are_not_the_users():
    trace = _trace([
        ("aten::cudnn_convolution", "host_op", 0, 5_000_000, HOST, -1, -1, -1, ""),
        ("cudaStreamSynchronize", "sync", 100_000, 4_000_000, HOST, -1, -1, -1, ""),
        ("cudaLaunchKernel", "runtime", 50_000, 10_000, HOST, -1, -1, 1, ""),
        ("conv", "kernel", 60_000, 100_000, GPU, 0, 7, 1, ""),
        ("cudaLaunchKernel", "runtime", 5_100_000, 10_000, HOST, -1, -1, 3, ""),
        ("gemm", "kernel", 5_200_000, 4_000_000, GPU, 0, 7, 3, ""),
    ], steps=((1, 0, 10_000_000),))
    summary = npumagic.summarize(trace)
    assert bool(summary.blocking.iloc[0]["library"])
    advice = npumagic.advise(summary)
    assert not [f for f in advice if f.rule == "sync_apis"]  # not reported as an explicit synchronize() call
    sync = next(f for f in advice if f.category == "sync")
    assert "inside a library operator" in sync.fix


def test_a_run_without_steps_gets_no_verdict():
    summary = shared_summary(CUDA / "nccl")
    empty = dataclasses.replace(summary, steps=summary.steps.head(0))
    verdict = npumagic.checklist(empty)
    assert verdict.bottleneck == "undetermined" and "no profiled steps" in verdict.steps[1][1]


def test_a_trace_without_device_activity_records_gets_no_verdict():
    # a CUPTI range-profiling trace: CUDA runtime calls, no kernels or copies recorded
    summary = shared_summary(CUDA / "hta_more" / "cupti_profiler")
    verdict = npumagic.checklist(summary)
    assert verdict.bottleneck == "undetermined"
    assert "no device activity records" in verdict.steps[1][1] and "ProfilerActivity.CUDA" in verdict.next_change


@pytest.mark.parametrize("backend", ["npu", "cuda", "rocm", "xpu", "mtia", "hpu"])
def test_every_device_backend_gets_a_compute_fix_of_its_own_not_the_cpus(backend):
    fix = compute_bound_fix(backend)
    assert "autocast('cpu'" not in fix and "set_num_threads" not in fix


def test_an_accelerator_without_cuda_graphs_is_not_told_to_use_them():
    host = next(f for f in npumagic.advise(shared_summary(CUDA / "hta_more" / "mtia_trace_single_rank"))
                if f.category == "host_bound")
    assert "CUDA graphs" not in host.fix and "torch.compile(model)" in host.fix


def test_blackwell_tensor_core_kernels_count_as_tensor_cores():
    advice = npumagic.advise(shared_summary(CUDA / "tracelens" / "b200_eager"))
    assert not [f for f in advice if f.rule == "tensor_cores"]


def test_an_inference_run_that_fills_memory_gets_no_training_memory_fix():
    summary = shared_summary(CUDA / "tracelens" / "h100_qwen")  # vLLM serving: no backward pass
    memory = pd.DataFrame([{"device": "GPU 0", "peak_allocated_bytes": 76e9, "peak_reserved_bytes": 77e9,
                            "capacity_bytes": 80e9}]).reindex(columns=summary.memory.columns)
    full = dataclasses.replace(summary, memory=memory)
    found = [f for f in npumagic.advise(full) if f.rule == "memory_capacity"]
    assert found and found[0].impact == 0 and "checkpoint" not in found[0].fix and "KV cache" in found[0].fix


def test_host_gaps_filled_by_cpu_work_are_not_answered_with_cuda_graphs():
    # nccl: under the GPU's largest gaps the host flattens tensors on the CPU, launching nothing
    host = next(f for f in npumagic.advise(shared_summary(CUDA / "nccl")) if f.category == "host_bound")
    assert "aten::unflatten_dense_tensors" in host.title
    # ... DDP's gradient-bucket packing: a bucketing fix, neither CUDA graphs nor the Dataset
    assert "gradient_as_bucket_view=True" in host.fix and "CUDA graphs" not in host.fix and "into the Dataset" not in host.fix
    # mi300_bert: the gaps are launches of short operators: launch overhead, where graphs help
    host = next(f for f in npumagic.advise(shared_summary(CUDA / "tracelens" / "mi300_bert")) if f.category == "host_bound")
    assert "CUDA graphs" in host.fix and not host.fix.startswith("the host is busy with CPU work")


def _host_samples(summary, others_core_pct: float, wait_pct: float, own_pct: float = 90.0, cores: int = 2):
    n = len(summary.steps)
    host = pd.DataFrame({"step": summary.steps["step"], "process_cpu_pct": own_pct, "main_thread_cpu_pct": own_pct,
                         "rss_bytes": 1e9, "workers": 0, "worker_cpu_pct_mean": float("nan"),
                         "worker_cpu_pct_max": float("nan"), "cores": cores,
                         "cores_busy_pct": (own_pct + others_core_pct) / cores, "cores_idle": 0,
                         "main_thread_wait_pct": wait_pct}, index=range(n))
    return dataclasses.replace(summary, host=host)


def test_a_contended_run_says_so_and_its_comparison_is_not_significant(trust_checked):
    base = shared_summary(CUDA / "ns_resolution")
    # the other core fully used by another process, and this thread never waiting: not contended
    quiet, busy = _host_samples(base, 100.0, 1.0), _host_samples(base, 110.0, 30.0)
    assert not contention(quiet)["contended"] and contention(busy)["contended"]
    assert "the profiled thread waited for a core 30% of the time" in caveat(busy)
    # without run-queue figures (not Linux), the machine's load decides
    nowait = dataclasses.replace(busy, host=busy.host.assign(main_thread_wait_pct=float("nan")))
    assert "other processes kept 1.1 cores busy" in caveat(nowait)
    assert "unreliable" in npumagic.checklist(busy).steps[0][1]
    slower = dataclasses.replace(busy, steps=busy.steps.assign(wall_us=busy.steps["wall_us"] * 3))
    assert compare(quiet, dataclasses.replace(quiet, steps=slower.steps)).significant  # 3x slower, both quiet
    cmp = compare(quiet, slower, "quiet", "busy")
    assert not cmp.significant
    assert cmp.sentence().startswith("busy looks 3.0x slower than quiet (median step quiet ")
    assert "not called significant: busy's step times are unreliable: the profiled thread waited for a core 30%" in cmp.sentence()
    # and it says how to decide anyway on the shared machine: the two variants interleaved in one kernel
    assert cmp.sentence().endswith("%npuab STEP_A STEP_B (two zero-argument functions, one training step each) "
                                   "alternates them in ABBA blocks, so a neighbour's load hits both alike; or profile "
                                   "both again on a quiet machine")


def test_profiling_inflation_is_the_profiled_steps_against_the_unprofiled_ones():
    base = shared_summary(CUDA / "ns_resolution")
    timed = RunFacts(step_times={"profiled": [1100.0, 1080.0, 1120.0, 1090.0],
                                 "unprofiled": [1000.0, 990.0, 1010.0, 1005.0, 995.0]})
    baseline = npumagic.checklist(base, facts=timed).steps[0][1]
    assert "profiling inflated the step by 10% (95% CI" in baseline
    assert "inflated" not in npumagic.checklist(base).steps[0][1]  # nothing to judge by: nothing said


def test_a_dataloader_wait_costs_the_device_idle_time_it_causes():
    # resnet50_nw0: the host waits 31% of each step for a batch, while the GPU still runs the last
    # step's queue for a third of that wait: fixing the loader saves the 21% the GPU idles
    summary = shared_summary(CUDA / "legacy_kineto" / "resnet50_nw0.pt.trace.json.gz")
    loader = next(f for f in npumagic.advise(summary) if f.rule == "dataloader")
    assert loader.impact == pytest.approx(summary.share("idle_dataloader_us")) and loader.impact < summary.share("dataloader_us")
    assert "the device idles 31.23 ms of it" in loader.title


def test_verify_says_utilisation_as_a_percentage_and_times_in_ms():
    base = shared_summary(CUDA / "ns_resolution")
    steps = base.steps.assign(device_util=base.steps["device_util"] / 2,
                              computing_us=base.steps["computing_us"] * 2)
    verify = npumagic.checklist(dataclasses.replace(base, steps=steps), baseline=base).steps[3][1]
    util = base.median_step_util
    assert f"device busy {util:.0%}->{util / 2:.0%} (worse)" in verify, verify
    assert " ms (worse)" in verify  # the computing time, in its unit
    assert "not recorded: this output was only read" in npumagic.checklist(base).steps[4][1]
