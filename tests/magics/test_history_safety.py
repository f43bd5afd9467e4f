"""A history that is not a database, corrupt, truncated, read-only, or an output_dir that is a
file: one clear message naming the path, in the magics (UsageError) and the CLI (exit 2); a
read-only history can still be listed. Crash detection does not trust a pid alone. Hypothesis
fuzzing of the store: any names, notes and stored values give a run or a HistoryError."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError

from npumagic.cli import main
from npumagic.history import HistoryError, HistoryStore, RunNameTaken, UnknownRun, process_started
from npumagic.names import RUN_NAME, BadName


def _real_history(directory: Path) -> Path:
    store = HistoryStore(directory)
    for i in range(3):
        name = store.reserve(None, source="x = 1\n" * 200)
        store.finish(name, "ok", headline={"steps": 3, "step_median_us": 1000.0 + i})
    return store.path


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[100:4096] = os.urandom(3996)  # the header's tail and the first page
    path.write_bytes(bytes(data))


BROKEN = {
    "not-a-database": lambda d: (d / "history.sqlite").write_text("these are my notes, not a database\n" * 50),
    "truncated": lambda d: (lambda p: p.write_bytes(p.read_bytes()[:1500]))(_real_history(d)),
    "corrupt": lambda d: _corrupt(_real_history(d)),
    "random-bytes": lambda d: (d / "history.sqlite").write_bytes(os.urandom(8192)),
    "a-directory": lambda d: (d / "history.sqlite").mkdir(),
}


@pytest.mark.parametrize("kind", BROKEN, ids=list(BROKEN))
def test_a_broken_history_is_one_clear_message_in_magics_and_cli(shell, tmp_path, capsys, kind):
    out = tmp_path / "broken"
    out.mkdir()
    BROKEN[kind](out)
    shell.run_line_magic("config", f"NpuMagics.output_dir = {str(out)!r}")
    result = shell.run_cell("%npuruns")
    assert isinstance(result.error_in_exec, UsageError), result.error_in_exec
    assert str(out / "history.sqlite") in str(result.error_in_exec)
    with pytest.raises(UsageError, match="history"):
        shell.run_cell_magic("npuprofile", "--repeat-cell --steps 1 --wait 0 --warmup 0", "pass")
    capsys.readouterr()
    assert main(["runs", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(out / "history.sqlite") in err[0]


def test_an_output_dir_that_is_a_file_is_one_clear_message(shell, tmp_path, capsys):
    target = tmp_path / "runs_file"
    target.write_text("not a folder")
    shell.run_line_magic("config", f"NpuMagics.output_dir = {str(target)!r}")
    with pytest.raises(UsageError, match=r"runs_file: is a file, not a directory"):
        shell.run_line_magic("npuruns", "")
    assert isinstance(shell.run_cell("%npuruns").error_in_exec, UsageError)
    capsys.readouterr()
    assert main(["export", "--out", str(target)]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err
    assert target.read_text() == "not a folder"


def _as_if_read_only(monkeypatch):
    """Every read-write open of the history becomes what SQLite does on a file it may not write
    (it opens it read-only); root, which runs these tests, ignores file permissions."""
    import npumagic.history as history

    real = sqlite3.connect

    def connect(database, *args, uri=False, **kwargs):
        if not uri:
            database, uri = f"{Path(database).resolve().as_uri()}?mode=ro", True
        return real(database, *args, uri=uri, **kwargs)

    monkeypatch.setattr(history.sqlite3, "connect", connect)


def test_a_read_only_history_is_listed_and_refuses_to_record(shell, tmp_path, monkeypatch, capsys):
    out = tmp_path / "readonly"
    _real_history(out)
    _as_if_read_only(monkeypatch)
    store = HistoryStore(out)
    assert store.readonly and store.names() == ["run1", "run2", "run3"]
    with pytest.raises(HistoryError, match=r"readonly/history\.sqlite: it is read-only here"):
        store.reserve("new")
    # the magics list it, and refuse to record into it before the cell runs
    shell.run_line_magic("config", f"NpuMagics.output_dir = {str(out)!r}")
    assert shell.run_line_magic("npuruns", "")["name"].tolist() == ["run1", "run2", "run3"]
    shell.run_cell("ran = False")
    with pytest.raises(UsageError, match="it is read-only here"):
        shell.run_cell_magic("npuprofile", "--repeat-cell --steps 1 --wait 0 --warmup 0", "ran = True")
    assert shell.user_ns["ran"] is False
    assert main(["runs", "--out", str(out)]) == 0
    assert "run3" in capsys.readouterr().out


# -- crash detection ------------------------------------------------------------------------------
def test_a_running_row_of_a_reused_pid_is_crashed(tmp_path):
    store = HistoryStore(tmp_path)
    store.reserve("live")
    store.reserve("reused")
    store.reserve("dead")
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE runs SET pid_started = ? WHERE name = 'reused'", (process_started() - 3600,))
        db.execute("UPDATE runs SET pid = ? WHERE name = 'dead'", (_dead_pid(),))
    assert [r.status for r in store.runs()] == ["running", "crashed", "crashed"]


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# -- hypothesis: the store ---------------------------------------------------------------------
NAMES = st.from_regex(RUN_NAME, fullmatch=True).filter(lambda n: ".." not in n)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(st.one_of(NAMES, st.text(max_size=20)), max_size=4), note=st.text(max_size=200),
       headline=st.dictionaries(st.text(max_size=8), st.one_of(st.floats(), st.text(max_size=8), st.none()),
                                max_size=4))
def test_fuzzed_names_and_notes_round_trip_or_are_refused(tmp_path_factory, names, note, headline):
    store = HistoryStore(tmp_path_factory.mktemp("h"))
    kept = []
    for name in names:
        try:
            kept.append(store.reserve(name))
        except (BadName, RunNameTaken):
            assert not RUN_NAME.match(name) or ".." in name or name in kept
            continue
        store.finish(kept[-1], "ok", headline=headline)
        store.update(kept[-1], note=note)
    assert store.names() == kept
    for name in kept:
        assert store.get(name).note == note
    assert len(store.table()) == len(kept)
    for name in kept:
        store.remove(name)
    with pytest.raises(UnknownRun):
        store.get(kept[0] if kept else "nothing")


COLUMNS = ["status", "created", "arguments", "headline", "verdict", "dataloaders", "pid", "pid_started", "host",
           "run_dir_owned", "kind"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(column=st.sampled_from(COLUMNS), value=st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.floats(),
                                                        st.text(max_size=30), st.binary(max_size=20),
                                                        st.just('{"a": ['), st.just("[1, 2]")))
def test_fuzzed_stored_values_read_as_a_run_or_a_history_error(tmp_path_factory, column, value):
    from npumagic.render.export import log_table, render_markdown

    store = HistoryStore(tmp_path_factory.mktemp("h"))
    store.finish(store.reserve("r1"), "ok", headline={"steps": 3, "step_median_us": 1.0})
    with sqlite3.connect(store.path) as db:
        try:
            db.execute(f"UPDATE runs SET {column} = ?", (value,))
        except sqlite3.IntegrityError:
            return  # NOT NULL columns keep their value
    try:
        runs = store.runs()
        store.table()
        render_markdown(runs)
        log_table(runs)
    except HistoryError:
        pass
