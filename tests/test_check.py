"""``npumagic check``: a run against the band learned from the earlier runs of its configuration,
on runs recorded by the magics in a real shell, through the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# a step that is its sleep: a loaded machine stretches a training step by tens of ms from run to run,
# and a band learned from two such runs is too wide to hold anything outside it
STEPS = """
import time, torch
delay = 0.02
def step():
    time.sleep(delay); torch.ones(8).sum()
"""


@pytest.fixture
def history(trainer, tmp_path):
    """``one`` and ``two`` with 20 ms steps, then ``three`` of the same cell with 1.2 s steps (a loaded
    machine stalled one 20 ms step by 600 ms: a band of ±2906%; 1.2 s is 5900% slower)."""
    assert trainer.run_cell(STEPS).success
    for name, delay in (("one", 0.02), ("two", 0.02), ("three", 1.2)):
        trainer.user_ns["delay"] = delay
        ran = trainer.run_cell(f"%npusteps --wait 0 --warmup 1 --steps 5 --no-plot --quiet --name {name} step()")
        assert ran.success, ran.error_in_exec
    return tmp_path / "runs"


def _check(*args: str, contended_wait_pct: str = "100") -> subprocess.CompletedProcess:
    # the trust check off unless a test is about it (as test_gate does): a loaded test machine must
    # not turn these verdicts into "cannot tell"
    env = {**os.environ, "NPUMAGIC_CONTENDED_WAIT_PCT": contended_wait_pct}
    return subprocess.run([sys.executable, "-m", "npumagic.cli", "check", *args], capture_output=True, text=True,
                          env=env)


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


def test_bad_input_exits_2_naming_it(history):
    done = _check("nosuch", "--history", str(history))
    assert done.returncode == 2 and "nosuch: neither a run" in done.stderr


@pytest.mark.parametrize("run", ["one", "two"])
def test_fewer_than_two_earlier_runs_is_no_band_yet_exit_0_undecided(history, run):
    # GIVEN a run with 0 or 1 earlier runs of its configuration (the nightly recipe's first nights)
    # WHEN it is checked: no error, exit 0, and the JSON says nothing was decided
    done = _check(run, "--history", str(history), "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["decided"] is False and payload["outside"] is None
    assert "fewer than 2 earlier finished runs" in payload["undecided"]
    text = _check(run, "--history", str(history))
    assert text.returncode == 0 and len(text.stdout.strip().splitlines()) == 1
    assert text.stdout.startswith(f"no band yet: {run}: fewer than 2 earlier finished runs")


def test_a_decided_check_says_so(history):
    done = _check("three", "--history", str(history), "--json")
    assert json.loads(done.stdout)["decided"] is True


def test_a_single_step_run_cannot_be_told_from_its_band_exit_3(trainer, history):
    # GIVEN a band of two runs, and a run of the same cell with 1 step only
    trainer.user_ns["delay"] = 0.4
    ran = trainer.run_cell("%npusteps --wait 0 --warmup 1 --steps 1 --no-plot --quiet --name single step()")
    assert ran.success, ran.error_in_exec
    # (its own configuration differs, --steps 1: checked as an output path against the band of one, two and three)
    done = _check(str(history / "single"), "--history", str(history), "--like", "three", "--json")
    # THEN exit 3, not decided, why
    assert done.returncode == 3, done.stdout + done.stderr
    payload = json.loads(done.stdout)
    assert payload["decided"] is False and "1 step" in payload["undecided"]


def test_a_contended_run_cannot_be_judged_exit_3(history):
    # every wait for a core counts as contention (threshold 0%): the run is contended
    done = _check("three", "--history", str(history), "--json", contended_wait_pct="0")
    payload = json.loads(done.stdout)
    if payload["decided"]:
        pytest.skip("this machine's samples hold no wait for a core (no schedstat)")
    assert done.returncode == 3 and "unreliable" in payload["undecided"]


def test_a_runs_stored_host_samples_read_without_pandas_judge_as_its_summary_does(history, monkeypatch):
    # GIVEN a recorded run WHEN `check` reads its host samples from the stored Summary as plain
    # columns (no pandas) THEN they are the Summary's, and say the same of contention
    from npumagic.analysis.trust import contention, host_contention
    from npumagic.named_runs import NamedRuns

    monkeypatch.setenv("NPUMAGIC_CONTENDED_WAIT_PCT", "0")
    runs = NamedRuns(history, create=False)
    plain, summary = runs.store.stored_table("three", "host"), runs.summary("three")
    assert len(summary.host) and list(plain) == list(summary.host.columns)
    assert all(len(v) == len(summary.host) for v in plain.values())
    assert host_contention(plain) == contention(summary) != {}
