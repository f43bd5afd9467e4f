"""Nothing deleted or written outside its place, no run left 'running', no raw traceback: the
adversarial cases of issue 13 through a real shell and the real CPU profiler."""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest
from IPython.core.error import UsageError

from ..conftest import CUDA, need

FAST = "--repeat-cell --wait 0 --warmup 0 --steps 1 --no-plot --quiet"


def _profile(shell, options: str, body: str = "train_step()"):
    return shell.run_cell(f"%%npuprofile {FAST} {options}\n{body}")


def _runs(shell):
    return shell.run_line_magic("npuruns", "").data.set_index("name")


def _refused(shell, line: str, match: str):
    result = shell.run_cell(f"%{line}")
    assert isinstance(result.error_in_exec, UsageError), result.error_in_exec
    assert pytest.raises(UsageError, shell.run_line_magic, *line.split(" ", 1)).match(match)


# -- %npurm --files ---------------------------------------------------------------------------------
def test_rm_files_deletes_the_directory_npumagic_created_then_the_row(trainer, tmp_path):
    assert _profile(trainer, "--name mine").success
    run_dir = tmp_path / "runs" / "mine"
    assert any(run_dir.rglob("*.pt.trace.json"))
    trainer.run_line_magic("npurm", "mine --files")
    assert not run_dir.exists()
    assert "mine" not in _runs(trainer).index
    assert (tmp_path / "runs" / "history.sqlite").exists()


@pytest.mark.parametrize("out", ["victim", ".", "runs"], ids=["existing-dir", "notebook-folder", "output-dir"])
def test_rm_files_refuses_a_directory_it_did_not_create(trainer, tmp_path, out):
    # GIVEN a directory that existed before the run (the user's, the notebook's, the output dir)
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "precious.txt").write_text("keep me")
    (tmp_path / "notebook.ipynb").write_text("{}")
    assert _profile(trainer, f"--name r1 --out {out}").success
    # WHEN the run is removed with --files THEN it is refused, every file stays, the row stays
    _refused(trainer, "npurm r1 --files", "npumagic did not create it")
    assert (tmp_path / "victim" / "precious.txt").read_text() == "keep me"
    assert (tmp_path / "notebook.ipynb").exists() and (tmp_path / "runs" / "history.sqlite").exists()
    assert "r1" in _runs(trainer).index


def test_rm_files_refuses_a_created_directory_outside_the_output_dir(trainer, tmp_path):
    assert _profile(trainer, "--name away --out elsewhere/away").success
    _refused(trainer, "npurm away --files", "not inside the output directory")
    assert (tmp_path / "elsewhere" / "away").is_dir()


def test_rm_files_does_not_trust_a_run_dir_edited_in_the_history(trainer, tmp_path):
    assert _profile(trainer, "--name edited").success
    (tmp_path / "important").mkdir()
    with sqlite3.connect(tmp_path / "runs" / "history.sqlite") as db:
        db.execute("UPDATE runs SET run_dir = ? WHERE name = 'edited'", (str(tmp_path / "important"),))
    _refused(trainer, "npurm edited --files", "not inside the output directory")
    assert (tmp_path / "important").is_dir()
    with sqlite3.connect(tmp_path / "runs" / "history.sqlite") as db:  # another run's directory
        db.execute("UPDATE runs SET run_dir = ? WHERE name = 'edited'", (str(tmp_path / "runs"),))
    _refused(trainer, "npurm edited --files", "not inside the output directory")


def test_rm_files_refuses_an_imported_run_and_figures_of_imports_stay_out_of_the_input(plots, tmp_path):
    shell = plots
    # GIVEN a copy of a real CUDA trace folder, imported with figures
    src = tmp_path / "input"
    shutil.copytree(need(CUDA / "ns_resolution"), src)
    before = sorted(p.name for p in src.rglob("*"))
    report = shell.run_line_magic("npuload", f"{src} --name imported")
    # THEN its figures are under the output dir, the input folder is untouched
    assert report.figures and all(tmp_path / "runs" in f.path.parents for f in report.figures)
    assert sorted(p.name for p in src.rglob("*")) == before
    _refused(shell, "npurm imported --files", "npumagic did not create it")
    assert sorted(p.name for p in src.rglob("*")) == before


