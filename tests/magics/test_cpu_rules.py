"""The CPU backend's own bottlenecks through the magics, with the real CPU profiler: Python
between operators is host-bound time, and ``.item()`` every step is caught before it becomes a
host-device sync on an accelerator."""

from __future__ import annotations

import numpy as np
import pytest

import npumagic
from npumagic.analysis.compare import profiling_inflation
from npumagic.analysis.run_facts import RunFacts

PYTHON_LOOP = """
import time
python_s = []
def python_after_step(n):
    train_step()  # ends with opt.step(): the loop below runs at the start of the next step
    t0 = time.perf_counter()
    total = 0
    for i in range(n):
        total += i * i
    python_s.append(time.perf_counter() - t0)
"""


def _profile(shell, name, statement):
    result = shell.run_cell(f"%npusteps --wait 0 --warmup 1 --steps 4 --no-plot --quiet --name {name} {statement}")
    assert result.success, result.error_in_exec
    return result.result


def test_a_pure_python_loop_between_steps_is_host_bound_with_its_share(trainer):
    trainer.run_cell(PYTHON_LOOP)
    report = _profile(trainer, "loop", "python_after_step(200_000)")
    verdict = report.verdict
    assert verdict.bottleneck == "host_bound"
    assert "Python outside torch operators" in verdict.steps[1][1]
    share = verdict.evidence["unexplained_share"]
    assert f"({share:.0%} of the steps' time)" in verdict.steps[1][1]
    summary = report.summary
    loop_ms = 1000 * sum(trainer.user_ns["python_s"][-4:]) / 4
    # the loop is time outside operators (shares are left unasserted: the machine's load moves them)
    assert verdict.evidence["python_ms"] >= 0.8 * loop_ms
    assert summary.share("idle_us") >= share


def test_item_every_step_is_a_low_sync_finding_on_the_cpu(trainer):
    trainer.run_cell("def step_with_item():\n    x = torch.randn(16, 32)\n    model(x).sum().item()\n    train_step()")
    advice = _profile(trainer, "item", "step_with_item()").verdict.advice
    sync = next(f for f in advice if f.category == "sync")
    assert sync.severity == "low"
    assert "on NPU/CUDA each becomes a host-device sync" in sync.title
    assert sync.evidence["syncs_per_step"] >= 1



def _python_between_items_us(summary) -> tuple[float, float]:
    """The median and mean gap from a step's aten::item ending to the next operator of its step
    starting on its thread, where that operator is the next aten::item within 10 µs, read plainly
    from the events."""
    ev = summary.events
    ops = ev[(ev["kind"] == "host_op") & (ev["device"] < 0) & (ev["step"] >= 0)].sort_values("ts_ns")
    gaps = []
    for _, lane in ops.groupby("lane", observed=True):
        rows = list(lane.itertuples())
        for r in rows:
            if r.name == "aten::item":
                end = r.ts_ns + r.dur_ns
                nxt = next((o for o in rows if o.ts_ns >= end), None)
                if nxt is not None and nxt.step == r.step and nxt.name == "aten::item" and nxt.ts_ns - end < 10_000:
                    gaps.append(nxt.ts_ns - end)  # a loop's gap: a longer one holds other Python
    return float(np.median(gaps)) / 1000, float(np.mean(gaps)) / 1000


def test_dropping_item_calls_saves_their_own_time_and_the_python_around_them(trainer):
    # GIVEN a step that reads the loss 250 times with .item() (no device: nothing waits)
    trainer.run_cell("def step_with_items():\n    loss = model(torch.randn(16, 32)).sum()\n"
                     "    for _ in range(250):\n        loss.item()\n    train_step()")
    summary = _profile(trainer, "items", "step_with_items()").summary
    # WHEN it is advised
    findings = npumagic.advise(summary).findings
    sync = next(f for f in findings if f.category == "sync")
    # THEN the calls' own recorded time (the median step's) goes, with the Python between consecutive calls (the loop and
    # the next call's binding, which no event records): its typical gap at least; its mean at most,
    # and half as much again, which the rest of the profiled step loses beside the calls' records
    ev = summary.events
    items = ev[(ev["name"] == "aten::item") & (ev["step"] >= 0)]
    item_ms = float(np.median([items.loc[items["step"] == step, "dur_ns"].sum() for step in summary.steps["step"]])) / 1e6
    typical, mean = _python_between_items_us(summary)
    assert sync.evidence["syncs_per_step"] == 250
    assert sync.evidence["python_between_us"] == pytest.approx((typical, mean))
    assert sync.predicted_interval == pytest.approx((item_ms + 250 * typical / 1000,
                                                     1.5 * (item_ms + 250 * mean / 1000)), abs=1e-3)
    assert "250 calls x the" in sync.predicted_basis and "which no event records" in sync.predicted_basis
    assert "up to 50% more: under the profiler the rest of the step runs slower" in sync.predicted_basis
    # AND the reads are not tiny operators to fuse (500 a step with the _local_scalar_dense each calls)
    assert not any(f.rule == "small_ops" for f in findings)


def test_a_compute_bound_step_is_called_so_by_the_advice_too(trainer):
    # GIVEN a step that is all matmul on one thread: no finding, yet the verdict is compute-bound
    trainer.run_cell("import torch\nthreads = torch.get_num_threads(); torch.set_num_threads(1)\n"
                     "big = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512))\n"
                     "big_opt = torch.optim.SGD(big.parameters(), lr=0.1); xs = torch.randn(256, 512)\n"
                     "def matmul_step():\n    big(xs).sum().backward(); big_opt.step(); big_opt.zero_grad()")
    try:
        report = _profile(trainer, "matmul", "matmul_step()")
    finally:
        trainer.run_cell("torch.set_num_threads(threads)")
    assert report.verdict.bottleneck == "compute_bound"
    # THEN %npuadvise says what the verdict says, with the same fix, not "no bottleneck"
    text = str(trainer.run_line_magic("npuadvise", "matmul"))
    assert "compute-bound (CPU operators): CPU operators compute" in text and report.verdict.next_change in text
    assert "no bottleneck past its threshold" not in text


