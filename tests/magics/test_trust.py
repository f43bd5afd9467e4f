"""Trust of the measurement through a real capture: a run taken while other processes hold its
core says its step times are unreliable, and a comparison with it is never called significant."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # it loads a core for a few seconds


@pytest.fixture
def one_core():
    """This thread (the cell's) pinned to one core, for as long as the test runs."""
    before = os.sched_getaffinity(0)
    core = min(before)
    os.sched_setaffinity(0, {core})  # on Linux, 0 is the calling thread
    yield core
    os.sched_setaffinity(0, before)


def test_a_capture_beside_busy_processes_on_its_core_says_it_is_contended(trainer, trust_checked, one_core):
    # two busy processes on the cell's own core: its thread waits about two thirds of the time, on
    # a machine of any size and whatever else runs on it
    burner = f"import os, sys; os.sched_setaffinity(0, {{{one_core}}}); print(flush=True)\nwhile True: pass"
    burners = [subprocess.Popen([sys.executable, "-c", burner], stdout=subprocess.PIPE) for _ in range(2)]
    try:
        for p in burners:
            p.stdout.readline()  # burning from here on
        # 30 steps: the host sampler reads every 50 ms, and 5 steps of a few ms could hold no sample
        contended = trainer.run_cell("%npusteps --wait 0 --warmup 1 --steps 30 --no-plot --quiet --name busy train_step()")
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
    # and it says how to decide anyway here, in the notebook's words: the two variants interleaved in this kernel
    assert "time the two variants interleaved in this kernel: %npuab STEP_A STEP_B" in comparison.sentence()
