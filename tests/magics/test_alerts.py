"""Regression alerts: a run of a configuration seen before is checked against the band learned
from its earlier runs, in a real shell with the real profiler."""

from __future__ import annotations

import pytest

# a sleep and one tiny operator: a training step's intra-op threads wait out a busy neighbour's
# time slice (0.6 ms a step alone, 22 ms beside another suite), and two runs 2x apart learn a
# band no jump can leave (CI: ±176763% from runs of 22 and 44 ms)
STEPS = """
import time
delay = 0.01
def step():
    time.sleep(delay); torch.ones(8).add_(1).sum()
"""


@pytest.fixture
def stepping(trainer):
    assert trainer.run_cell(STEPS).success
    return trainer


def _run(shell, name: str, delay: float):
    shell.user_ns["delay"] = delay  # the same cell and options: the same configuration
    ran = shell.run_cell(f"%npusteps --wait 0 --warmup 1 --steps 5 --no-plot --name {name} step()")
    assert ran.success, ran.error_in_exec
    return ran.result


def test_the_third_run_of_a_cell_whose_step_time_jumped_is_alerted(stepping):
    # GIVEN two runs of a cell with 20 ms steps
    first, second = _run(stepping, "one", 0.02), _run(stepping, "two", 0.02)
    assert not any("its last" in n for n in first.notes + second.notes)  # no band from fewer than 2 runs
    # WHEN the third run's steps take 400 ms (outside any band two runs of a loaded machine give)
    third = _run(stepping, "three", 0.4)
    # THEN its notes and its record say it is slower than its last 2 runs, outside their band
    alert = [n for n in third.notes if n.startswith("alert: ")]
    assert len(alert) == 1 and "slower than its last 2 runs, outside their ±" in alert[0]
    stored = stepping.run_line_magic("npuruns", "")  # the history keeps it
    record = stepping.magics_manager.registry["NpuMagics"].session.store.get("three")
    assert record.verdict.alert["outside"] is True and "outside their" in record.message
    assert len(stored.data) == 3


def test_a_rerun_within_its_band_is_not_alerted(stepping):
    # GIVEN two runs of 50 and 60 ms steps: a spread the band learns (wide from two runs)
    _run(stepping, "one", 0.05)
    _run(stepping, "two", 0.06)
    # WHEN a rerun lands between them
    third = _run(stepping, "three", 0.055)
    assert not any(n.startswith("alert: ") for n in third.notes)
    assert any("than its last 2 runs, within their ±" in n for n in third.notes)


def test_a_changed_cell_is_a_new_configuration_with_no_band_yet(stepping):
    _run(stepping, "one", 0.02)
    _run(stepping, "two", 0.02)
    ran = stepping.run_cell("%npusteps --wait 0 --warmup 1 --steps 5 --no-plot --name other time.sleep(0.1); step()")
    assert not any("its last" in n for n in ran.result.notes)
