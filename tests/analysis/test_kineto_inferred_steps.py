"""Steps of a Kineto trace recorded without a schedule (no ProfilerStep#), found from its
iterations: real torch.profiler traces of a tiny model."""

from __future__ import annotations

import pytest

import npumagic

torch = pytest.importorskip("torch")
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402


def _record(path, loops: int, optimizer: bool = True, annotate: str | None = None):
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(loops):
            with record_function(annotate) if annotate else _nothing():
                opt.zero_grad()
                model(torch.randn(32, 16)).sum().backward()
                if optimizer:
                    opt.step()
        torch.randn(64, 64).sum()  # a host tail after the last iteration
    prof.export_chrome_trace(str(path))
    return npumagic.load(path)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_steps_are_the_optimizer_steps_of_a_trace_without_profiler_steps(tmp_path):
    trace = _record(tmp_path / "t.pt.trace.json", loops=4)
    assert len(trace.steps) == 4  # one per loop iteration, not one for the whole trace
    assert trace.meta.steps_from == {0: "Optimizer.step#AdamW.step"}
    assert "steps_inferred" not in trace.meta.as_dict()
    ev = trace.events
    opt_ends = ev.loc[ev["name"] == "Optimizer.step#AdamW.step"].eval("ts_ns + dur_ns").sort_values().to_numpy()
    # each step ends where its optimizer step ends; the steps tile the loop, as ProfilerStep's do
    assert trace.steps["end_ns"].tolist() == opt_ends.tolist()
    assert (trace.steps["start_ns"].to_numpy()[1:] == opt_ends[:-1]).all()
    # each iteration's own backward falls in its own step; the tail after the last step in none
    backward = ev[ev["name"].astype(str).str.startswith("autograd::engine::evaluate_function: AddmmBackward")]
    assert sorted(backward["step"]) == [0, 1, 2, 3]
    tail = ev[ev["ts_ns"] >= opt_ends[-1]]
    assert len(tail) and (tail["step"] == -1).all()
    summary = npumagic.summarize(trace)
    assert len(summary.steps) == 4 and summary.meta["steps_from"] == {0: "Optimizer.step#AdamW.step"}


def test_a_repeated_top_level_annotation_cuts_steps_where_there_is_no_optimizer_step(tmp_path):
    trace = _record(tmp_path / "t.pt.trace.json", loops=3, optimizer=False, annotate="train_step")
    assert len(trace.steps) == 3
    assert trace.meta.steps_from == {0: "annotation train_step"}
    marks = trace.events[trace.events["name"] == "train_step"].sort_values("ts_ns")
    assert trace.steps["start_ns"].tolist() == marks["ts_ns"].tolist()


def test_a_trace_with_no_iteration_to_see_is_one_step_and_says_so(tmp_path):
    trace = _record(tmp_path / "t.pt.trace.json", loops=1)  # one optimizer step: no iteration to repeat
    assert len(trace.steps) == 1
    assert trace.meta.steps_from == {0: "whole trace"} and trace.meta.steps_inferred == [0]
