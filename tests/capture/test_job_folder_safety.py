"""An on-demand job's folder is input anyone who can write it may have planted or edited: the
job's parent, `npumagic trigger` and `%npuattach` read it checked, write their own files
without following a planted link, and a trigger is what it says (taken before the first step,
one at a time, to the job whose pid and start time match)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import psutil
import pytest
from IPython.core.error import UsageError

from npumagic.capture import launch
from npumagic.capture.inject import CONTROL, PROCESSES, write_json
from npumagic.cli import main
from npumagic.errors import NpumagicError
from npumagic.history import HistoryStore

from .test_run_command import LOOP, npumagic, runs, script, wait_for

GOOD_RECORD = {"pid": 4321, "rank": 0, "state": "done", "steps": 2, "recorded": 2, "wanted": 2, "trigger": 1}

# what the attack planted among a trigger's process records, and what else a hand or a planter may leave
BAD_RECORDS = {
    "a list": "[1, 2]",
    "no pid": json.dumps({k: v for k, v in GOOD_RECORD.items() if k != "pid"}),
    "a text rank": json.dumps({**GOOD_RECORD, "rank": "zero"}),
    "a huge pid": json.dumps({**GOOD_RECORD, "pid": 10**40}),
    "a text pid": json.dumps({**GOOD_RECORD, "pid": "12x"}),
    "a true pid": json.dumps({**GOOD_RECORD, "pid": True}),
    "a null state": json.dumps({**GOOD_RECORD, "state": None}),
    "notes of numbers": json.dumps({**GOOD_RECORD, "notes": [1, 2]}),
    "a deep nest": "[" * 100_000 + "]" * 100_000,
    "not JSON": "{'pid': 1",
}


def live_job(folder: Path, **changes) -> Path:
    """A job folder whose job is this test's own process (alive, its start time recorded)."""
    folder.mkdir(parents=True, exist_ok=True)
    job = {"pid": os.getpid(), "started": psutil.Process().create_time(), "command": ["python", "train.py"],
           "steps": 2, "output_dir": str(folder.parent), "created": 0.0}
    (folder / launch.JOB_FILE).write_text(json.dumps({**job, **changes}))
    return folder


def write_job_as_the_job_does(folder: Path) -> None:
    """The job file written as ``npumagic run --on-demand`` writes it: whole, through a
    temporary name (a plain write_text could be read empty, which no job does)."""
    job = {"pid": os.getpid(), "started": psutil.Process().create_time(), "command": ["python", "train.py"],
           "steps": 2, "output_dir": str(folder.parent), "created": 0.0}
    write_json(folder / launch.JOB_FILE, job)


def plant_record(window: Path, name: str, text: str) -> Path:
    (window / PROCESSES).mkdir(parents=True, exist_ok=True)
    path = window / PROCESSES / name
    path.write_text(text)
    return path


# -- the folder's contents: checked, a bad one skipped and said once ---------------------------

@pytest.mark.parametrize("shape", BAD_RECORDS)
def test_a_process_record_of_the_wrong_shape_is_skipped_and_said_once(tmp_path, shape):
    # GIVEN a window holding one good record and one of the wrong shape
    plant_record(tmp_path, "4321.json", json.dumps(GOOD_RECORD))
    bad = plant_record(tmp_path, "9.json", BAD_RECORDS[shape])
    # WHEN the records are read twice (the job's parent reads them every 0.2 s)
    with pytest.warns(UserWarning) as said:
        first = launch.records(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = launch.records(tmp_path)
    # THEN only the good one is read, and the bad one is named once
    assert [r["pid"] for r in first] == [r["pid"] for r in second] == [4321]
    (warning,) = said
    assert str(bad) in str(warning.message) and "skipped" in str(warning.message)


def test_a_link_or_a_fifo_among_the_records_is_not_read(tmp_path):
    secret = tmp_path / "elsewhere.json"
    secret.write_text(json.dumps({**GOOD_RECORD, "pid": 77}))
    (tmp_path / "w" / PROCESSES).mkdir(parents=True)
    (tmp_path / "w" / PROCESSES / "77.json").symlink_to(secret)
    os.mkfifo(tmp_path / "w" / PROCESSES / "78.json")  # opened plainly, this would block the reader for good
    with pytest.warns(UserWarning, match="symbolic link|not a regular file"):
        assert launch.records(tmp_path / "w") == []


def test_a_record_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    # the suite runs as root: the owner check is shown another user by its own source of truth
    plant_record(tmp_path, "4321.json", json.dumps(GOOD_RECORD))
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 4242)
    with pytest.warns(UserWarning, match="owned by another user"):
        assert launch.records(tmp_path) == []


