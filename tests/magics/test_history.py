"""The history store across processes: a new kernel sees earlier runs, concurrent kernels lose
no run, and a writer killed mid-transaction leaves the history consistent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from npumagic.history import HistoryStore, RunNameTaken, UnknownRun

KERNEL = textwrap.dedent("""
    import sys
    from IPython.core.interactiveshell import InteractiveShell
    ip = InteractiveShell.instance(colors="NoColor")
    ip.run_line_magic("load_ext", "npumagic")
    ip.run_line_magic("config", f"NpuMagics.output_dir = {sys.argv[1]!r}")
    ip.run_cell("import torch; m = torch.nn.Linear(8, 8); opt = torch.optim.SGD(m.parameters(), lr=0.1)")
    for _ in range(int(sys.argv[2])):
        r = ip.run_cell("%%npuprofile --repeat-cell --wait 0 --warmup 0 --steps 1 --no-plot --quiet\\n"
                        "m(torch.randn(4, 8)).sum().backward(); opt.step()")
        assert r.success, r.error_in_exec
    print(",".join(ip.run_line_magic("npuruns", "")["name"]))
""")


def _kernel(out, runs):
    return subprocess.Popen([sys.executable, "-c", KERNEL, str(out), str(runs)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_new_kernel_sees_the_earlier_runs(tmp_path):
    first = _kernel(tmp_path, 1)
    assert first.wait(timeout=300) == 0, first.stderr.read()
    second = _kernel(tmp_path, 1)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    assert out.strip().splitlines()[-1] == "run1,run2"


def test_two_kernels_writing_at_once_lose_no_run(tmp_path):
    kernels = [_kernel(tmp_path, 4) for _ in range(2)]
    for k in kernels:
        _, err = k.communicate(timeout=600)
        assert k.returncode == 0, err
    store = HistoryStore(tmp_path)
    names = store.names()
    assert sorted(names, key=lambda n: int(n[3:])) == [f"run{i}" for i in range(1, 9)]
    assert {r.status for r in store.runs()} == {"ok"}
    assert len(store.kernels()["run"].unique()) == 8


WRITER = textwrap.dedent("""
    import sys, time
    from npumagic.history import HistoryStore
    store = HistoryStore(sys.argv[1])
    with store._connect(immediate=True) as db:
        db.execute("INSERT INTO runs (name, status, created) VALUES ('half', 'running', 0)")
        print("inserted", flush=True)
        time.sleep(60)   # killed here, before COMMIT
""")


def test_a_writer_killed_mid_write_leaves_the_history_consistent(tmp_path):
    store = HistoryStore(tmp_path)
    store.reserve("before")
    store.finish("before", "ok")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "inserted"
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait(timeout=30)
    assert store.names() == ["before"]
    assert store.reserve() == "run1"  # and the store is writable again


def test_unknown_and_taken_names_are_clear(tmp_path):
    store = HistoryStore(tmp_path)
    store.reserve("base")
    with pytest.raises(RunNameTaken, match="'base' is taken"):
        store.reserve("base")
    with pytest.raises(UnknownRun, match="Unknown run 'nope'; known: base"):
        store.get("nope")


def test_the_database_is_in_wal_mode(tmp_path):
    import sqlite3

    HistoryStore(tmp_path)
    assert sqlite3.connect(tmp_path / "history.sqlite").execute("PRAGMA journal_mode").fetchone()[0] == "wal"


DIES = textwrap.dedent("""
    import os, sys
    from npumagic.history import HistoryStore
    HistoryStore(sys.argv[1]).reserve("doomed")
    os._exit(1)   # the kernel dies mid-capture
""")


def test_a_run_whose_kernel_died_shows_as_crashed(tmp_path):
    subprocess.run([sys.executable, "-c", DIES, str(tmp_path)], timeout=60)
    store = HistoryStore(tmp_path)
    assert store.get("doomed").status == "crashed"
    assert store.table()["status"].tolist() == ["crashed"]
    live = store.reserve("mine")
    assert store.get(live).status == "running"  # this process is alive