CNN_SETUP = """
import time
import torch.nn.functional as F
class Pixels(torch.utils.data.Dataset):  # a few tiny operators per sample: ~300 per batch
    def __init__(self):
        self.x, self.y = torch.rand(512, 3, 8, 8), torch.randint(0, 4, (512,))
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        return ((self.x[i] - 0.5) / 0.25).flip(2), self.y[i]
loader = torch.utils.data.DataLoader(Pixels(), batch_size=64, num_workers=0)
cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 4))
copt = torch.optim.SGD(cnn.parameters(), lr=0.01)
def busy_python(n):
    total = 0
    for i in range(n):
        total += i * i
    return total
"""
CNN_LOOP = """for x, y in loader:
    loss = F.cross_entropy(cnn(x), y); loss.backward(); copt.step(); copt.zero_grad()
    {extra}
"""


def _profile_cell(shell, name, body, flags=""):
    result = shell.run_cell(f"%%npuprofile --wait 0 --warmup 1 --steps 4 --no-plot --quiet --name {name} {flags}\n{body}")
    assert result.success, result.error_in_exec
    return result.result


@pytest.mark.parametrize("extra", ["busy_python(300_000)", "time.sleep(0.05)"], ids=["python-loop", "sleep"])
def test_a_step_of_many_tiny_operators_and_python_is_host_bound_with_its_share(shell, extra):
    # GIVEN a small CNN fed by a num_workers=0 DataLoader (hundreds of tiny operators per step) and
    # Python work in the step: the case the small-op rule used to swallow into "balanced"
    # (one intra-op thread: spinning OpenMP threads on a loaded machine would make the tiny
    # operators take longer than the Python)
    assert shell.run_cell(CNN_SETUP + "threads = torch.get_num_threads(); torch.set_num_threads(1)").success
    try:
        report = _profile_cell(shell, "cnn", CNN_LOOP.format(extra=extra))
    finally:
        shell.run_cell("torch.set_num_threads(threads)")
    from npumagic.analysis.rules.core import _tiny_per_step
    assert _tiny_per_step(report.summary) >= 200  # the small-operator count that made host_bound give up
    verdict = report.verdict
    assert verdict.bottleneck == "host_bound"
    share = verdict.evidence["unexplained_share"]
    assert "Python outside torch operators" in verdict.steps[1][1] and f"({share:.0%} of the steps' time)" in verdict.steps[1][1]
    # %npuadvise leads with a host-side lever, the Next change: which of the two saves more is the load's
    # to say (moving the Python out saves its CPU time, not the time the thread waited for a core)
    assert verdict.advice.findings[0].category in ("host_bound", "small_ops")
    assert verdict.next_change.startswith(verdict.advice.findings[0].fix)  # and its predicted saving after it
    assert any(f.category == "host_bound" for f in verdict.advice.findings)


def test_item_every_step_is_named_at_its_line(trainer):
    trainer.run_cell("def step_with_item():\n    x = torch.randn(16, 32)\n    value = model(x).sum().item()\n    train_step()")
    report = _profile_cell(trainer, "itemline", "for _ in range(6):\n    step_with_item()", "--stack")
    sync = next(f for f in report.verdict.advice if f.category == "sync")
    assert "step_with_item" in sync.where, sync.where  # the user function that calls .item(), not torch


def test_a_capture_times_the_steps_outside_the_profilers_window_too(trainer):
    report = _profile_cell(trainer, "timed", "for _ in range(12):\n    train_step()")
    times = report.run.step_times  # on the run's record, not in its Summary
    assert "step_times" not in report.summary.meta
    # 12 steps: the first (the warm-up step, with the loop's start-up) left out, 4 recorded, 7 after the window
    assert len(times["profiled"]) == 4 and len(times["unprofiled"]) == 7
    # the Baseline names profiling's cost where it measurably slowed the step, and only there
    inflation = profiling_inflation(RunFacts(step_times=times))
    assert inflation is not None
    assert ("profiling inflated the step by" in report.verdict.steps[0][1]) == (inflation.ci[0] > 1)


def test_a_run_with_python_stacks_names_the_frames_that_take_the_time(trainer):
    # GIVEN a step that spends most of its time in one Python function, profiled without and with --stack
    trainer.run_cell("def squares(n):\n    total = 0\n    for i in range(n):\n        total += i * i\n"
                     "    return total\ndef python_step():\n    train_step(); squares(300_000)")
    plain = _profile_cell(trainer, "plain", "for _ in range(6):\n    python_step()")
    stacked = _profile_cell(trainer, "stacked", "for _ in range(6):\n    python_step()", "--stack")
    found = {name: next(f for f in report.verdict.advice if f.category == "host_bound")
             for name, report in (("plain", plain), ("stacked", stacked))}
    # THEN the run without stacks is told to record them; the other names the function first
    assert "profile again with Python stacks (--stack)" in found["plain"].fix
    assert "--stack" not in found["stacked"].fix
    top = stacked.summary.meta["python_frames"][0]
    assert top["frame"].endswith(": squares"), stacked.summary.meta["python_frames"]
    assert found["stacked"].fix.endswith(f"start with {top['frame']}")
    assert f"most of it in {top['frame']} (" in found["stacked"].title
    # the frame's time outside operators is within the step's (shares are left unasserted: load moves them)
    assert 0 < top["us_per_step"] <= stacked.summary.steps["wall_us"].max()