# -- names that become paths ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["/tmp/x", "../../x", "a/b", "..", ".hidden", "x" * 65, "a b", "r\n1"])
def test_a_name_that_is_not_a_plain_name_is_refused_everywhere(trainer, tmp_path, name):
    src = tmp_path / "input"
    shutil.copytree(need(CUDA / "ns_resolution"), src)
    quoted = json.dumps(name)
    with pytest.raises(UsageError, match="invalid --name"):
        trainer.run_line_magic("npuload", f"{src} --name {quoted}")
    with pytest.raises(UsageError, match="invalid --name"):
        trainer.run_cell_magic("npuprofile", f"{FAST} --name {quoted}", "train_step()")
    assert trainer.user_ns["iterations"] == 0  # refused before the cell ran
    assert len(_runs(trainer)) == 0


@pytest.mark.parametrize("name", ["/tmp/x", "../../x", "a/b", "..", ".hidden", ""])
def test_the_store_refuses_such_a_name_whoever_calls_it(tmp_path, name):
    from npumagic.history import HistoryStore
    from npumagic.names import BadName

    with pytest.raises(BadName, match="invalid run name"):
        HistoryStore(tmp_path).reserve(name)


@pytest.mark.parametrize("folder", ["runs/first", "job"], ids=["another-runs-folder", "a-torch-npu-job"])
def test_out_into_a_folder_holding_profiler_output_is_refused_before_the_cell_runs(trainer, tmp_path, folder):
    # GIVEN a folder with profiler output: another run's, or a torch_npu rank
    assert _profile(trainer, "--name first").success
    (tmp_path / "job" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    iterations = trainer.user_ns["iterations"]
    # WHEN a run is sent there THEN it is refused, nothing runs, nothing is recorded
    result = _profile(trainer, f"--name second --out {folder}")
    assert isinstance(result.error_in_exec, UsageError) and "already holds profiler output" in str(result.error_in_exec)
    assert trainer.user_ns["iterations"] == iterations and "second" not in _runs(trainer).index


# -- no run left 'running' -------------------------------------------------------------------------
def test_an_unwritable_out_records_the_run_as_failed(trainer, tmp_path):
    (tmp_path / "a_file").write_text("")
    result = _profile(trainer, "--name blocked --out a_file/sub")
    assert isinstance(result.error_in_exec, UsageError)
    assert "cannot write the run's profiler output" in str(result.error_in_exec)
    assert _runs(trainer).loc["blocked", "status"] == "failed"
    assert trainer.user_ns["iterations"] == 0


def _export_raises(monkeypatch, exc: BaseException):
    import torch.profiler.profiler as tp

    def export(self, path, *args, **kwargs):
        raise exc

    monkeypatch.setattr(tp.profile, "export_chrome_trace", export)


def test_a_second_ctrl_c_during_the_trace_export_still_records_the_run(trainer, monkeypatch):
    # GIVEN the user's Ctrl-C in the cell, and a second one landing inside the profiler's export
    _export_raises(monkeypatch, KeyboardInterrupt())
    trainer.run_cell("calls = 0\ndef step_then_ctrl_c():\n    global calls\n    calls += 1\n    train_step()\n"
                     "    if calls == 2:\n        raise KeyboardInterrupt")
    result = trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --warmup 0 --steps 3 --no-plot --quiet --name cut\n"
                              "step_then_ctrl_c()")
    # THEN the cell fails with the interrupt, the run is recorded as interrupted, the next one works
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert _runs(trainer).loc["cut", "status"] == "interrupted"
    monkeypatch.undo()
    assert _profile(trainer, "--name after").success
    assert _runs(trainer).loc["after", "status"] == "ok"


