"""The device-time model on every shared trace: launch-attributed step windows, the invariants,
the HTA-style temporal breakdown (checked against HolisticTraceAnalysis itself) and the rules
that read them."""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import npumagic
from npumagic.analysis import schema
from npumagic.cli import main

from .. import conftest
from ..conftest import ASCEND_RANKS, CUDA, examples, need, sampled, shared_summary, shared_trace

KINETO = {
    "v100": CUDA / "ns_resolution",
    "a100_nccl": CUDA / "nccl",
    "a100_sync": CUDA / "alexnet_sync",
    "mi250_rocm": CUDA / "rocm_mi250",
    "legacy_nw0": CUDA / "legacy_kineto" / "resnet50_nw0.pt.trace.json.gz",
    "legacy_nw4": CUDA / "legacy_kineto" / "resnet50_nw4.pt.trace.json.gz",
    "legacy_autograd": CUDA / "legacy_kineto" / "resnet50_autograd_api_nw0.pt.trace.json.gz",
}
ASCEND = {f"{p.parent.name}_{p.name}": p for p in ASCEND_RANKS}
# traces checked against HTA's temporal breakdown only (not the every-trace invariants here)
HTA_ONLY = {"event_sync": CUDA / "hta_more" / "cuda_event_sync_multi_stream",
            "mtia": CUDA / "hta_more" / "mtia_trace_single_rank"}
# one trace of each kind in the quick loop (every one under --slow): a current, a legacy, a ROCm and
# an NCCL Kineto trace and a torch_npu rank
QUICK = ["a100_sync", "legacy_nw4", "mi250_rocm", "a100_nccl", "level1_rank0_ascend_pt"]
EVERY = QUICK + [name for name in [*KINETO, *ASCEND] if name not in QUICK]
def _trace(name: str) -> schema.Trace:
    return shared_trace({**KINETO, **ASCEND, **HTA_ONLY}[name])


