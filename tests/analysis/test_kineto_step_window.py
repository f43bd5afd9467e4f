"""A single-step trace's window is its ProfilerStep span: a host tail after the last kernel is
the step's own time (shared trace: tracelens/h100_owlv2, one ProfilerStep#6 that ends 4.39 ms
after its last kernel)."""

from __future__ import annotations

import npumagic

from ..conftest import CUDA, need, shared_summary, shared_trace


def test_a_single_steps_window_holds_its_host_tail_after_the_last_kernel():
    path = next(need(CUDA / "tracelens" / "h100_owlv2").glob("*.json.gz"))
    trace = shared_trace(path)
    (step,) = trace.steps.itertuples()
    device = trace.events[(trace.events["device"] >= 0) & (trace.events["step"] == step.step)]
    last_kernel_end = int((device["ts_ns"] + device["dur_ns"]).max())
    assert step.end_ns - last_kernel_end > 4_000_000  # a real host tail: 4.39 ms
    summary = shared_summary(path)
    wall_ns = summary.steps["wall_us"].iat[0] * 1000
    assert abs(wall_ns - (step.end_ns - step.start_ns)) < 1  # the ProfilerStep span, not cut at the last kernel
    assert summary.steps["idle_us"].iat[0] * 1000 >= step.end_ns - last_kernel_end - 1  # the tail is idle device time


def test_a_multi_step_traces_last_window_still_ends_at_its_last_device_activity():
    trace = shared_trace(CUDA / "nccl" / "nccl_data.json.gz")
    summary = npumagic.summarize(trace)
    ev = trace.events
    device = ev[(ev["device"] >= 0) & (ev["step"] == trace.steps["step"].iat[-1])]
    window_end = summary.steps["start_us"].iat[-1] + summary.steps["wall_us"].iat[-1]
    first = trace.steps["start_ns"].iat[0]
    last_end = int((device["ts_ns"] + device["dur_ns"]).max())
    assert abs(window_end * 1000 - (last_end - first)) < 1e3  # start_us counts from the first window