def test_a_burst_of_ctrl_c_while_the_status_is_written_still_records_the_run(trainer, monkeypatch):
    # GIVEN a Ctrl-C in the export, and another real one (SIGINT) landing while npumagic writes
    # the run's status: a burst of clicks on Jupyter's interrupt button
    import os
    import signal

    from npumagic.history import HistoryStore

    _export_raises(monkeypatch, KeyboardInterrupt())
    finish = HistoryStore.finish

    def finish_under_a_ctrl_c(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return finish(self, *args, **kwargs)

    monkeypatch.setattr(HistoryStore, "finish", finish_under_a_ctrl_c)
    kernels = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a kernel has it (a test worker may not)
    try:
        result = _profile(trainer, "--name burst")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    finally:
        signal.signal(signal.SIGINT, kernels)
    # THEN the cell fails with the interrupt and the run is recorded, not left 'running'
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert _runs(trainer).loc["burst", "status"] == "interrupted"


def test_a_held_ctrl_c_is_left_to_the_handler_in_place():
    import os
    import signal

    from npumagic.interrupts import held_interrupts

    before = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # ignored before: still ignored, not turned into an error
        with held_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        seen = []
        signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
        with held_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            assert seen == []  # held while the body runs
        assert seen == [signal.SIGINT]  # then delivered, once
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("exc, status", [(KeyboardInterrupt(), "interrupted"), (RuntimeError("disk full"), "failed")],
                         ids=["ctrl-c", "error"])
def test_a_failing_export_records_the_run(trainer, monkeypatch, exc, status):
    _export_raises(monkeypatch, exc)
    result = _profile(trainer, "--name exported")
    assert type(result.error_in_exec) is type(exc)
    assert _runs(trainer).loc["exported", "status"] == status


def test_profiling_inside_an_active_torch_profiler_is_refused_and_keeps_the_users_profile(trainer):
    result = trainer.run_cell(
        "import torch.profiler\n"
        "with torch.profiler.profile() as users:\n"
        "    train_step()\n"
        "    try:\n"
        "        get_ipython().run_line_magic('npusteps', '--steps 1 --wait 0 --warmup 0 --no-plot train_step()')\n"
        "    except Exception as exc:\n"
        "        refused = exc\n"
        "    train_step()\n"
        "names = {e.name for e in users.events()}")
    assert result.success, result.error_in_exec
    refused = trainer.user_ns["refused"]
    assert isinstance(refused, UsageError) and "torch.profiler session is already active" in str(refused)
    assert "aten::addmm" in trainer.user_ns["names"]  # the user's profile survived
    assert trainer.user_ns["iterations"] == 2  # the statement never ran
    assert len(_runs(trainer)) == 0


# -- escaping ---------------------------------------------------------------------------------------
EVIL = "<img src=x onerror=alert(1)>"


def test_html_of_every_report_escapes_text_from_the_trace(shell, tmp_path):
    from ..fuzz_corpus import kineto_trace

    trace = kineto_trace(deviceProperties=[{"name": EVIL}])
    for e in trace["traceEvents"]:
        if e["name"] == "gemm":
            e["name"] = f"<script>alert(1)</script>{EVIL}"
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "x.pt.trace.json").write_text(json.dumps(trace))
    report = shell.run_line_magic("npuload", f"{tmp_path / 'evil'} --name evil --no-plot")
    pages = [report._repr_html_(), report.summary._repr_html_(), report.verdict._repr_html_(),
             shell.run_line_magic("npuadvise", "evil --all")._repr_html_()]
    for page in pages:
        assert "<img src=x" not in page and "<script>" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in report.summary._repr_html_()


def test_export_md_escapes_names_notes_and_kernel_text_and_fences_the_source(trainer, tmp_path):
    source = "x = '''\n```\n# not a heading\n'''\ntrain_step()"
    assert trainer.run_cell(f"%%npuprofile {FAST} --name r1\n{source}").success
    trainer.run_line_magic("npunote", 'r1 "# Heading | <b>bold</b>\n- item"')
    trainer.run_line_magic("npuexport", f"--md {tmp_path / 'log.md'}")
    text = (tmp_path / "log.md").read_text()
    lines = text.splitlines()
    assert not any(line.startswith("# Heading") or "<b>" in line for line in lines)
    assert r"# Heading \| &lt;b>bold&lt;/b> - item" in text  # mid-line: no heading, no tag, no cell's end
    # the source sits whole inside a fence longer than the backticks it holds
    assert "````python\n" + source.strip() + "\n````" in text
