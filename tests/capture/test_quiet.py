"""Kineto's profiler start/stop lines are dropped at the file-descriptor level, nothing else."""

from __future__ import annotations

import os

from npumagic.capture.quiet import keep, without_profiler_chatter

START = b"USDT:2026-12-02 21:51:50 20953:20953 SyncActivityProfilerHandler.cpp:52] profiler_start\n"


def test_only_the_start_and_stop_lines_are_dropped():
    stop = START.replace(b"start", b"stop")
    assert keep(START + b"real error\n" + stop + b"USDT: something else\n") == b"real error\nUSDT: something else\n"


def test_other_writes_to_fd_2_pass_through(capfd):
    with without_profiler_chatter():
        os.write(2, START + b"a real warning from C++\n")
    assert capfd.readouterr().err == "a real warning from C++\n"


def test_a_profiled_cell_writes_no_profiler_chatter(trainer, capfd):
    result = trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --steps 2 --repeat 2 --no-plot\ntrain_step()")
    assert result.success, result.error_in_exec
    assert "USDT" not in capfd.readouterr().err
