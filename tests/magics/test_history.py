"""The history store across processes: a new kernel sees earlier runs, concurrent kernels lose
no run, and a writer killed mid-transaction leaves the history consistent."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from npumagic.errors import NpumagicError
from npumagic.history import SCHEMA_VERSION, HistoryStore, NewerHistory, RunNameTaken, UnknownRun

from ..conftest import ASCEND, need

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


@pytest.mark.slow
def test_a_new_kernel_sees_the_earlier_runs(tmp_path):
    first = _kernel(tmp_path, 1)
    assert first.wait(timeout=300) == 0, first.stderr.read()
    second = _kernel(tmp_path, 1)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    assert out.strip().splitlines()[-1] == "run1,run2"


@pytest.mark.slow
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


# -- schema versions ---------------------------------------------------------------------------
V0 = Path(__file__).resolve().parents[1] / "data" / "history_v0.sqlite"  # written by npumagic 4181b85


def _user_version(path) -> int:
    import sqlite3

    db = sqlite3.connect(path)
    try:
        return db.execute("PRAGMA user_version").fetchone()[0]
    finally:
        db.close()


def test_a_history_written_before_schema_versions_is_migrated_in_place(tmp_path):
    shutil.copy(V0, tmp_path / "history.sqlite")
    assert _user_version(tmp_path / "history.sqlite") == 0
    store = HistoryStore(tmp_path)
    assert store.version == 0 and _user_version(tmp_path / "history.sqlite") == SCHEMA_VERSION
    assert store.names() == ["baseline", "fixed"]
    assert store.get("baseline").note == "written by npumagic 4181b85"
    assert store.get("fixed").verdict.bottleneck == "balanced"
    assert len(store.steps("baseline")) == 3 and len(store.kernels("fixed"))
    assert store.summary("baseline") is None  # recorded before summaries were stored
    assert HistoryStore(tmp_path).version == SCHEMA_VERSION  # nothing left to migrate
    store.reserve("after")
    store.finish("after", "ok")
    assert store.names() == ["baseline", "fixed", "after"]


def test_a_history_from_a_newer_npumagic_is_refused_with_a_reason(tmp_path):
    import sqlite3

    HistoryStore(tmp_path)
    db = sqlite3.connect(tmp_path / "history.sqlite")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(NewerHistory, match=f"schema version {SCHEMA_VERSION + 1}.*upgrade npumagic"):
        HistoryStore(tmp_path)
    with pytest.raises(NewerHistory, match=f"schema version {SCHEMA_VERSION + 1}.*upgrade npumagic"):
        HistoryStore(tmp_path, create=False)  # the CLI's runs/export read it so: refused there too


def test_an_old_run_is_summarised_from_its_files_once_then_from_the_history(tmp_path):
    from npumagic.session import Session

    session = Session(tmp_path)
    session.recorder.load(need(ASCEND / "level1" / "rank0_ascend_pt"), name="job")
    with session.store._connect(immediate=True) as db:  # as if recorded before summaries were stored
        db.execute("DELETE FROM summaries")
    assert session.store.summary("job") is None
    fresh = Session(tmp_path)
    summary = fresh.runs.summary("job")  # parsed from the files, then stored
    assert session.store.summary("job").headline == summary.headline


def test_a_summary_stored_by_the_format_before_is_still_read(tmp_path):
    import json
    import zlib

    from npumagic.session import Session

    session = Session(tmp_path)
    report = session.recorder.load(need(ASCEND / "level1" / "rank0_ascend_pt"), name="job")
    with session.store._connect(immediate=True) as db:  # as npumagic 0.1 stored it: format 1
        data = db.execute("SELECT data FROM summaries").fetchone()[0]
        doc = json.loads(zlib.decompress(data))
        job = doc["summary"]
        for rank in job["per_rank"].values():
            rank.update({k: job[k] for k, v in rank.items() if v == {"__same__": True}})
        doc["format"] = 1
        db.execute("UPDATE summaries SET format = 1, data = ?", (zlib.compress(json.dumps(doc).encode()),))
    stored = Session(tmp_path).store.summary("job")
    assert stored is not None and stored.headline == report.summary.headline


def test_the_latest_run_is_this_kernels_while_another_kernel_writing_the_same_history_runs(shell, tmp_path):
    # GIVEN a run of this kernel, then one of a second notebook's kernel, alive, on the same output
    # directory (a real other process; its row says so as a kernel's would)
    import sqlite3

    from npumagic.history import process_started

    sample = need(ASCEND.parent / "cuda" / "alexnet_sync")
    assert shell.run_line_magic("npuload", f"{sample} --name mine --no-plot") is not None
    assert shell.run_line_magic("npuload", f"{sample} --name theirs --no-plot") is not None
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        with sqlite3.connect(tmp_path / "runs" / "history.sqlite") as db:
            db.execute("UPDATE runs SET pid = ?, pid_started = ? WHERE name = 'theirs'",
                       (other.pid, process_started(other.pid)))
        # THEN -1, the default run and %npunote -1 mean this kernel's latest; the other is taken by name
        assert shell.run_line_magic("npuadvise", "").run == "mine"
        shell.run_line_magic("npunote", '-1 "this kernel\'s"')
        shell.run_line_magic("npunote", 'theirs "named"')
        runs = shell.run_line_magic("npuruns", "").data.set_index("name")
        assert runs.loc["mine", "note"] == "this kernel's" and runs.loc["theirs", "note"] == "named"
        with sqlite3.connect(tmp_path / "runs" / "history.sqlite") as db:  # both the other kernel's
            db.execute("UPDATE runs SET pid = ?, pid_started = ?", (other.pid, process_started(other.pid)))
        session = shell.magics_manager.registry["NpuMagics"].session
        with pytest.raises(NpumagicError, match="no run of this kernel or of an ended one .2 more are another "
                                                "running kernel's"):
            session.runs.resolve(None)
        assert session.runs.resolve("theirs") == "theirs"  # a name is always taken
    finally:
        other.kill()
        other.wait(timeout=30)
    # once that kernel has ended, its run is the latest like any other
    assert shell.run_line_magic("npuadvise", "").run == "theirs"


def test_runs_of_another_host_or_of_an_old_history_stay_the_latest(tmp_path):
    # a history from before a container restart (a new hostname) or from another machine: its
    # writers cannot be checked, and its runs must stay what -1 and the default run mean
    from npumagic.session import Session

    import sqlite3

    shutil.copy(V0, tmp_path / "history.sqlite")  # runs 'baseline' and 'fixed'
    with sqlite3.connect(tmp_path / "history.sqlite") as db:  # their writer: a live pid, on another host
        db.execute("UPDATE runs SET host = 'another-host', pid = 1")
    session = Session(tmp_path)
    assert session.runs.resolve(None) == "fixed" and session.runs.resolve("-2") == "baseline"
