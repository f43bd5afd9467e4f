"""The last cases of issue 31's attack, as the user meets them in a real shell with the real CPU
profiler: interrupts that landed between two writes, and what a hostile history or output
directory holds."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from ..conftest import TRAIN_SETUP as TRAIN

FAST = "--repeat-cell --wait 0 --warmup 0 --steps 1 --no-plot --quiet"


def _runs(shell):
    return shell.run_line_magic("npuruns", "").data.set_index("name")


@pytest.fixture
def kernel_sigint():
    """SIGINT handled as a kernel handles it (a test worker may not)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_ctrl_c_just_after_the_run_is_reserved_records_it_interrupted(trainer, monkeypatch, kernel_sigint):
    # GIVEN a real Ctrl-C arriving the moment the run's row is committed (4-27 ms into the cell)
    from npumagic.history import HistoryStore

    reserve = HistoryStore.reserve

    def reserve_then_ctrl_c(self, *args, **kwargs):
        name = reserve(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return name

    monkeypatch.setattr(HistoryStore, "reserve", reserve_then_ctrl_c)
    # WHEN the cell is profiled
    result = trainer.run_cell(f"%%npuprofile {FAST} --name early\ntrain_step()")
    monkeypatch.undo()
    # THEN it fails with the interrupt and the run is interrupted, not 'running' for the kernel's life
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert _runs(trainer).loc["early", "status"] == "interrupted"


def test_a_ctrl_c_while_the_host_sampler_starts_is_the_error_raised(trainer, monkeypatch):
    # GIVEN a Ctrl-C landing inside Thread.start() of the host sampler (the thread never started)
    start = threading.Thread.start

    def interrupted_start(self):
        if self.name == "npumagic-host-sampler":
            raise KeyboardInterrupt
        return start(self)

    monkeypatch.setattr(threading.Thread, "start", interrupted_start)
    result = trainer.run_cell(f"%%npuprofile {FAST} --name sampler\ntrain_step()")
    monkeypatch.undo()
    # THEN the user's interrupt is raised (not "cannot join thread before it is started")
    assert isinstance(result.error_in_exec, KeyboardInterrupt), result.error_in_exec
    assert _runs(trainer).loc["sampler", "status"] == "interrupted"


def test_a_run_ended_on_a_full_disk_is_written_once_the_history_can_be(trainer):
    # GIVEN a cell during which the disk fills up: the profiler's trace and the run's status
    # cannot be written (a real RLIMIT_FSIZE, so every write past 16 bytes fails)
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    trainer.run_line_magic("npuruns", "")  # the history exists before the disk fills
    try:
        result = trainer.run_cell(f"%%npuprofile {FAST} --name full\nimport resource\n"
                                  f"resource.setrlimit(resource.RLIMIT_FSIZE, (16, {hard}))\ntrain_step()")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert not result.success
    # WHEN space is free again and the user lists the runs THEN the run has ended, not 'running'
    status = _runs(trainer).loc["full", "status"]
    assert status == "failed", status


def _refused(shell, line: str, match: str):
    from IPython.core.error import UsageError

    result = shell.run_cell(f"%{line}")
    assert isinstance(result.error_in_exec, UsageError), result.error_in_exec
    assert match in str(result.error_in_exec)


def test_rm_files_keeps_npumagics_figures_folder(trainer, tmp_path):
    # GIVEN a run written with --out OUTPUT_DIR/figures (the folder imported runs' figures go to)
    assert trainer.run_cell(f"%%npuprofile {FAST} --name r1 --out runs/figures\ntrain_step()").success
    (tmp_path / "runs" / "figures" / "imported").mkdir()
    # WHEN it is removed with its files THEN that folder is refused and kept
    _refused(trainer, "npurm r1 --files", "npumagic's figures folder")
    assert (tmp_path / "runs" / "figures" / "imported").is_dir()


def test_rm_files_keeps_another_runs_output_inside_the_folder(trainer, tmp_path):
    # GIVEN run r2 whose --out lies inside run r1's folder
    assert trainer.run_cell(f"%%npuprofile {FAST} --name r1\ntrain_step()").success
    assert trainer.run_cell(f"%%npuprofile {FAST} --name r2 --out runs/r1/inner\ntrain_step()").success
    # WHEN r1 is removed with its files THEN it is refused and r2's traces stay
    _refused(trainer, "npurm r1 --files", "another run's files")
    assert any((tmp_path / "runs" / "r1" / "inner").rglob("*.pt.trace.json"))
    assert "r1" in _runs(trainer).index


def test_npuruns_text_shows_no_escape_sequence_from_a_note(trainer):
    assert trainer.run_cell(f"%%npuprofile {FAST} --name r1\ntrain_step()").success
    trainer.run_line_magic("npunote", "r1 'see \x1b]52;c;cm0gLXJmIH4=\x07 \x1b[2J here'")
    text = str(trainer.run_line_magic("npuruns", ""))
    assert "see" in text and "here" in text and "\x1b" not in text and "\x07" not in text


# -- planted links and databases in a shared output directory ------------------------------------
def test_a_compare_figure_planted_as_a_link_is_replaced_not_written_through(plots, tmp_path):
    plots.run_cell(TRAIN)
    for name in ("r1", "r2"):
        assert plots.run_cell(f"%%npuprofile {FAST.replace(' --no-plot', '')} --name {name}\ntrain_step()").success
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's file")
    (tmp_path / "runs" / "compare_r1_vs_r2.png").symlink_to(victim)
    assert plots.run_cell("%npucompare r1 r2").success
    assert victim.read_text() == "someone else's file"
    png = tmp_path / "runs" / "compare_r1_vs_r2.png"
    assert not png.is_symlink() and png.read_bytes().startswith(b"\x89PNG")


def test_a_run_folder_planted_as_a_link_receives_no_trace(trainer, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "r1").symlink_to(elsewhere, target_is_directory=True)
    _refused(trainer, "%npuprofile --repeat-cell --wait 0 --warmup 0 --steps 1 --no-plot --name r1\ntrain_step()",
             "symbolic link")
    assert list(elsewhere.iterdir()) == []


def test_a_figures_folder_planted_as_a_link_receives_no_figure(plots, tmp_path):
    from ..conftest import CUDA, need

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "runs" / "figures").mkdir(parents=True)
    (tmp_path / "runs" / "figures" / "imp").symlink_to(elsewhere, target_is_directory=True)
    assert plots.run_cell(f"%npuload {need(CUDA / 'alexnet_sync')} --name imp").success
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("linked", [True, False], ids=["link", "file"])
def test_another_applications_database_is_never_adopted_as_the_history(shell, tmp_path, linked):
    import sqlite3

    other = tmp_path / "app.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE accounts (id INTEGER, owner TEXT)")
    db.close()
    before = other.read_bytes()
    (tmp_path / "runs").mkdir()
    history = tmp_path / "runs" / "history.sqlite"
    if linked:
        history.symlink_to(other)
    else:
        other.rename(history)
        other = history
    result = shell.run_cell("%npuruns")
    assert result.error_in_exec is not None and "npumagic" in str(result.error_in_exec)
    assert "Traceback" not in str(result.error_in_exec)
    assert other.read_bytes() == before  # no tables, no user_version, no WAL mode written into it


