"""The command's end (npumagic.process_end.exit_now), in fresh processes: what a normal exit does
is still done (exit handlers, flushed streams, the status, a working thread waited for)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _run(code: str) -> subprocess.CompletedProcess:
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as a shell's command is
    return subprocess.run([sys.executable, "-c", "from npumagic.process_end import exit_now\n" + code],
                          capture_output=True, text=True, timeout=120, env=buffered)


def test_exit_handlers_run_and_the_streams_are_flushed_with_the_status():
    done = _run("import atexit, sys\n"
                "atexit.register(lambda: print('handler ran'))\n"
                "sys.stdout.write('unflushed '); sys.stderr.write('to stderr')\n"
                "exit_now(3)")
    assert (done.returncode, done.stdout, done.stderr) == (3, "unflushed handler ran\n", "to stderr")


def test_no_status_is_success():
    assert _run("exit_now(None)").returncode == 0


def test_a_thread_still_working_is_waited_for():
    done = _run("import threading, time\n"
                "def work():\n    time.sleep(0.5); print('thread finished', flush=True)\n"
                "threading.Thread(target=work).start()\n"
                "exit_now(0)")
    assert (done.returncode, done.stdout) == (0, "thread finished\n")


def test_a_reader_gone_is_no_error():
    """`npumagic ... | head`: what is left in the buffer has nowhere to go; no traceback."""
    code = ("import os, sys\nr, w = os.pipe(); os.close(r); os.dup2(w, 1)\n"
            "sys.stdout = open(1, 'w', buffering=8192, closefd=False); sys.stdout.write('x' * 10)\n"
            "exit_now(1)")
    done = _run(code)
    assert (done.returncode, done.stderr) == (1, "")


@pytest.mark.parametrize("argv", [["--help"], ["analyze", "/no/such/trace"]])
def test_the_command_ends_with_mains_status_and_output(argv, tmp_path):
    ended = subprocess.run([sys.executable, "-m", "npumagic.cli", *argv], capture_output=True, text=True,
                           timeout=300, cwd=tmp_path)
    assert ended.returncode == (0 if argv == ["--help"] else 2)
    assert ("usage: npumagic" in ended.stdout) if argv == ["--help"] else ("npumagic: error:" in ended.stderr)
