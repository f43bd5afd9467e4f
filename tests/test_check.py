"""``npumagic check``: a run against the band learned from the earlier runs of its configuration,
on runs recorded by the magics in a real shell, through the real CLI in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

STEPS = """
import time
delay = 0.02
def step():
    time.sleep(delay); train_step()
"""


@pytest.fixture
def history(trainer, tmp_path):
    """``one`` and ``two`` with 20 ms steps, then ``three`` of the same cell with 400 ms steps."""
    assert trainer.run_cell(STEPS).success
    for name, delay in (("one", 0.02), ("two", 0.02), ("three", 0.4)):
        trainer.user_ns["delay"] = delay
        ran = trainer.run_cell(f"%npusteps --wait 0 --warmup 1 --steps 5 --no-plot --quiet --name {name} step()")
        assert ran.success, ran.error_in_exec
    return tmp_path / "runs"


def _check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "npumagic.cli", "check", *args], capture_output=True, text=True)


def test_a_run_outside_its_band_exits_1(history):
    done = _check("three", "--history", str(history), "--json")
    assert done.returncode == 1, done.stderr
    payload = json.loads(done.stdout)
    assert payload["outside"] and payload["runs"] == 2 and payload["change_pct"] > 100
    assert "slower than its last 2 runs, outside their" in payload["verdict"]


def test_an_output_path_within_the_band_exits_0(history):
    done = _check(str(history / "one"), "--history", str(history), "--like", "two")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: ") and "within their" in done.stdout


@pytest.mark.parametrize("run, says", [("two", "fewer than 2 earlier finished runs"), ("nosuch", "nosuch: neither a run")])
def test_bad_input_exits_2_naming_it(history, run, says):
    done = _check(run, "--history", str(history))
    assert done.returncode == 2 and says in done.stderr