def test_a_planted_wal_link_is_not_written_through(shell, tmp_path):
    victim = tmp_path / "victim.bin"
    victim.write_bytes(b"someone else's file")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "history.sqlite-wal").symlink_to(victim)
    result = shell.run_cell("%npuruns")
    assert result.error_in_exec is not None and "symbolic link" in str(result.error_in_exec)
    assert victim.read_bytes() == b"someone else's file"


def test_a_note_is_kept_as_written_and_bounded(trainer):
    from IPython.core.error import UsageError

    assert trainer.run_cell(f"%%npuprofile {FAST} --name r1\ntrain_step()").success
    trainer.run_cell("x = 'expanded'")
    # a note is taken as written: IPython's $x / {x} expansion (quadratic in the line) is not applied
    trainer.run_line_magic("npunote", 'r1 "costs $x and {x}"')
    assert _runs(trainer).loc["r1", "note"] == "costs $x and {x}"
    # a note past 20000 characters is refused before it is parsed (a 1 MB one never returned)
    with pytest.raises(UsageError, match="at most 20000 characters"):
        trainer.run_line_magic("npunote", 'r1 "' + "word " * 6000 + '"')


# -- %npuload of odd folder names, and of a folder with more than traces --------------------------
def _trace_folder(where):
    import shutil

    from ..conftest import CUDA, need

    where.mkdir()
    for f in need(CUDA / "alexnet_sync").iterdir():
        shutil.copy(f, where)
    return where


@pytest.mark.parametrize("folder, name", [("日本語", "loaded"), ("a..b", "a.b")], ids=["japanese", "dots"])
def test_npuload_derives_a_valid_name_from_any_folder_name(shell, tmp_path, folder, name):
    _trace_folder(tmp_path / folder)
    result = shell.run_cell(f"%npuload {folder}/")
    assert result.success, result.error_in_exec
    assert name in _runs(shell).index


