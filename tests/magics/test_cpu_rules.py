"""The CPU backend's own bottlenecks through the magics, with the real CPU profiler: Python
between operators is host-bound time, and ``.item()`` every step is caught before it becomes a
host-device sync on an accelerator."""

from __future__ import annotations

import pytest

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
    assert share > 0.5 and f"({share:.0%} of the step)" in verdict.steps[1][1]
    summary = report.summary
    loop_ms = 1000 * sum(trainer.user_ns["python_s"][-4:]) / 4
    assert verdict.evidence["python_ms"] == pytest.approx(loop_ms, rel=0.3)  # the loop is the time outside ops
    assert summary.share("idle_us") >= share


def test_item_every_step_is_a_low_sync_finding_on_the_cpu(trainer):
    trainer.run_cell("def step_with_item():\n    x = torch.randn(16, 32)\n    model(x).sum().item()\n    train_step()")
    advice = _profile(trainer, "item", "step_with_item()").verdict.advice
    sync = next(f for f in advice if f.category == "sync")
    assert sync.severity == "low"
    assert "on NPU/CUDA each becomes a host-device sync" in sync.title
    assert sync.evidence["syncs_per_step"] >= 1


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
    assert "the step is compute-bound (CPU operators compute" in text and report.verdict.next_change in text
    assert "no bottleneck past its threshold" not in text