def _cpu_trace(tmp_path_factory) -> schema.Trace:
    """A real CPU capture: a small model, a schedule, a Python loop between steps."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    out = tmp_path_factory.mktemp("cpu_trace")
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=4),
                 on_trace_ready=tensorboard_trace_handler(str(out))) as prof:
        for _ in range(5):
            loss = torch.nn.functional.mse_loss(model(torch.randn(16, 32)), torch.randn(16, 1))
            loss.backward()
            opt.step()
            opt.zero_grad()
            loss.item()
            sum(i * i for i in range(20000))
            prof.step()
    return npumagic.load(out)


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory):
    return _cpu_trace(tmp_path_factory)


def _check_invariants(steps, label):
    tol = 1e-6  # us: float rounding of ns/1000
    assert (steps["wall_us"] >= 0).all(), label
    assert (steps["computing_us"] <= steps["busy_us"] + tol).all(), label
    assert (steps["busy_us"] <= steps["wall_us"] + tol).all(), label
    assert (steps["device_util"].dropna() <= 1 + 1e-9).all(), label
    parts = steps["computing_us"] + steps["comm_not_overlapped_us"]
    assert (parts <= steps["busy_us"] + tol).all(), label  # disjoint parts of the busy time
    assert (steps["busy_us"] <= parts + steps["memcpy_us"] + tol).all(), label  # nothing else is busy
    assert np.allclose(steps["busy_us"] + steps["idle_us"], steps["wall_us"]), label
    assert np.allclose(steps["comm_not_overlapped_us"] + steps["overlapped_us"], steps["communication_us"]), label
    assert (steps[["communication_us", "memcpy_us", "idle_us", "free_us", "overlapped_us"]] >= -tol).all().all(), label


def _window(trace: schema.Trace, lo: float, hi: float) -> schema.Trace:
    """The trace as a capture of the fraction [lo, hi] of its span would have recorded it:
    events outside dropped, steps cut to the window (a truncated or shorter capture)."""
    ev = trace.events
    t0, t1 = int(ev["ts_ns"].min()), int((ev["ts_ns"] + ev["dur_ns"]).max())
    a, b = t0 + int((t1 - t0) * lo), t0 + int((t1 - t0) * hi)
    keep = (ev["ts_ns"] >= a) & (ev["ts_ns"] + ev["dur_ns"] <= b)
    steps = trace.steps[(trace.steps["end_ns"] > a) & (trace.steps["start_ns"] < b)]
    steps = steps.assign(start_ns=steps["start_ns"].clip(lower=a), end_ns=steps["end_ns"].clip(upper=b))
    meta = {k: v for k, v in trace.meta.as_dict().items() if k not in ("steps_inferred", "steps_from")}
    return schema.finish(ev[keep].drop(columns=["step"]), steps, memory=trace.memory, comm=trace.comm, meta=meta)


@pytest.mark.parametrize("name", sampled(EVERY, keep=len(QUICK)))
def test_invariants_hold_on_every_step_of_every_shared_trace(name):
    summary = npumagic.summarize(_trace(name))
    for rank, s in summary.per_rank.items():
        assert len(s.steps)
        _check_invariants(s.steps, (name, rank))


def test_invariants_hold_on_a_real_cpu_capture(cpu_trace):
    _check_invariants(npumagic.summarize(cpu_trace).steps, "cpu")


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from((EVERY if conftest.FULL else QUICK) + ["cpu"]),
       lo=st.floats(0, 0.6), width=st.floats(0.05, 1.0))
def test_invariants_hold_on_any_window_of_any_trace(cpu_trace, name, lo, width):
    trace = cpu_trace if name == "cpu" else _trace(name)
    cut = _window(trace, lo, min(lo + width, 1.0))
    if cut.events.empty:
        return
    for rank, s in npumagic.summarize(cut).per_rank.items():
        _check_invariants(s.steps, (name, lo, width, rank))


# -- the step model on genuine GPU traces --------------------------------------------------
def test_device_work_belongs_to_the_step_that_launched_it():
    ev = _trace("v100").events
    launches = ev[(ev["kind"] == "runtime") & (ev["correlation"] >= 0)].drop_duplicates("correlation")
    kernels = ev[ev["kind"] == "kernel"].merge(launches[["correlation", "step"]], on="correlation",
                                               suffixes=("", "_launch"))
    assert len(kernels) > 4000
    assert (kernels["step"] == kernels["step_launch"]).all()
    # the V100 runs a step behind its host: most kernels run after their host step ended
    steps = _trace("v100").steps.set_index("step")
    late = kernels["ts_ns"].to_numpy() >= steps.loc[kernels["step"], "end_ns"].to_numpy()
    assert late.mean() > 0.5


def test_a_gpu_bound_trace_has_no_step_with_more_computing_than_time():
    steps = npumagic.summarize(_trace("v100")).steps
    assert (steps["device_util"] <= 1).all()
    # steady state: every step's device window is the same ~95.6 ms, the first also holds start-up
    assert steps["wall_us"].iloc[1:].to_numpy() == pytest.approx(95_600, rel=0.01)
    assert npumagic.summarize(_trace("v100")).device_util > 0.95


def test_copies_are_device_busy_time_not_idle():
    steps = npumagic.summarize(_trace("v100")).steps
    assert (steps["memcpy_us"] > 500).all()
    assert (steps["busy_us"] > steps["computing_us"] + 100).all()


def test_rocm_trace_keeps_its_hip_kernels_in_its_step():
    steps = npumagic.summarize(_trace("mi250_rocm")).steps.set_index("step")
    assert steps.loc[1, "computing_us"] > 0
    assert steps.loc[1, "memcpy_us"] > 0


# -- temporal breakdown against HolisticTraceAnalysis 0.5.0 ----------------------------------
_hta_results: dict[str, object] = {}


def _hta_breakdown(name: str, tmp_path_factory):
    """HTA's own temporal breakdown of one shared CUDA trace (computed once per trace, so a test
    worker that runs one case does not parse every trace)."""
    hta = pytest.importorskip("hta.trace_analysis", reason="need HolisticTraceAnalysis (the extra npumagic[peers]) — "
                                                           "pip install -e '.[peers]'")
    if name not in _hta_results:
        logging.getLogger("hta").setLevel(logging.ERROR)
        src = need({**KINETO, **HTA_ONLY}[name])
        files = [src] if src.is_file() else sorted(src.glob("*.json*"))
        folder = tmp_path_factory.mktemp(name)
        for f in files:
            (folder / f.name).symlink_to(f)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _hta_results[name] = hta.TraceAnalysis(trace_dir=str(folder)).get_temporal_breakdown(visualize=False)
    return _hta_results[name]


@pytest.mark.slow  # HTA takes ~4 s a trace
@pytest.mark.parametrize("name", [*KINETO, *HTA_ONLY])
def test_temporal_breakdown_agrees_with_hta_within_one_point(tmp_path_factory, name):
    theirs = _hta_breakdown(name, tmp_path_factory).set_index("rank")
    ours = npumagic.summarize(_trace(name)).temporal.set_index("rank")
    assert list(ours.index) == list(theirs.index)
    for rank in ours.index:
        assert ours.loc[rank, "idle_pct"] == pytest.approx(theirs.loc[rank, "idle_time_pctg"], abs=1.0)
        assert ours.loc[rank, "compute_pct"] == pytest.approx(theirs.loc[rank, "compute_time_pctg"], abs=1.0)
        assert ours.loc[rank, "non_compute_pct"] == pytest.approx(theirs.loc[rank, "non_compute_time_pctg"], abs=1.0)
        assert ours.loc[rank, "window_us"] == pytest.approx(theirs.loc[rank, "kernel_time(us)"], rel=0.01)


def test_temporal_parts_add_up_to_the_window():
    t = npumagic.summarize(_trace("a100_nccl")).temporal.iloc[0]
    assert t["idle_us"] + t["compute_us"] + t["non_compute_us"] == pytest.approx(t["window_us"])
    assert t["idle_pct"] + t["compute_pct"] + t["non_compute_pct"] == pytest.approx(100)


def test_device_syncs_without_a_stream_are_no_device_time():
    # GIVEN a trace whose CUPTI sync records include Event Sync and Context Sync (stream -1: the
    # host waits, no stream does); the first Event Sync comes 0.05 ms before any kernel or memset
    trace = _trace("event_sync")
    device = trace.events[(trace.events["device"] >= 0) & (trace.events["stream"] >= 0)]
    first, last = device["ts_ns"].min(), (device["ts_ns"] + device["dur_ns"]).max()
    # WHEN its temporal breakdown is taken; THEN the window is the span of the work on streams
    # (HTA 0.5.0 says 19,506 us, idle 98.08%), not 19,558 us from the first Event Sync
    t = npumagic.summarize(trace).temporal.iloc[0]
    assert t["window_us"] == pytest.approx((last - first) / 1e3) == pytest.approx(19_506)
    assert t["idle_pct"] == pytest.approx(98.08, abs=0.01)


CYCLES = CUDA / "kineto_cycles" / "tb_test_nw0_folder"


def test_profiling_cycles_in_one_folder_are_each_their_own_timeline():
    # GIVEN one worker profiled in two cycles (a repeating schedule writes one file per cycle)
    folder = need(CYCLES)
    alone = [npumagic.analyze(f) for f in sorted(folder.glob("*.json.gz"))]
    # WHEN the folder is read as one run
    both = npumagic.analyze(folder)
    # THEN every step is what its own file says (step 10 was 469 s: its window ran to step 16's
    # first kernel in the other file), and the temporal window is the two cycles' windows summed
    cols = ["step", "wall_us", "computing_us", "busy_us", "idle_us"]
    expected = pd.concat([s.steps[cols] for s in alone], ignore_index=True)
    pd.testing.assert_frame_equal(both.steps[cols].reset_index(drop=True), expected)
    assert both.temporal.iloc[0]["window_us"] == pytest.approx(sum(s.temporal.iloc[0]["window_us"] for s in alone))
    assert both.temporal.iloc[0]["idle_us"] == pytest.approx(sum(s.temporal.iloc[0]["idle_us"] for s in alone))


def test_the_time_between_profiling_cycles_is_no_gpu_gap():
    advice = npumagic.advise(npumagic.analyze(need(CYCLES)))
    gaps = [f for f in advice.findings if f.rule == "gpu_gaps"]
    assert gaps and max(g["gap_us"] for g in gaps[0].evidence["largest"]) < 1e6  # the 469 s between the files
    assert not any(f.category == "host_bound" and "per step (100%)" in f.title for f in advice.findings)


def test_no_device_no_temporal_rows(cpu_trace):
    assert npumagic.summarize(cpu_trace).temporal.empty


# -- what the user is told ------------------------------------------------------------------
@pytest.mark.parametrize("name", ["resnet50_nw0", "resnet50_nw4"])
def test_cli_reads_legacy_traces_with_their_steps(name, capsys):
    path = need(CUDA / "legacy_kineto" / f"{name}.pt.trace.json.gz")
    assert main(["analyze", str(path), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [s["step"] for s in payload["steps"]] == [5, 6, 7, 8, 9, 10]
    if name == "resnet50_nw0":  # num_workers=0: the GPU waits ~30% of each step for the next batch
        assert payload["verdict"]["bottleneck"] == "dataloader"


@pytest.mark.parametrize("name, top", [("a100_sync", "cudaDeviceSynchronize"), ("a100_nccl", "cudaEventSynchronize"),
                                       ("legacy_autograd", "cudaEventSynchronize")])
def test_syncs_are_ranked_by_blocked_host_time_not_count(name, top):
    syncs = npumagic.summarize(_trace(name)).syncs
    # cudaStreamWaitEvent only orders streams (the host does not wait): 34, 84 and 914 calls here
    assert "cudaStreamWaitEvent" not in set(syncs["name"])
    assert syncs["total_us"].is_monotonic_decreasing
    assert syncs.iloc[0]["name"] == top  # on a100_sync: 5 calls blocking 0.94 ms beat 16 blocking 0.56 ms


def test_a_sync_costs_the_device_idle_it_causes_not_the_host_time_it_blocks():
    summary = shared_summary(ASCEND_RANKS[3])  # level1 rank1
    # 7 stream syncs block the host 93 ms of the 152 ms step, but the device runs the all-reduce
    # meanwhile: it idles 6.8 ms of that time, so no sync finding blames the 93 ms
    top = summary.blocking.iloc[0]
    assert top["call"].startswith("stream.synchronize()") and top["count"] == 7
    assert top["blocked_us"] == pytest.approx(93091.05) and top["idle_us"] == pytest.approx(6829.924)
    assert summary.syncs.set_index("name").loc["aten::item", "count"] > 7
    assert not [f for f in npumagic.advise(summary) if f.category == "sync"]
    assert summary.steps["idle_sync_us"].sum() < 0.1 * summary.total_wall_us


def test_the_verdict_never_comes_from_a_finding_with_nothing_at_stake():
    summary = npumagic.summarize(_trace("v100"))
    # step times spread 18% around an unchanged median: jitter with no slow step (impact 0)
    walls = np.array([100.0, 80.0, 120.0, 80.0, 120.0]) * 1000
    steps = summary.steps.assign(wall_us=walls, busy_us=walls * 0.98, computing_us=walls * 0.97)
    jittery = dataclasses.replace(summary, steps=steps)
    advice = npumagic.advise(jittery)
    jitter = next(f for f in advice.findings if f.category == "jitter")
    assert jitter.impact == 0
    verdict = npumagic.checklist(jittery, advice=advice)
    assert verdict.bottleneck == "compute_bound"
    assert "jitter" not in verdict.steps[1][1]


def test_a_sync_is_located_at_the_innermost_user_frame_not_inside_torch():
    # GIVEN .item() called from a user's step, through torch's module call, with stacks recorded
    events = pd.DataFrame({
        "name": ["train.py(12): step", "torch/nn/modules/module.py(1751): _call_impl", "aten::item"],
        "kind": ["python", "python", "host_op"], "ts_ns": [0, 10, 20], "dur_ns": [100, 80, 5],
        "lane": "Python/Thread 1", "device": -1, "rank": 0})
    trace = schema.finish(events, pd.DataFrame({"rank": [0], "step": [1], "start_ns": [0], "end_ns": [100]}),
                          meta={"backend": "cpu"})
    # THEN the sync table names the user's line, not the library frame closer to the call
    syncs = npumagic.summarize(trace).syncs.set_index("name")
    assert syncs.loc["aten::item", "source"] == "train.py(12): step"


def test_a_single_step_ends_at_its_last_recorded_work_host_or_device():
    """owlv2's one ProfilerStep: the device's last kernel ends 4.3 ms before the step's last host
    work (the next batch fetched at its end); the window holds that host work, not the 60 us after
    it where nothing was recorded. Read independently from the raw JSON."""
    path = need(CUDA / "tracelens" / "h100_owlv2")
    with gzip.open(next(path.glob("*.json.gz"))) as fh:
        events = json.load(fh)["traceEvents"]
    (step,) = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    start, end = step["ts"], step["ts"] + step["dur"]
    host = [e["ts"] + e["dur"] for e in events
            if start <= e.get("ts", -1) < end and e["name"] != step["name"]
            and (e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver") or e["name"].startswith("enumerate(DataLoader)"))]
    device = [e["ts"] + e["dur"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert max(host) - max(device) > 4000  # the case: host work after the last kernel
    wall_us = shared_summary(path).steps["wall_us"].iat[0]
    assert wall_us == pytest.approx(max(max(host), max(device)) - start, abs=0.01)
    assert wall_us < step["dur"] - 50


def test_the_last_host_work_of_each_step_ends_inside_its_span():
    from npumagic.analysis.breakdown import _host_work_end

    # GIVEN steps 7 and 5 (out of order), step 9 with no host work, and host work of step 5 that
    # starts after step 5's span has ended (the profiler gave it the step's number all the same)
    steps = pd.DataFrame({"step": [7, 5, 9], "start_ns": [1000, 0, 2000], "end_ns": [2000, 1000, 3000]})
    ev = pd.DataFrame({"kind": ["host_op", "runtime", "host_op", "kernel", "host_op"],
                       "device": [-1, -1, -1, 0, -1], "step": [5, 5, 7, 7, 5],
                       "ts_ns": [100, 300, 1200, 1500, 1500], "dur_ns": [500, 100, 300, 900, 50]})
    # WHEN the end of each step's host work is read THEN it is its last host event's end, in the
    # steps' order; the kernel and the event past the span do not count; no host work is NaN
    ends = [_host_work_end(ev, steps, step) for step in (7, 5, 9, 4)]
    assert ends[:2] == [1500.0, 600.0] and np.isnan(ends[2])
    assert np.isnan(ends[3])  # a step the table does not have