@pytest.mark.parametrize("job, says", [
    ("[1, 2]", "a JSON list, not an object"),
    ('{"command": ["x"], "steps": 2, "output_dir": "o", "started": null}', "it has no 'pid'"),
    ('{"pid": 100000000000000000000000000000, "started": null, "command": ["x"], "steps": 2, "output_dir": "o"}',
     "'pid' must be an integer"),
    ('{"pid": "12", "started": null, "command": ["x"], "steps": 2, "output_dir": "o"}', "'pid' must be an integer"),
    ('{"pid": 1, "started": null, "command": "x", "steps": 2, "output_dir": "o"}', "'command' must be a list of texts"),
    ('{"pid": 1, "started": null, "command": ["x"], "steps": "3", "output_dir": "o"}', "'steps' must be an integer"),
    ('{"pid": 1, "started": null, "command": ["x"], "steps": 2, "output_dir": 5}', "'output_dir' must be a text"),
    ("not json", "not JSON"),
])
def test_trigger_on_a_hand_edited_job_file_is_one_clear_error_line(tmp_path, capsys, job, says):
    # GIVEN a job folder whose job file is not what npumagic wrote
    (tmp_path / launch.JOB_FILE).write_text(job)
    # WHEN it is triggered
    status = main(["trigger", str(tmp_path)])
    # THEN one line names the file and what is wrong in it, exit 2, and nothing is sent
    assert status == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"npumagic: error: {tmp_path}: not a job npumagic started:") and says in line
    assert not (tmp_path / CONTROL).exists()


def test_npuattach_on_a_planted_job_folder_is_a_usage_error(shell, tmp_path):
    live_job(tmp_path / "runs" / "job", pid=[1])
    with pytest.raises(UsageError, match="'pid' must be an integer"):
        shell.run_line_magic("npuattach", "runs/job")
    assert isinstance(shell.run_cell("%npuattach runs/job").error_in_exec, UsageError)


@pytest.mark.parametrize("timeout", ["nan", "-1", "0", "1e300"])
def test_npuattach_refuses_a_timeout_it_cannot_wait(shell, tmp_path, timeout):
    # GIVEN a live job WHEN attached with a wait that is no number of seconds THEN UsageError, no trigger sent
    live_job(tmp_path / "runs" / "job")
    with pytest.raises(UsageError, match="--timeout must be seconds from 0 to"):
        shell.run_line_magic("npuattach", f"runs/job --timeout {timeout}")
    assert isinstance(shell.run_cell(f"%npuattach runs/job --timeout {timeout}").error_in_exec, UsageError)
    assert not (tmp_path / "runs" / "job" / CONTROL).exists()


def test_the_job_file_and_the_trigger_file_of_another_user_are_refused(tmp_path, monkeypatch):
    from npumagic.capture.inject import _read_order

    job = live_job(tmp_path / "job")
    write_json(job / CONTROL, {"id": 1, "steps": 2})
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 4242)
    with pytest.raises(NpumagicError, match="owned by another user"):
        launch.trigger(job, 2)
    assert _read_order(job / CONTROL) is None  # the job's processes take no order from it either


def test_trigger_folders_that_are_no_window_of_the_job_are_passed_over(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "job" / "trigger-3").mkdir(parents=True)
    for name in ("trigger-99999999999999999999", "trigger-07", "trigger-²", "trigger-x"):
        (tmp_path / "job" / name).mkdir()
    (tmp_path / "job" / "trigger-5").symlink_to(tmp_path / "elsewhere")  # a window whose files would be removed with it
    (tmp_path / "job" / "trigger-6").write_text("")
    assert [ident for ident, _ in launch.windows(tmp_path / "job")] == [3]


# -- writing: no planted link followed ---------------------------------------------------------

