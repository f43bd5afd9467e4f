"""%npurun through a real InteractiveShell: an unmodified script in a child process, its output in
the cell, its run beside the cells' runs (compared with %npucompare), and an interrupted cell."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest
from IPython.core.error import UsageError

from npumagic.capture.launch import CommandEnded
from npumagic.history import HistoryStore

from ..capture.test_run_command import LOOP, TRAIN, wait_for
from ..conftest import TRAIN_SETUP


def test_a_script_run_shows_like_a_cell_and_compares_with_one(shell, tmp_path, capsys):
    # GIVEN a cell run and an unmodified script training the same kind of model
    (tmp_path / "train.py").write_text(TRAIN)
    assert shell.run_cell(TRAIN_SETUP).success
    cell = shell.run_cell("%%npuprofile --name cell --repeat-cell --steps 3\ntrain_step()")
    assert cell.success, cell.error_in_exec
    # WHEN the script runs through %npurun ("--" ends the options, as on a command line)
    result = shell.run_cell("r = %npurun --name script -- train.py")
    # THEN its output is in the cell, the run shows as a cell's does, and it compares with the cell run
    assert result.success, result.error_in_exec
    assert "trained" in capsys.readouterr().out
    report = shell.user_ns["r"]
    assert (report.run.name, report.run.status, len(report.steps)) == ("script", "ok", 3)
    assert report.run.arguments["command"] == [sys.executable, "train.py"]
    names = shell.run_line_magic("npuruns", "").data
    assert names[["name", "status"]].values.tolist() == [["cell", "ok"], ["script", "ok"]]
    comparison = shell.run_line_magic("npucompare", "cell script --no-plot").comparison
    assert (comparison.a, comparison.b) == ("cell", "script") and comparison.speedup > 0


def test_a_failing_script_fails_the_cell_and_is_recorded(shell, tmp_path):
    (tmp_path / "train.py").write_text(TRAIN + "sys.exit(3)\n")
    result = shell.run_cell("%npurun --name three train.py")
    assert isinstance(result.error_in_exec, CommandEnded)
    assert "status 3" in str(result.error_in_exec)
    assert shell.run_line_magic("npuruns", "").data["status"].tolist() == ["failed"]


def test_interrupting_the_cell_stops_the_script_and_records_the_run(shell, tmp_path):
    # GIVEN a long training script run from a cell
    (tmp_path / "train.py").write_text(TRAIN.replace("range(8)", "range(5000)").replace(
        "opt.step(); opt.zero_grad()", "opt.step(); opt.zero_grad()\n    if i == 10: open('ready', 'w').close()"))

    def interrupt():  # what the notebook's stop button does: SIGINT to the kernel alone
        deadline = time.monotonic() + 120
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    # WHEN the cell is interrupted
    result = shell.run_cell("%npurun --name long train.py")
    # THEN the cell stops with KeyboardInterrupt, the script got it too, and the run is kept
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    run = shell.run_line_magic("npuruns", "").data.iloc[0]
    assert (run["name"], run["status"], run["steps"]) == ("long", "interrupted", 3)
    assert "the command was stopped by SIGINT" in HistoryStore(tmp_path / "runs").get("long").message


@pytest.mark.parametrize("line, says", [("", "give the script"), ("missing.py", "no such script: 'missing.py'"),
                                        ("--out x train.py", "--out/--replace"),
                                        ("--bogus train.py", "unknown option '--bogus'; see %npurun?")])
def test_bad_input_is_a_usage_error_before_anything_runs(shell, tmp_path, line, says):
    (tmp_path / "train.py").write_text(TRAIN)
    with pytest.raises(UsageError, match=says.replace("?", r"\?")):
        shell.run_line_magic("npurun", line)
    assert isinstance(shell.run_cell(f"%npurun {line}").error_in_exec, UsageError)
    assert not (tmp_path / "runs").exists()


def test_npuattach_captures_the_next_steps_of_an_on_demand_job(shell, tmp_path):
    # GIVEN a job started on demand into this kernel's output directory
    (tmp_path / "train.py").write_text(LOOP)
    job = subprocess.Popen([sys.executable, "-m", "npumagic.cli", "run", "--on-demand", "--out", "runs", "--name",
                            "job", "--", sys.executable, "train.py"], cwd=tmp_path, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (tmp_path / "ready").exists() or job.poll() is not None, "the job to train")
        # WHEN the notebook attaches for 2 steps
        table = shell.run_line_magic("npuattach", "runs/job --steps 2 --timeout 120")
    finally:
        (tmp_path / "stop").touch()
        job.communicate(timeout=120)
    # THEN the window is a run of this kernel's history, shown as its step table
    assert len(table.data) == 2
    assert shell.run_line_magic("npuruns", "").data["name"].tolist() == ["job.1"]
    with pytest.raises(UsageError, match="has ended"):
        shell.run_line_magic("npuattach", "runs/job")


def test_a_jupyter_interrupt_of_the_kernels_group_reaches_the_script_once(shell, tmp_path):
    # GIVEN a script that saves a checkpoint on Ctrl-C, taking a moment: a second SIGINT would cut that short
    (tmp_path / "train.py").write_text(textwrap.dedent("""
        import time, torch
        model = torch.nn.Linear(16, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        try:
            for i in range(5000):
                model(torch.randn(8, 16)).sum().backward()
                opt.step(); opt.zero_grad()
                if i == 10: open("ready", "w").close()
        except KeyboardInterrupt:
            time.sleep(1)
            open("saved", "w").close()
            raise
    """))

    def interrupt():  # Jupyter's stop button: SIGINT to every process in the kernel's process group
        deadline = time.monotonic() + 120
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        mine = os.getpgid(0)
        os.kill(os.getpid(), signal.SIGINT)
        for child in psutil.Process().children(recursive=True):
            if os.getpgid(child.pid) == mine:
                child.send_signal(signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    # WHEN the cell is interrupted
    result = shell.run_cell("%npurun --name saved train.py")
    # THEN the script got one SIGINT: its clean-up ran to the end, and the cell stopped
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert (tmp_path / "saved").exists()
