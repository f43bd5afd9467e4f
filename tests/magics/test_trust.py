"""Trust of the measurement through a real capture: a run taken while other processes hold every
core says its step times are unreliable, and a comparison with it is never called significant."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # it loads every core for a few seconds


def test_a_capture_beside_a_burner_on_every_core_says_it_is_contended(trainer):
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        contended = trainer.run_cell("%npusteps --wait 0 --warmup 1 --steps 5 --no-plot --quiet --name busy train_step()")
    finally:
        for p in burners:
            p.kill()
            p.wait()
    assert contended.success, contended.error_in_exec
    report = contended.result
    assert report.verdict.advice.untrusted and "unreliable" in report.verdict.steps[0][1]
    # a much slower variant profiled afterwards: the comparison with the contended run is not significant
    trainer.run_cell("def slow_step():\n    train_step(); sum(i * i for i in range(400_000))")
    assert trainer.run_cell("%npusteps --wait 0 --warmup 1 --steps 5 --no-plot --quiet --name slow slow_step()").success
    comparison = trainer.run_line_magic("npucompare", "busy slow --no-plot")
    assert not comparison.significant and "not called significant" in comparison.sentence()
