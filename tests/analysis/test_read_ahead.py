"""A small trace decoded ahead by a worker (:mod:`npumagic.analysis.read_ahead`) while the command
line imports pandas: the same Trace as reading it here, the same error naming the file where the
worker fails, never a stale decode, and no worker left behind."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import threading

import pandas as pd
import pytest

import npumagic
from npumagic.analysis import decode_worker, read_ahead
from npumagic.errors import NpumagicError, TraceError

from ..conftest import CUDA, need

V100 = CUDA / "ns_resolution" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"


@pytest.fixture(autouse=True)
def two_cores(monkeypatch):
    monkeypatch.setattr(decode_worker.os, "sched_getaffinity", lambda _: {0, 1}, raising=False)
    monkeypatch.delenv("NPUMAGIC_DECODE_WORKERS", raising=False)
    yield
    read_ahead._stop_all()


def _same(a, b) -> None:
    for table in ("events", "steps", "memory", "counters"):
        pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table))
    assert a.meta == b.meta


def test_a_trace_read_ahead_is_the_trace_read_here(monkeypatch):
    need(V100)
    here = npumagic.load(V100)
    taken = []
    real = read_ahead.take
    monkeypatch.setattr(read_ahead, "take", lambda path: taken.append(real(path)) or taken[-1])
    read_ahead.start(V100.parent)  # the folder holding it, as a user names it
    (ahead,) = read_ahead._started.values()
    _same(here, npumagic.load(V100))
    assert taken[0] is not None  # the worker's blocks were the ones read
    assert not read_ahead._started and ahead.process.poll() is not None


def _plain_copy(tmp_path, edit=None):
    trace = json.loads(gzip.open(V100).read())
    if edit:
        edit(trace)
    path = tmp_path / "rank-0.pt.trace.json"
    path.write_text(json.dumps(trace))
    return path


def test_repairs_and_counters_made_in_the_worker_are_kept(tmp_path):
    need(V100)

    def edit(trace):
        trace["traceEvents"][100]["dur"] = float("inf")  # json writes Infinity: no JSON, repaired
        trace["traceEvents"].append({"ph": "C", "name": "power", "pid": 0, "tid": 0, "ts": 5, "args": {"watts": 300}})
    path = _plain_copy(tmp_path, edit)
    with pytest.warns(UserWarning, match="1 number was inf or nan"):
        here = npumagic.load(path)
    read_ahead.start(path)
    with pytest.warns(UserWarning, match="1 number was inf or nan"):
        ahead = npumagic.load(path)
    _same(here, ahead)
    assert "power" in set(ahead.counters["name"])


def test_a_malformed_trace_gets_the_error_naming_it(tmp_path):
    need(V100)
    path = _plain_copy(tmp_path)
    text = path.read_text()
    at = text.index('"ts": ', len(text) // 2)
    path.write_text(text[:at] + '"ts": tru, ' + text[at:])
    with pytest.raises(TraceError) as here:
        npumagic.load(path)
    read_ahead.start(path)
    with pytest.raises(TraceError) as ahead:
        npumagic.load(path)
    assert str(ahead.value) == str(here.value) and str(path) in str(ahead.value)


def test_a_file_changed_since_is_read_again(tmp_path):
    need(V100)
    path = _plain_copy(tmp_path)
    whole = len(npumagic.load(path).events)
    read_ahead.start(path)
    (stale,) = read_ahead._started.values()
    stale.thread.join()  # decoded as it was
    _plain_copy(tmp_path, lambda trace: trace["traceEvents"].__delitem__(slice(None, 500)))  # then rewritten
    assert len(npumagic.load(path).events) < whole
    read_ahead._stop_all()  # as at exit: the decode never taken is stopped
    assert stale.process.poll() is not None


@pytest.mark.parametrize("case", ["two traces", "large", "one core", "not a trace name"])
def test_no_read_ahead_where_it_cannot_help(tmp_path, monkeypatch, case):
    need(V100)
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(V100, folder / "rank-0.pt.trace.json.gz")
    target = folder
    if case == "two traces":
        shutil.copy(V100, folder / "rank-1.pt.trace.json.gz")
    elif case == "large":  # the pool decodes it on every core
        monkeypatch.setattr(decode_worker, "POOL_FROM", 1024)
    elif case == "one core":
        monkeypatch.setenv("NPUMAGIC_DECODE_WORKERS", "1")
    else:
        target = folder / "notes.txt"
        target.write_text("x")
    read_ahead.start(target)
    assert not read_ahead._started


def test_the_command_line_reads_ahead_to_the_same_answer(tmp_path):
    # GIVEN the command line on two cores, with and without a read-ahead (one core: none)
    need(V100)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-c", "import sys; from npumagic.analysis import read_ahead; started = read_ahead.start; "
            "read_ahead.start = lambda p: (started(p), print('ahead', len(read_ahead._started), file=sys.stderr)); "
            "from npumagic.cli import main; sys.exit(main())", "analyze", str(V100), "--json"]
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: no read-ahead")
    ahead = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    alone = subprocess.run(argv, capture_output=True, text=True, env={**env, "NPUMAGIC_DECODE_WORKERS": "1"}, timeout=120)
    # THEN one read ahead, the other not, to the same answer
    assert ahead.returncode == 0 == alone.returncode, ahead.stderr + alone.stderr
    assert "ahead 1" in ahead.stderr and "ahead 0" in alone.stderr
    assert json.loads(ahead.stdout) == json.loads(alone.stdout)


def test_a_worker_whose_reader_ended_exits_quietly():
    # GIVEN a read-ahead worker whose reading process closed its end of the pipe (it ended first)
    need(V100)
    code = ("import sys; from npumagic.analysis import decode_worker; "
            f"p = decode_worker.start('file', {str(V100)!r}); p.stdout.close(); p.stdin.close(); sys.exit(p.wait())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    # THEN it ends without a traceback on the terminal they share
    assert (done.returncode, done.stderr) == (0, "")


def test_a_fifo_named_as_a_trace_is_not_opened(tmp_path):
    # GIVEN a FIFO named as a trace (opening it for reading would wait for a writer)
    fifo = tmp_path / "rank-0.pt.trace.json"
    os.mkfifo(fifo)
    started = threading.Thread(target=read_ahead.start, args=(fifo,), daemon=True)
    started.start()
    started.join(timeout=10)
    waiting = started.is_alive()
    if waiting:  # let it go
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert not waiting and not read_ahead._started


def test_a_worker_count_that_is_no_number_is_refused_by_name(monkeypatch):
    need(V100)
    monkeypatch.setenv("NPUMAGIC_DECODE_WORKERS", "two")
    with pytest.raises(NpumagicError, match="NPUMAGIC_DECODE_WORKERS='two': expected a whole number"):
        read_ahead.start(V100)
    with pytest.raises(NpumagicError, match="NPUMAGIC_DECODE_WORKERS='two'"):
        npumagic.load(V100)
    for fewest in ("0", "-3", " 1 "):  # none: read in this process
        monkeypatch.setenv("NPUMAGIC_DECODE_WORKERS", fewest)
        read_ahead.start(V100)
        assert not read_ahead._started
