"""The CI gate: ``npumagic compare A B --fail-if-slower PCT`` on runs recorded by the magics in a
real shell, through the real CLI in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

STEPS = """
import time
def step(delay):
    time.sleep(delay); train_step()
"""


@pytest.fixture
def recorded(trainer, tmp_path):
    """A history with ``fast`` (10 ms steps) and ``slow`` (20 ms steps, a 2x regression)."""
    assert trainer.run_cell(STEPS).success
    for name, delay in (("fast", 0.01), ("slow", 0.02)):
        ran = trainer.run_cell(f"%npusteps --wait 0 --warmup 1 --steps 5 --no-plot --quiet --name {name} step({delay})")
        assert ran.success, ran.error_in_exec
    return tmp_path / "runs"


def _gate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "npumagic.cli", "compare", *args], capture_output=True, text=True)


def test_a_2x_regression_fails_the_gate(recorded):
    done = _gate("fast", "slow", "--history", str(recorded), "--fail-if-slower", "5")
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("slow is ") and "x slower than fast" in done.stdout.splitlines()[0]
    assert "FAIL: --fail-if-slower 5%: slow is significantly slower than fast" in done.stdout


def test_an_improvement_passes_the_gate(recorded):
    done = _gate("slow", "fast", "--history", str(recorded), "--fail-if-slower", "5", "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["gate"] == {"fail_if_slower_pct": 5.0, "failed": False}
    assert payload["significant"] and payload["speedup"] > 1  # its size: load pulls a ratio of sleeps towards 1


def test_the_gate_reads_run_directories_as_paths_too(recorded):
    done = _gate(str(recorded / "fast"), str(recorded / "slow"), "--fail-if-slower", "5", "--json")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["gate"]["failed"] is True


def test_a_regression_within_the_allowance_passes(recorded):
    assert _gate("fast", "slow", "--history", str(recorded), "--fail-if-slower", "300").returncode == 0


@pytest.mark.parametrize("args, says", [
    (("fast", "nosuchrun"), "nosuchrun: neither a run of"),
    (("fast", "slow", "--fail-if-slower", "-3"), "-3 is not a percentage"),
])
def test_bad_input_exits_2_naming_it(recorded, args, says):
    done = _gate(*args, "--history", str(recorded))
    assert done.returncode == 2 and says in done.stderr