def test_a_trigger_does_not_write_through_links_planted_at_its_temporary_names(tmp_path):
    # GIVEN links planted beside the control file at the temporary names of this and the next pids
    job = live_job(tmp_path / "job")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    for pid in range(os.getpid(), os.getpid() + 64):
        (job / f".{CONTROL}.{pid}.tmp").symlink_to(victim)
    # WHEN the job is triggered
    assert launch.trigger(job, 2) == 1
    # THEN the link's target is as it was, and the control file is a file of its own
    assert victim.read_text() == "precious"
    assert json.loads((job / CONTROL).read_text())["id"] == 1 and not (job / CONTROL).is_symlink()


def test_write_atomic_never_opens_a_name_already_taken(tmp_path, monkeypatch):
    from npumagic import safeio

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    monkeypatch.setattr(safeio.secrets, "token_hex", lambda n: "0" * 2 * n)  # the planter guessed every name
    (tmp_path / f".out.json.{'0' * 16}.tmp").symlink_to(victim)
    with pytest.raises(FileExistsError):
        safeio.write_atomic(tmp_path / "out.json", "{}")
    assert victim.read_text() == "precious" and not (tmp_path / "out.json").exists()


# -- triggers are what they say ----------------------------------------------------------------

def test_a_reused_pid_is_not_the_job(tmp_path):
    # GIVEN a job file whose pid now belongs to another process (started later than the job did)
    job = live_job(tmp_path / "job", started=psutil.Process().create_time() - 3600)
    # WHEN it is triggered: THEN the job has ended, and nothing is sent
    with pytest.raises(NpumagicError, match="has ended"):
        launch.trigger(job, 2)
    assert not (job / CONTROL).exists()


def test_a_second_trigger_while_the_first_is_pending_is_refused(tmp_path):
    job = live_job(tmp_path / "job")
    assert launch.trigger(job, 2) == 1
    with pytest.raises(NpumagicError, match="trigger 1 is still waiting for the job's next step"):
        launch.trigger(job, 2)
    # once the window is closed (every process's record done) the next one goes
    plant_record(job / "trigger-1", f"{os.getpid()}.json", json.dumps({**GOOD_RECORD, "pid": os.getpid()}))
    assert launch.trigger(job, 2) == 2


