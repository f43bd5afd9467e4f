"""`npumagic run -- CMD`: real commands in real processes, the capture injected at start-up,
the run recorded in the history, npumagic exiting with the command's own status."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from npumagic.history import HistoryStore
from npumagic.jsonout import SCHEMA

TRAIN = textwrap.dedent("""
    import sys, torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    for i in range(8):
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step(); opt.zero_grad()
    print("trained", flush=True)
""")


def npumagic(*args: str, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "npumagic.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, **kwargs)


def script(tmp_path: Path, body: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def runs(out: Path, cwd: Path) -> list[dict]:
    listed = npumagic("runs", str(out), "--json", cwd=cwd)
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)["runs"]


def test_a_plain_script_is_captured_and_recorded(tmp_path):
    # GIVEN a training script that knows nothing of npumagic
    script(tmp_path, TRAIN)
    # WHEN npumagic runs it
    done = npumagic("run", "--out", "out", "--name", "plain", "--", sys.executable, "train.py", cwd=tmp_path,
                    env={**os.environ, "OMP_NUM_THREADS": "1"})
    # THEN the script ran as usual, its trace is in the run directory, the step table and the
    # checklist are printed, and the run is in the history with its command, folder and environment
    assert done.returncode == 0, done.stderr
    assert "trained" in done.stdout
    assert "per-step time" in done.stdout and "1. Baseline" in done.stdout
    assert len(list((tmp_path / "out" / "plain").glob("*.pt.trace.json"))) == 1
    (run,) = runs(tmp_path / "out", tmp_path)
    assert (run["name"], run["status"], run["steps"]) == ("plain", "ok", 3)
    stored = HistoryStore(tmp_path / "out", create=False).get("plain")
    assert stored.arguments["command"] == [sys.executable, "train.py"]
    assert stored.arguments["cwd"] == str(tmp_path) and stored.arguments["ranks"] == [0]
    assert stored.environment["OMP_NUM_THREADS"] == "1"
    assert stored.source.endswith("train.py") and stored.backend == "cpu"


def test_run_json_is_one_document_with_the_commands_output_on_stderr(tmp_path):
    script(tmp_path, TRAIN)
    done = npumagic("run", "--out", "out", "--name", "plain", "--json", "--", sys.executable, "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["schema"], doc["kind"], doc["status"], doc["exit_status"]) == (SCHEMA, "run", "ok", 0)
    (run,) = doc["runs"]
    assert (run["name"], run["status"], len(run["steps"])) == ("plain", "ok", 3)
    assert run["checklist"]["bottleneck"] and "trained" in done.stderr


def test_a_script_that_exits_3_makes_npumagic_exit_3_and_the_run_failed(tmp_path):
    script(tmp_path, TRAIN + "sys.exit(3)\n")
    done = npumagic("run", "--out", "out", "--", sys.executable, "train.py", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    (run,) = runs(tmp_path / "out", tmp_path)
    assert (run["status"], run["steps"]) == ("failed", 3)  # what it recorded before it exited is kept


def test_a_script_that_raises_is_failed_with_its_error(tmp_path):
    script(tmp_path, TRAIN + "1 / 0\n")
    done = npumagic("run", "--out", "out", "--name", "boom", "--", sys.executable, "train.py", cwd=tmp_path)
    assert done.returncode == 1
    assert "ZeroDivisionError" in done.stderr  # the script's own traceback, untouched
    assert runs(tmp_path / "out", tmp_path)[0]["status"] == "failed"
    assert "ZeroDivisionError: division by zero" in HistoryStore(tmp_path / "out", create=False).get("boom").message


def test_ctrl_c_reaches_the_script_and_the_run_is_interrupted(tmp_path):
    # GIVEN a long training loop run by npumagic in its own process group (as a terminal runs it)
    script(tmp_path, TRAIN.replace("range(8)", "range(100000)").replace(
        "opt.step(); opt.zero_grad()", "opt.step(); opt.zero_grad()\n    if i == 10: open('ready', 'w').close()"))
    proc = subprocess.Popen([sys.executable, "-m", "npumagic.cli", "run", "--out", "out", "--name", "stopped", "--",
                             sys.executable, "train.py"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / "ready").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    # WHEN Ctrl-C is pressed: the terminal sends SIGINT to the whole group
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    # THEN the script stops with its KeyboardInterrupt, npumagic exits as a shell reports it,
    # and the run is recorded as interrupted, with the window it completed
    assert "KeyboardInterrupt" in err
    assert proc.returncode == 128 + signal.SIGINT, err
    (run,) = runs(tmp_path / "out", tmp_path)
    assert (run["status"], run["steps"]) == ("interrupted", 3)


def test_an_interpreter_that_imports_torch_but_never_steps_does_not_import_npumagic(tmp_path):
    # torchrun's launcher and DataLoader workers are such interpreters: they must not pay for npumagic
    done = npumagic("run", "--out", "out", "--", sys.executable, "-c",
                    "import sys, torch; print(sorted(m for m in sys.modules if m.startswith('npumagic')))",
                    cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "[]"
    assert runs(tmp_path / "out", tmp_path)[0]["status"] == "no-steps"
    assert "None" not in done.stdout  # no backend is said where no process stepped


def test_a_loop_without_an_optimizer_is_captured_at_its_npumagic_step_calls(tmp_path):
    script(tmp_path, textwrap.dedent("""
        import torch, npumagic
        model = torch.nn.Linear(16, 1)
        for i in range(8):
            with torch.no_grad():
                model(torch.randn(8, 16))
            npumagic.step()
    """))
    done = npumagic("run", "--out", "out", "--", sys.executable, "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (run,) = runs(tmp_path / "out", tmp_path)
    assert (run["status"], run["steps"]) == ("ok", 3)


def test_npumagic_step_arms_the_capture_where_npumagic_is_found_by_an_import_finder(tmp_path):
    # pip's editable install (and zip or vendored installs) serve npumagic through a finder on
    # sys.meta_path, not through a sys.path entry: the bootstrap must still see the script import it
    site = tmp_path / "site"
    site.mkdir()
    root = Path(__import__("npumagic").__file__).parent
    (site / "sitecustomize.py").write_text(textwrap.dedent(f"""
        import importlib.abc, importlib.util, sys
        class Editable(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "npumagic":
                    return importlib.util.spec_from_file_location(
                        name, {str(root / "__init__.py")!r}, submodule_search_locations=[{str(root)!r}])
        sys.meta_path.insert(0, Editable())
    """))
    script(tmp_path, "import torch, npumagic\nassert 'site' not in npumagic.__spec__.loader.path\n"
                     "for i in range(8):\n    torch.randn(8, 16).sum()\n    npumagic.step()\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = npumagic("run", "--out", "out", "--", sys.executable, "train.py", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    (run,) = runs(tmp_path / "out", tmp_path)
    assert (run["status"], run["steps"]) == ("ok", 3)


def test_an_existing_sitecustomize_still_runs(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import builtins; builtins.CHAINED = True\n")
    script(tmp_path, "print('chained', CHAINED)\n" + TRAIN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    done = npumagic("run", "--out", "out", "--", sys.executable, "train.py", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "chained True" in done.stdout
    assert runs(tmp_path / "out", tmp_path)[0]["status"] == "ok"


@pytest.mark.parametrize("argv, says", [(["--", "no-such-program-xyz"], "command not found: 'no-such-program-xyz'"),
                                        ([], "no command given"),
                                        (["--steps", "0", "--", "true"], "--steps must be >= 1")])
def test_bad_input_is_exit_2_with_one_line(tmp_path, argv, says):
    done = npumagic("run", "--out", "out", *argv, cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"npumagic: error: {says}")
    assert not (tmp_path / "out").exists()  # refused before anything was recorded


DDP = textwrap.dedent("""
    import os, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    model = DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    for i in range(7):
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step(); opt.zero_grad()
    os.write(1, f"rank {dist.get_rank()} trained\\n".encode())  # one write: the two ranks share the pipe
    dist.destroy_process_group()
""")


def torchrun() -> list[str]:
    beside = Path(sys.executable).with_name("torchrun")  # the console script of this environment
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "torch.distributed.run"]


def test_a_torchrun_job_gives_one_trace_per_rank_and_a_two_rank_run(tmp_path):
    # GIVEN an unmodified DistributedDataParallel script on gloo
    script(tmp_path, DDP)
    # WHEN npumagic runs it through torchrun with two ranks (torchrun hands PYTHONPATH on)
    done = npumagic("run", "--out", "out", "--name", "ddp", "--", *torchrun(), "--standalone", "--nproc-per-node", "2",
                    "train.py", cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "120"})
    # THEN each rank wrote its own trace (the launcher none), the run reads as two ranks, and
    # the rank table is printed with both (at 120 columns, with room for their step counts)
    assert done.returncode == 0, done.stderr
    assert "rank 0 trained" in done.stdout and "rank 1 trained" in done.stdout
    assert len(list((tmp_path / "out" / "ddp").glob("*.pt.trace.json"))) == 2
    stored = HistoryStore(tmp_path / "out", create=False)
    assert stored.get("ddp").arguments["ranks"] == [0, 1]
    summary = stored.summary("ddp")
    assert summary.ranks["rank"].tolist() == [0, 1] and (summary.ranks["steps"] == 3).all()
    table = done.stdout[done.stdout.index("\nranks"):].splitlines()
    header = next(i for i, line in enumerate(table) if line.startswith("rank "))  # below the wrapped caption
    assert [line.split()[:2] for line in table[header + 1:header + 3]] == [["0", "3"], ["1", "3"]]
    assert "left out" not in done.stdout
    (run,) = runs(tmp_path / "out", tmp_path)
    assert (run["status"], run["steps"]) == ("ok", 3)


LOOP = textwrap.dedent("""
    import os, time, torch
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    for i in range(100000):
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step(); opt.zero_grad()
        time.sleep(0.002)
        if i == 5: open("ready", "w").close()
        if os.path.exists("stop"): break
""")


def wait_for(condition, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_an_on_demand_job_triggered_twice_gives_two_runs_of_exactly_n_steps(tmp_path):
    # GIVEN a job started on demand: armed, idle
    script(tmp_path, LOOP)
    job = subprocess.Popen([sys.executable, "-m", "npumagic.cli", "run", "--on-demand", "--out", "out", "--name", "job",
                            "--", sys.executable, "train.py"], cwd=tmp_path, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (tmp_path / "ready").exists() or job.poll() is not None, "the job to train")
        assert not list((tmp_path / "out" / "job").rglob("*.pt.trace.json"))  # idle: nothing recorded
        store = tmp_path / "out" / "history.sqlite"
        for n in (1, 2):
            # WHEN it is triggered, and triggered again once that window is recorded
            sent = npumagic("trigger", "out/job", "--steps", "2", *(["--json"] if n == 2 else []), cwd=tmp_path)
            assert sent.returncode == 0, sent.stderr
            if n == 1:
                assert "trigger 1 sent" in sent.stdout
            else:
                assert json.loads(sent.stdout) == {"schema": SCHEMA, "kind": "trigger", "job_dir": "out/job", "id": 2,
                                                   "steps": 2, "into": str(Path("out/job/trigger-2"))}
            wait_for(lambda: store.exists() and len(HistoryStore(tmp_path / "out", create=False).names()) == n,
                     f"window {n} to be recorded")
        (tmp_path / "stop").touch()
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    # THEN the job ran on, and the history has two runs of exactly 2 steps each
    assert job.returncode == 0, err
    listed = runs(tmp_path / "out", tmp_path)
    assert [(r["name"], r["status"], r["steps"]) for r in listed] == [("job.1", "ok", 2), ("job.2", "ok", 2)]
    assert "npumagic trigger" in err and out.count("per-step time") == 2


def test_a_trigger_without_an_on_demand_job_is_exit_2(tmp_path):
    done = npumagic("trigger", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"npumagic: error: {tmp_path}: no on-demand job here")


def test_a_script_with_its_own_profiler_trains_on_and_keeps_its_trace(tmp_path):
    # GIVEN a script that profiles itself with torch.profiler around its whole loop
    script(tmp_path, TRAIN.replace("for i in range(8):", "from torch.profiler import profile\n"
                                   "with profile() as own:\n  for i in range(8):")
           + "print('own events', len(own.events()) > 0)\n")
    # WHEN npumagic runs it
    done = npumagic("run", "--out", "out", "--", sys.executable, "train.py", cwd=tmp_path)
    # THEN npumagic stands aside: the script finishes with its own profile, and the run says why it has no trace
    assert done.returncode == 0, done.stderr
    assert "trained" in done.stdout and "own events True" in done.stdout
    assert "runs its own torch.profiler session" in done.stderr
    (run,) = runs(tmp_path / "out", tmp_path)
    assert run["status"] == "no-trace"


def test_the_dataloader_iterated_before_the_first_step_is_recorded(tmp_path):
    # the loop's `for batch in loader` starts before the first optimizer.step() arms the capture
    data = "torch.utils.data.TensorDataset(torch.randn(64, 16), torch.randn(64, 1))"
    script(tmp_path, TRAIN.replace("for i in range(8):", f"loader = torch.utils.data.DataLoader({data}, batch_size=8)\n"
                                   "for i, (x, y) in enumerate(loader):"))
    done = npumagic("run", "--out", "out", "--name", "loaded", "--", sys.executable, "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (loader,) = HistoryStore(tmp_path / "out", create=False).get("loaded").dataloaders
    assert (loader["batch_size"], loader["num_workers"], loader["dataset"]) == (8, 0, "TensorDataset")


DDP_LOOP = textwrap.dedent("""
    import os, time, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    model = DistributedDataParallel(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y, stop = torch.randn(8, 16), torch.randn(8, 1), torch.zeros(1)
    for i in range(100000):
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step(); opt.zero_grad()
        time.sleep(0.002)
        if i == 5 and dist.get_rank() == 0: open("ready", "w").close()
        stop[0] = float(os.path.exists("stop")); dist.all_reduce(stop)  # both ranks stop at the same step
        if stop[0] > 0: break
    dist.destroy_process_group()
    # torch's own teardown at interpreter exit aborted a rank once in four loaded suite runs
    # ("terminate called without an active exception", rank 1, which runs no npumagic thread);
    # this job's window is recorded by then, so it leaves as a job killed after its work would
    os._exit(0)
""")


def test_a_triggered_torchrun_job_records_one_window_of_both_ranks(tmp_path):
    script(tmp_path, DDP_LOOP)
    job = subprocess.Popen([sys.executable, "-m", "npumagic.cli", "run", "--on-demand", "--out", "out", "--name", "ddp",
                            "--", *torchrun(), "--standalone", "--nproc-per-node", "2", "train.py"], cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        wait_for(lambda: (tmp_path / "ready").exists() or job.poll() is not None, "the job to train")
        assert npumagic("trigger", "out/ddp", "--steps", "2", cwd=tmp_path).returncode == 0
        wait_for(lambda: (tmp_path / "out" / "history.sqlite").exists()
                 and len(HistoryStore(tmp_path / "out", create=False).names()) == 1, "the window to be recorded")
        (tmp_path / "stop").touch()
        _, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, err
    stored = HistoryStore(tmp_path / "out", create=False)
    assert stored.get("ddp.1").arguments["ranks"] == [0, 1]
    assert stored.summary("ddp.1").ranks["steps"].tolist() == [2, 2]
    assert len(list((tmp_path / "out" / "ddp" / "trigger-1").glob("*.pt.trace.json"))) == 2


def test_the_cli_names_no_magic_and_a_taken_name_gets_the_next_free_one(tmp_path):
    # GIVEN a history holding a run named plain
    script(tmp_path, TRAIN)
    assert npumagic("run", "--out", "out", "--name", "plain", "--", sys.executable, "train.py", cwd=tmp_path).returncode == 0
    # WHEN the CLI records another under that name
    done = npumagic("run", "--out", "out", "--name", "plain", "--", sys.executable, "train.py", cwd=tmp_path,
                    env={**os.environ, "COLUMNS": "100"})
    # THEN it is plain-2, and the report says nothing a terminal cannot do (no %npunote)
    assert done.returncode == 0, done.stderr
    assert "recorded as plain-2" in done.stdout and "%npu" not in done.stdout + done.stderr
    # and it is verified against the run before it, as a notebook's second run is against its first
    verify = " ".join(done.stdout[done.stdout.index("4. Verify"):done.stdout.index("5. Record")].split())
    assert "no baseline yet" not in verify and "plain" in verify.replace("plain-2", "")
    # its sentences wrap to the terminal as analyze's do (a path, never broken, may overrun it)
    assert max(len(line) for line in done.stdout.splitlines() if "/" not in line) <= 100


def test_another_script_is_no_baseline_unless_named(tmp_path):
    # GIVEN a history holding a run of train.py
    script(tmp_path, TRAIN)
    script(tmp_path, TRAIN, name="other.py")
    assert npumagic("run", "--out", "out", "--name", "plain", "--", sys.executable, "train.py", cwd=tmp_path).returncode == 0
    # WHEN another script is run: it is verified against nothing (a different command is no baseline)
    done = npumagic("run", "--out", "out", "--", sys.executable, "other.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "no baseline yet" in " ".join(done.stdout.split())
    # WHEN it is named as the baseline: the command line that changed reads as one
    done = npumagic("run", "--out", "out", "--baseline", "plain", "--", sys.executable, "other.py", cwd=tmp_path)
    assert f"option command: {sys.executable} train.py -> {sys.executable} other.py" in " ".join(done.stdout.split())


# a command that counts the SIGINTs it gets (for a second after the first) into a file, then exits 130
COUNTER = textwrap.dedent("""
    import signal, sys, time
    got = []
    signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    open("ready", "w").close()
    while not got:
        time.sleep(0.02)
    time.sleep(1.0)  # a second SIGINT, were one sent, arrives meanwhile
    open("count", "w").write(str(len(got)))
    sys.exit(130)
""")


def _wait_for(path: Path, proc) -> None:
    deadline = time.monotonic() + 120
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists(), "the command never started"


@pytest.mark.parametrize("to", ["npumagic alone", "its process group"])
def test_a_sigint_reaches_the_command_once_and_npumagic_exits_with_its_status(tmp_path, to):
    # GIVEN a command that handles SIGINT, run by npumagic with no terminal (CI, a harness)
    script(tmp_path, COUNTER)
    proc = subprocess.Popen([sys.executable, "-m", "npumagic.cli", "run", "--out", "out", "--name", "stopped", "--",
                             sys.executable, "train.py"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    _wait_for(tmp_path / "ready", proc)
    # WHEN SIGINT is sent to npumagic's pid only (kill -INT PID), or to its whole group (timeout -s INT)
    (os.kill if to == "npumagic alone" else os.killpg)(proc.pid, signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=120)
    finally:  # a SIGINT that never reached the command leaves it waiting: nothing is left behind
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # THEN the command got it exactly once, npumagic exits with the command's own status (130),
    # and the run is recorded as interrupted
    assert (tmp_path / "count").read_text() == "1"
    assert proc.returncode == 130, err
    (run,) = runs(tmp_path / "out", tmp_path)
    assert run["status"] == "interrupted"


@pytest.mark.parametrize("how", ["kill -INT PID", "Ctrl-C typed"])
def test_on_a_terminal_a_sigint_reaches_the_command_once(tmp_path, how):
    # GIVEN npumagic in the foreground of a terminal (a pseudo-terminal), the command in its group
    pty = pytest.importorskip("pty")
    script(tmp_path, COUNTER)
    try:
        pid, fd = pty.fork()
    except OSError as exc:
        pytest.skip(f"no pseudo-terminal here: {exc}")
    if pid == 0:  # the child: npumagic, session leader of the terminal
        try:
            os.chdir(tmp_path)
            os.execv(sys.executable, [sys.executable, "-m", "npumagic.cli", "run", "--out", "out", "--",
                                      sys.executable, "train.py"])
        finally:
            os._exit(127)  # never back into pytest
    try:
        output = []

        def drain() -> None:  # the terminal's reader: npumagic's output must not fill it
            import select

            while select.select([fd], [], [], 0)[0]:
                try:
                    output.append(os.read(fd, 65536))
                except OSError:
                    return

        deadline = time.monotonic() + 120
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
            drain()
            time.sleep(0.05)
        # WHEN a process sends SIGINT to npumagic alone, or Ctrl-C is typed (the terminal sends
        # it to the whole foreground group: npumagic and the command)
        if how == "kill -INT PID":
            os.kill(pid, signal.SIGINT)
        else:
            os.write(fd, b"\x03")
        ended, status = 0, 0
        while not ended and time.monotonic() < deadline + 120:
            drain()
            ended, status = os.waitpid(pid, os.WNOHANG)
            time.sleep(0.05)
    finally:
        os.close(fd)
    # THEN the command got it exactly once (never a second, forwarded one), and npumagic exits 130
    shown = b"".join(output).decode(errors="replace")
    assert (tmp_path / "count").read_text() == "1", shown
    assert ended and os.waitstatus_to_exitcode(status) == 130, shown


def test_ctrl_c_with_the_output_piped_exits_with_the_commands_status(tmp_path):
    # GIVEN `npumagic run ... | tee log`: a Ctrl-C stops tee with the command, so npumagic's
    # report meets a pipe without a reader
    script(tmp_path, COUNTER)
    proc = subprocess.Popen([sys.executable, "-m", "npumagic.cli", "run", "--out", "out", "--",
                             sys.executable, "train.py"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    _wait_for(tmp_path / "ready", proc)
    proc.stdout.close()  # the reader has gone
    # WHEN the Ctrl-C reaches the group
    os.killpg(proc.pid, signal.SIGINT)
    err = proc.communicate(timeout=120)[1].decode()
    # THEN npumagic still records the run and exits with the command's 130, not a broken pipe's 1
    assert proc.returncode == 130, err
    assert runs(tmp_path / "out", tmp_path)[0]["status"] == "interrupted"


@pytest.mark.parametrize("make, says", [
    (lambda d: (d / "train.sh").write_text("echo hi\n"), "not executable"),  # no exec bit
    (lambda d: (d / "train.sh").mkdir(), "a directory, not a program"),
    (lambda d: None, "no such file"),
    (lambda d: ((d / "train.sh").write_bytes(b"\x01\x02 no #! line, no ELF"), (d / "train.sh").chmod(0o755)),
     "cannot be started"),  # passes every check; exec() itself refuses it
])
def test_a_command_that_cannot_start_leaves_no_run(tmp_path, make, says):
    # GIVEN a history with one run in it, and a program that cannot be started
    script(tmp_path, "print('ok')\n", name="ok.py")
    assert npumagic("run", "--out", "out", "--name", "first", "--", sys.executable, "ok.py", cwd=tmp_path).returncode == 0
    make(tmp_path)
    # WHEN npumagic is asked to run it
    done = npumagic("run", "--out", "out", "--", "./train.sh", cwd=tmp_path)
    # THEN one line says why, the exit is non-zero, and no failed run is left in the history
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("npumagic: error: ./train.sh: ") and says in line
    assert [r["name"] for r in runs(tmp_path / "out", tmp_path)] == ["first"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir()) == ["first"]


def test_verify_uses_the_latest_run_of_the_same_script_with_other_arguments(tmp_path):
    # GIVEN a history holding runs of train.py and of another script, the latest of train.py with --batch 8
    script(tmp_path, TRAIN)
    script(tmp_path, TRAIN, name="other.py")
    for name, argv in (("b4", ["train.py", "--batch", "4"]), ("b8", ["train.py", "--batch", "8"]),
                       ("other", ["other.py", "--batch", "8"])):
        done = npumagic("run", "--out", "out", "--name", name, "--", sys.executable, *argv, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    # WHEN train.py runs again with one flag changed
    done = npumagic("run", "--out", "out", "--name", "b16", "--", sys.executable, "train.py", "--batch", "16",
                    cwd=tmp_path, env={**os.environ, "COLUMNS": "200"})
    # THEN Verify compares it with b8 (not "no baseline yet", not the other script) and says what changed
    assert done.returncode == 0, done.stderr
    verify = " ".join(done.stdout[done.stdout.index("4. Verify"):done.stdout.index("5. Record")].split())
    assert "no baseline yet" not in verify and "b8" in verify and "b4" not in verify and "other" not in verify
    assert "option command: --batch 8 -> 16" in verify


def test_a_sigterm_to_npumagics_group_still_stops_the_command(tmp_path):
    # GIVEN a command in a process group of its own (npumagic without a terminal)
    script(tmp_path, "import time\nopen('ready', 'w').close()\nwhile True:\n    time.sleep(0.05)\n")
    proc = subprocess.Popen([sys.executable, "-m", "npumagic.cli", "run", "--out", "out", "--",
                             sys.executable, "train.py"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    _wait_for(tmp_path / "ready", proc)
    # WHEN CI cancels the job (timeout's SIGTERM to npumagic's process group)
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        err = proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # THEN npumagic passed it on: the command stopped by SIGTERM, npumagic exits as a shell reports
    # it (128 + 15) and records the run as failed
    assert proc.returncode == 128 + signal.SIGTERM, err
    (run,) = runs(tmp_path / "out", tmp_path)
    assert run["status"] == "failed"