def test_npuload_of_a_folder_whose_name_is_not_utf8_is_one_clear_error(shell, tmp_path):
    import os

    from IPython.core.error import UsageError

    folder = os.fsdecode(b"bad\xff")
    _trace_folder(tmp_path / folder)
    result = shell.run_cell(f"%npuload {folder}/")
    assert isinstance(result.error_in_exec, UsageError), result.error_in_exec
    assert "bad\\xff: the path is not UTF-8" in str(result.error_in_exec)


def test_a_config_json_beside_the_trace_is_not_read_as_one(shell, tmp_path):
    folder = _trace_folder(tmp_path / "job")
    (folder / "config.json").write_text('{"model": "bert", "lr": 0.1}')
    result = shell.run_cell("%npuload job --name job")
    assert result.success, result.error_in_exec
    assert _runs(shell).loc["job", "status"] == "ok"


# -- bounded memory ----------------------------------------------------------------------------
def _stored_summary(shell, tmp_path, change):
    """Profile run r1, then replace its stored Summary with ``change(stored bytes)``."""
    import sqlite3

    assert shell.run_cell(f"%%npuprofile {FAST} --name r1\ntrain_step()").success
    with sqlite3.connect(tmp_path / "runs" / "history.sqlite") as db:
        (data,) = db.execute("SELECT data FROM summaries").fetchone()
        db.execute("UPDATE summaries SET data = ?", (change(data),))
    db.close()


def _peak_during(shell, line: str) -> tuple[int, object]:
    import tracemalloc


    shell.magics_manager.registry["NpuMagics"]._session.runs._summaries.clear()  # read from the history
    tracemalloc.start()
    try:
        result = shell.run_cell(line)
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


def _zlib_bomb(_data: bytes) -> bytes:
    import zlib

    packer = zlib.compressobj(9)
    parts = [packer.compress(b'{"format": 2, "summary": {"meta": "')]
    zeros = b"0" * 2**20
    parts += [packer.compress(zeros) for _ in range(512)]  # 512 MiB inflated, 0.5 MB stored
    return b"".join(parts) + packer.compress(b'"}}') + packer.flush()


def _claims_rows(data: bytes) -> bytes:
    import json
    import zlib

    doc = json.loads(zlib.decompress(data))
    doc["summary"]["steps"]["rows"] = 12_000_000
    return zlib.compress(json.dumps(doc).encode())


@pytest.mark.parametrize("change", [_zlib_bomb, _claims_rows], ids=["zlib-bomb", "claimed-rows"])
def test_a_hostile_stored_summary_is_refused_before_its_memory_is_spent(trainer, tmp_path, change):
    # GIVEN a run whose stored Summary was replaced by a zlib bomb or claims 12 million steps
    _stored_summary(trainer, tmp_path, change)
    # WHEN it is advised on THEN the Summary is re-read from the run's trace, in bounded memory
    peak, result = _peak_during(trainer, "%npuadvise r1")
    assert result.success, result.error_in_exec
    assert peak < 200 * 2**20, f"{peak / 2**20:.0f} MiB"


def test_a_ctrl_c_cutting_the_closing_short_is_recorded_at_the_next_magic(trainer, monkeypatch, kernel_sigint):
    # GIVEN a Ctrl-C while the run is recorded, and another landing just as npumagic starts to
    # record that (before it holds Ctrl-C back: a late burst of clicks on the interrupt button)
    from npumagic.recorder import Recorder

    def cut_short(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Recorder, "_record", cut_short)
    monkeypatch.setattr(Recorder, "_close", cut_short)
    result = trainer.run_cell(f"%%npuprofile {FAST} --name late\ntrain_step()")
    monkeypatch.undo()
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    # WHEN the user runs the next magic THEN the run is interrupted, not 'running' for the kernel's life
    assert _runs(trainer).loc["late", "status"] == "interrupted"


def test_a_magic_inside_the_profiled_cell_leaves_the_live_run_running(trainer):
    cell = ("train_step()\n"
            "seen = get_ipython().run_line_magic('npuruns', '').data.set_index('name').loc['live', 'status']")
    assert trainer.run_cell(f"%%npuprofile {FAST} --name live\n{cell}").success
    assert trainer.user_ns["seen"] == "running"
    assert _runs(trainer).loc["live", "status"] == "ok"


def test_an_error_naming_a_hostile_file_name_shows_no_escape_sequence(shell, tmp_path):
    # GIVEN a folder whose name holds a screen clear and OSC 52 (no trace in it)
    folder = tmp_path / "job\x1b[2J\x1b]52;c;cm0=\x07"
    folder.mkdir()
    result = shell.run_cell("%npuload " + folder.name)
    assert result.error_in_exec is not None
    message = str(result.error_in_exec)
    assert "no profiler output found" in message and "\x1b" not in message and "\x07" not in message
