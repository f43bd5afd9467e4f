"""``npumagic ab``: two real scripts, each capture a fresh process, alternated and decided on
their paired median steps. The tests assert on the decision's direction for a difference that
load cannot hide (200 ms a step against about 1 ms), never on a time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from npumagic.analysis.ab_scripts import ORDER, decide, side_of
from npumagic.cli import main

from .conftest import ROOT

TORCH_LOOP = """\
import sys, time
import torch

torch.set_num_threads(1)  # a busy neighbour then delays one thread, not a pool's meeting
model = torch.nn.Linear(32, 32)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(10_000):
    model(torch.randn(16, 32)).sum().backward()
    opt.step()
    opt.zero_grad()
    time.sleep(EXTRA)
"""

PLAIN_LOOP = """\
import os, sys
import npumagic

if os.environ.get("PID_FILE"):
    with open(os.environ["PID_FILE"], "w") as f:
        f.write(str(os.getpid()))
for _ in range(10_000):
    sum(i * i for i in range(STEP_WORK))
    npumagic.step()
"""


def script(folder, name: str, text: str) -> str:
    path = folder / name
    path.write_text(text)
    return str(path)


@pytest.mark.slow  # 12 to 24 fresh processes importing torch
def test_a_script_sleeping_200_ms_more_a_step_is_decided_slower(tmp_path, capsys):
    # On two busy cores A's 1 ms steps stretch to 40 ms and vary capture to capture, so 20 ms more
    # (the test before) could leave 6 pairs undecided. 200 ms more cannot hide; the budget of 24
    # captures gives the sequence room to decide after a stretched pair (16 captures, seen so).
    a = script(tmp_path, "a.py", TORCH_LOOP.replace("EXTRA", "0.001"))
    b = script(tmp_path, "b.py", TORCH_LOOP.replace("EXTRA", "0.201"))
    assert main(["ab", "--steps-per-capture", "5", "--skip", "2", "--max-captures", "24", "--json", a, b]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["significant"] and result["speedup"] < 1  # A / B below 1: B is slower
    assert "b.py is" in result["verdict"] and "slower than" in result["verdict"]
    captures = result["captures"]
    assert 12 <= captures <= 24 and captures % 2 == 0 and len(result["medians_a_s"]) == captures // 2
    for k in range(captures):  # alternated A B B A B A A B ...: every pair holds one of each
        assert f"capture {k + 1} of at most 24 ({side_of(k).upper()})" in captured.err
    assert f"capture {captures + 1} of" not in captured.err  # it stopped once decided


def test_identical_scripts_are_not_called_different(tmp_path, capsys):
    a = script(tmp_path, "same.py", PLAIN_LOOP.replace("STEP_WORK", "20_000"))
    assert main(["ab", "--steps-per-capture", "10", "--skip", "1", "--max-captures", "20", "--json", a, a]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["schema"], result["kind"]) == ("npumagic/1", "ab")
    assert not result["significant"]
    assert result["captures"] <= 20 and result["steps_per_capture"] == 10


def test_a_failing_script_is_named_with_its_status_and_the_end_of_its_output(tmp_path, capsys):
    a = script(tmp_path, "good.py", PLAIN_LOOP.replace("STEP_WORK", "100"))
    b = script(tmp_path, "bad.py", "import sys\nprint('reading config.yaml', file=sys.stderr)\n"
                                   "print('KeyError: lr', file=sys.stderr)\nsys.exit(3)\n")
    assert main(["ab", "--steps-per-capture", "2", "--max-captures", "12", a, b]) == 2
    err = capsys.readouterr().err
    assert f"script B ({b}) exited with status 3" in err
    assert "reading config.yaml" in err and "KeyError: lr" in err


def test_the_arguments_after_the_scripts_reach_them_and_its_own_options_there_are_refused(tmp_path, capsys):
    says = script(tmp_path, "says.py", "import sys\nprint('got', sys.argv[1:], file=sys.stderr)\nsys.exit(1)\n")
    assert main(["ab", "--skip", "1", says, says, "--", "--lr", "0.1"]) == 2
    assert "got ['--lr', '0.1']" in capsys.readouterr().err
    assert main(["ab", says, says, "--max-captures", "12"]) == 2
    assert "--max-captures after the scripts would be passed to them" in capsys.readouterr().err


def test_a_script_that_ends_before_its_steps_says_so(tmp_path, capsys):
    short = script(tmp_path, "short.py", PLAIN_LOOP.replace("10_000", "4").replace("STEP_WORK", "10"))
    assert main(["ab", "--steps-per-capture", "20", "--max-captures", "12", short, short]) == 2
    assert "ended after 4 step boundaries" in capsys.readouterr().err


def test_each_capture_ends_its_script_after_its_steps_and_the_scripts_finally_runs(tmp_path, capsys):
    counted = script(tmp_path, "counted.py", "import sys\nimport npumagic\nsteps = 0\ntry:\n"
                                             "    for steps in range(1, 10_000):\n        npumagic.step()\n"
                                             "finally:\n    print('reached', steps, file=sys.stderr)\n"
                                             "    sys.exit(1)\n")
    assert main(["ab", "--steps-per-capture", "4", "--skip", "2", counted, counted]) == 2
    # 1 boundary starts the clock, 2 skipped steps, 4 timed: ended at the 7th
    assert "reached 7" in capsys.readouterr().err


def test_ctrl_c_stops_npumagic_and_the_script(tmp_path):
    slow = script(tmp_path, "slow.py", PLAIN_LOOP.replace("STEP_WORK", "200_000"))
    pid_file = tmp_path / "pid"
    env = dict(os.environ, PID_FILE=str(pid_file), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "npumagic.cli", "ab", "--steps-per-capture", "1000", slow, slow],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    child = int(pid_file.read_text())
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


def test_the_order_is_balanced_and_every_pair_holds_one_of_each():
    sides = "".join(side_of(k) for k in range(16))
    assert sides == "abbabaababbabaab" and ORDER == sides[:8]
    assert all(sorted(sides[k:k + 2]) == ["a", "b"] for k in range(0, 16, 2))


def test_the_decision_waits_for_six_pairs_then_calls_a_clear_difference():
    a, b = [0.010, 0.011, 0.010, 0.012, 0.010, 0.011], [0.030, 0.031, 0.029, 0.030, 0.032, 0.030]
    assert not decide(a[:5], b[:5], ("a", "b")).decided  # the sequence is unbounded before 6
    result = decide(a, b, ("a", "b"))
    assert result.significant and result.speedup < 1 and result.sentence().startswith("b is 2.8x slower than a")


def test_the_help_says_the_default_number_of_captures():
    from npumagic.analysis.ab_scripts import MAX_CAPTURES
    from npumagic.cli_ab import MAX_CAPTURES_SAID

    assert MAX_CAPTURES_SAID == MAX_CAPTURES