def test_of_two_triggers_sent_at_the_same_moment_one_is_sent_and_the_other_refused(tmp_path, monkeypatch):
    # GIVEN two triggers that both read the job's state before either has written (as two shells can)
    job = live_job(tmp_path / "job")
    both_read = threading.Barrier(2)
    read = launch.sent_trigger

    def sent_trigger(run_dir):
        last = read(run_dir)
        both_read.wait(timeout=10)
        return last

    monkeypatch.setattr(launch, "sent_trigger", sent_trigger)
    results: list = []

    def send():
        try:
            results.append(launch.trigger(job, 2))
        except NpumagicError as exc:
            results.append(str(exc))

    threads = [threading.Thread(target=send) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    # THEN one is trigger 1 and the other says it was not sent: no window silently lost
    assert sorted(results, key=lambda r: isinstance(r, str)) == [
        1, f"{job}: another trigger (1) was sent at the same moment; this one is not sent"]
    assert json.loads((job / CONTROL).read_text())["id"] == 1


# -- real jobs ---------------------------------------------------------------------------------

# steps only once a trigger has been sent: the trigger comes before the first step
SLOW_START = textwrap.dedent("""
    import os, time
    while not os.path.exists(os.path.join("out", "job", "npumagic_trigger.json")):
        time.sleep(0.05)
""") + LOOP


def start_job(tmp_path: Path, *command: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "npumagic.cli", "run", "--on-demand", "--out", "out", "--name", "job",
                             "--", *command], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop_after_the_window(job: subprocess.Popen, tmp_path: Path) -> str:
    """Wait until the job's first window is a run in its history (or the job has ended), then stop
    the training; the job's standard error."""
    store = tmp_path / "out" / "history.sqlite"
    wait_for(lambda: job.poll() is not None or (store.exists() and HistoryStore(tmp_path / "out", create=False).names()),
             "the window to be recorded")
    (tmp_path / "stop").touch()
    return job.communicate(timeout=120)[1]


def test_a_trigger_sent_before_the_first_step_captures_the_first_steps(tmp_path):
    # GIVEN a job started in the background and triggered at once, as the README shows
    script(tmp_path, SLOW_START)
    job = start_job(tmp_path, sys.executable, "train.py")
    try:
        sent = npumagic("trigger", "out/job", "--steps", "2", cwd=tmp_path)
        assert sent.returncode == 0, sent.stderr
        # WHEN the job reaches its first steps
        err = stop_after_the_window(job, tmp_path)
    finally:
        if job.poll() is None:
            job.kill()
    # THEN the window is recorded with the steps asked for
    assert job.returncode == 0, err
    assert [(r["name"], r["status"], r["steps"]) for r in runs(tmp_path / "out", tmp_path)] == [("job.1", "ok", 2)]


def test_a_trigger_the_job_never_reached_a_step_for_is_said(tmp_path):
    # GIVEN a job that ends without a step after being triggered (no torch: it never steps)
    script(tmp_path, "import os, time\n"
                     "while not os.path.exists(os.path.join('out', 'job', 'npumagic_trigger.json')): time.sleep(0.05)\n")
    job = start_job(tmp_path, sys.executable, "train.py")
    try:
        assert npumagic("trigger", "out/job", cwd=tmp_path).returncode == 0
        _, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    # THEN the job's end says that trigger captured nothing, and why
    assert job.returncode == 0, err
    assert "trigger 1 captured nothing: no process of the job reached a step boundary" in err


def test_a_job_trains_on_and_records_its_window_among_planted_files(tmp_path):
    # GIVEN a running on-demand job whose folder has files planted in it: a control file that is
    # no trigger, window folders that are none, and records of the wrong shape in its window
    script(tmp_path, LOOP)
    job = start_job(tmp_path, sys.executable, "train.py")
    folder = tmp_path / "out" / "job"
    try:
        wait_for(lambda: (tmp_path / "ready").exists() or job.poll() is not None, "the job to train")
        (folder / CONTROL).write_text("[1]")
        (folder / "trigger-99999999999999999999").mkdir()
        (folder / "trigger-5").symlink_to(tmp_path)
        # WHEN it is triggered and the window's records are joined by planted ones
        sent = npumagic("trigger", "out/job", "--steps", "2", cwd=tmp_path)
        assert sent.returncode == 0, sent.stderr
        for i, text in enumerate(BAD_RECORDS.values()):
            plant_record(folder / "trigger-1", f"{i + 1}.json", text)
        err = stop_after_the_window(job, tmp_path)
    finally:
        if job.poll() is None:
            job.kill()
    # THEN the training ran to its own end, the window is a run, and each planted record was said once
    assert job.returncode == 0, err
    assert "Traceback" not in err
    assert [(r["name"], r["status"], r["steps"]) for r in runs(tmp_path / "out", tmp_path)] == [("job.1", "ok", 2)]
    for i in range(len(BAD_RECORDS)):
        assert err.count(f"{Path('job', 'trigger-1', PROCESSES, f'{i + 1}.json')}:") == 1, err


def test_a_trigger_waits_for_a_job_folder_made_but_not_yet_written(tmp_path):
    # GIVEN a job starting in the same breath: its folder is made, its job file comes a moment later
    folder = tmp_path / "job"
    folder.mkdir()
    writer = threading.Timer(0.5, write_job_as_the_job_does, (folder,))
    writer.start()
    try:
        # WHEN trigger reads it THEN it waits for the file instead of saying there is no job
        assert launch.job_info(folder, wait=30)["pid"] == os.getpid()
    finally:
        writer.join()
    # and a folder that holds something else is refused at once
    with pytest.raises(NpumagicError, match="no on-demand job here"):
        launch.job_info(tmp_path, wait=30)


def test_a_trigger_waits_while_the_job_file_has_only_its_temporary_name(tmp_path):
    # GIVEN a job writing its file: for a moment the folder holds only the temporary name
    folder = tmp_path / "job"
    folder.mkdir()
    temporary = folder / f".{launch.JOB_FILE}.0123456789abcdef.tmp"
    temporary.write_text('{"pid": ')

    def finish() -> None:
        temporary.unlink()
        write_job_as_the_job_does(folder)

    writer = threading.Timer(0.5, finish)
    writer.start()
    try:
        # WHEN trigger reads it THEN it waits for the renamed file rather than saying there is no job
        assert launch.job_info(folder, wait=30)["pid"] == os.getpid()
    finally:
        writer.join()
    # and another temporary file is not the job's: refused at once
    other = tmp_path / "other"
    other.mkdir()
    (other / ".notes.txt.0123456789abcdef.tmp").write_text("")
    with pytest.raises(NpumagicError, match="no on-demand job here"):
        launch.job_info(other, wait=30)
