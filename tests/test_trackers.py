"""Runs logged to experiment trackers, for real: MLflow against a local `mlflow server` this module
starts (SQLite backend, local artifacts, 127.0.0.1 on a free port) and read back through
MlflowClient; W&B in offline mode, its run file read back record by record with wandb's own
protobuf definitions (wandb's public API needs a server; the offline run file is what `wandb sync`
would upload)."""

from __future__ import annotations

import glob
import json
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from .conftest import ROOT, TRAIN_SETUP

NEED_MLFLOW = "need mlflow (the test extra) — pip install -e '.[test]'"
NEED_WANDB = "need wandb (the test extra) — pip install -e '.[test]'"
PROFILE = "r = %%npuprofile --steps 3 --repeat-cell --quiet --name {name}\ntrain_step()"


@pytest.fixture(autouse=True)
def _log_nowhere_after():
    """%config writes the shell's config, which the next %load_ext reads: no later test logs."""
    yield
    from IPython.core.interactiveshell import InteractiveShell

    if InteractiveShell.initialized():
        InteractiveShell.instance().config.NpuMagics.log_to = ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real MLflow tracking server (SQLite, artifacts served from a local folder), stopped after
    the module: its URI."""
    pytest.importorskip("mlflow", reason=NEED_MLFLOW)
    pytest.importorskip("mlflow.server", reason=NEED_MLFLOW.replace("mlflow (", "mlflow's server (full mlflow, "))
    where = tmp_path_factory.mktemp("mlflow")
    port = _free_port()
    log = open(where / "server.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                               "--workers", "1", "--backend-store-uri", f"sqlite:///{where / 'mlflow.db'}",
                               "--artifacts-destination", str(where / "artifacts")],
                              stdout=log, stderr=subprocess.STDOUT, cwd=where, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180  # the first start migrates the SQLite schema
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start: {(where / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield uri
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
        log.close()


@pytest.fixture
def mlflow_uri(mlflow_server, monkeypatch, request):
    """The server as the tracking URI, an experiment of this test's own."""
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", request.node.name[:200])
    yield mlflow_server  # by the environment, as a user sets it (mlflow.set_tracking_uri would outlive the test)
    while mlflow.active_run() is not None:
        mlflow.end_run()


def _runs(experiment: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    found = client.get_experiment_by_name(experiment)
    return client, (client.search_runs([found.experiment_id]) if found is not None else [])


def _artifacts(client, run_id: str, path: str = "npumagic") -> dict[str, int]:
    out = {}
    for item in client.list_artifacts(run_id, path):
        out.update(_artifacts(client, run_id, item.path) if item.is_dir else {item.path: item.file_size})
    return out


def test_every_profiled_run_is_logged_to_mlflow_with_params_step_metrics_verdict_and_artifacts(plots, mlflow_uri,
                                                                                                 request):
    # GIVEN a notebook logging every run to MLflow
    assert plots.run_cell(TRAIN_SETUP).success
    plots.run_line_magic("config", 'NpuMagics.log_to = "mlflow"')
    # WHEN a cell is profiled
    assert plots.run_cell(PROFILE.format(name="base")).success
    report = plots.user_ns["r"]
    # THEN one MLflow run holds it, read back from the server
    client, runs = _runs(request.node.name[:200])
    assert [run.info.run_name for run in runs] == ["base"]
    run = runs[0]
    params = run.data.params
    assert params["npumagic.config.steps"] == "3" and params["npumagic.backend"] == "cpu"
    assert params["npumagic.version.torch"] == report.run.versions["torch"]
    assert run.data.tags["npumagic.bottleneck"] == report.verdict.bottleneck
    steps = report.summary.steps
    for metric, column in (("wall_ms", "wall_us"), ("compute_ms", "computing_us"), ("idle_ms", "idle_us"),
                           ("busy_ms", "busy_us")):
        history = client.get_metric_history(run.info.run_id, f"npumagic/{metric}")
        assert [m.step for m in sorted(history, key=lambda m: m.step)] == steps["step"].tolist()
        assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx((steps[column] / 1000).tolist())
    util = client.get_metric_history(run.info.run_id, "npumagic/device_util")
    assert len(util) == len(steps)
    files = _artifacts(client, run.info.run_id)
    assert {"npumagic/base/verdict.txt", "npumagic/base/base.json", "npumagic/base/figures/timeline.png",
            "npumagic/base/figures/steps.png"} <= set(files)
    trace = [f for f in files if f.startswith("npumagic/base/profiler/") and f.endswith(".pt.trace.json")]
    assert len(trace) == 1 and files[trace[0]] > 0  # the profiler's output directory
    verdict = client.download_artifacts(run.info.run_id, "npumagic/base/verdict.txt", ".")
    assert Path(verdict).read_text() == str(report.verdict)
    doc = json.loads(Path(client.download_artifacts(run.info.run_id, "npumagic/base/base.json", ".")).read_text())
    assert doc["kind"] == "logged_run" and doc["run"]["name"] == "base" and len(doc["run"]["steps"]) == len(steps)


def test_a_comparison_is_logged_on_the_later_run(shell, mlflow_uri, request):
    # GIVEN two runs logged to MLflow
    assert shell.run_cell(TRAIN_SETUP).success
    shell.run_line_magic("config", 'NpuMagics.log_to = "mlflow"')
    assert shell.run_cell(PROFILE.format(name="before")).success
    assert shell.run_cell(PROFILE.format(name="after")).success
    # WHEN they are compared
    assert shell.run_cell("c = %npucompare before after").success
    comparison = shell.user_ns["c"].comparison
    # THEN the result is on the later run's tracker run, none on the earlier's, and no third run appears
    client, runs = _runs(request.node.name[:200])
    by_name = {run.info.run_name: run for run in runs}
    assert sorted(by_name) == ["after", "before"]
    later, earlier = by_name["after"], by_name["before"]
    assert later.data.metrics["npumagic/compare.speedup"] == pytest.approx(comparison.speedup)
    assert later.data.metrics["npumagic/compare.ci_low"] == pytest.approx(comparison.ci[0])
    assert later.data.tags["npumagic.compared_with"] == "before"
    assert "npumagic/compare.speedup" not in earlier.data.metrics
    sentence = client.download_artifacts(later.info.run_id, "npumagic/after/compare-before.txt", ".")
    assert Path(sentence).read_text() == comparison.sentence()


def test_log_goes_to_the_active_mlflow_run(shell, mlflow_uri, request):
    import mlflow

    import npumagic

    # GIVEN two runs recorded without a tracker (of 3 and 4 steps), and the user's own MLflow run active
    assert shell.run_cell(TRAIN_SETUP).success
    assert shell.run_cell(PROFILE.format(name="mine")).success
    first = shell.user_ns["r"]
    assert shell.run_cell(PROFILE.format(name="more").replace("--steps 3", "--steps 4")).success
    with mlflow.start_run(run_name="training") as active:
        mlflow.log_metric("loss", 0.5)
        # WHEN they are logged after the fact
        run_ids = [npumagic.log(first, "mlflow"), npumagic.log(shell.user_ns["r"], "mlflow")]
    # THEN both went into the active run, beside the model's own metric
    assert run_ids == [active.info.run_id] * 2
    _, runs = _runs(request.node.name[:200])
    assert [run.info.run_name for run in runs] == ["training"]
    assert {"loss", "npumagic/wall_ms"} <= set(runs[0].data.metrics)
    # and the later one's differing settings are kept under its name (MLflow never changes a param)
    params = runs[0].data.params
    assert params["npumagic.config.steps"] == "3" and params["npumagic.config.steps/more"] == "4"


def test_cli_run_logs_the_script_run_to_mlflow(tmp_path, mlflow_uri, request):
    # GIVEN a training script WHEN `npumagic run --log mlflow` runs it
    script = tmp_path / "train.py"
    script.write_text("import torch\n" + TRAIN_SETUP + "for _ in range(8):\n    train_step()\n")
    done = subprocess.run([sys.executable, "-m", "npumagic.cli", "run", "--log", "mlflow", "--steps", "2", "--name",
                           "script", "--out", str(tmp_path / "runs"), "--", sys.executable, str(script)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    # THEN the command's status, and its run in MLflow with the command's configuration
    assert done.returncode == 0, done.stderr[-2000:]
    assert "script logged to mlflow run" in done.stderr
    client, runs = _runs(request.node.name[:200])
    assert [run.info.run_name for run in runs] == ["script"]
    assert runs[0].data.params["npumagic.config.steps"] == "2"
    assert len(client.get_metric_history(runs[0].info.run_id, "npumagic/wall_ms")) == 2
    # WHEN a second run is compared with it from the command line
    for argv in (["run", "--log", "mlflow", "--steps", "2", "--name", "again", "--out", str(tmp_path / "runs"), "--",
                  sys.executable, str(script)],
                 ["compare", "--history", str(tmp_path / "runs"), "script", "again", "--log", "mlflow"]):
        done = subprocess.run([sys.executable, "-m", "npumagic.cli", *argv], cwd=tmp_path, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
    # THEN the result is on the later run's tracker run
    _, runs = _runs(request.node.name[:200])
    by_name = {run.info.run_name: run for run in runs}
    assert sorted(by_name) == ["again", "script"]
    assert "npumagic/compare.speedup" in by_name["again"].data.metrics
    assert by_name["again"].data.tags["npumagic.compared_with"] == "script"


@pytest.mark.parametrize("tracker", ["mlflow", "wandb"])
def test_a_tracker_that_is_not_installed_is_refused_clearly(shell, monkeypatch, capsys, tracker):
    import importlib.util

    from traitlets import TraitError

    from npumagic import trackers
    from npumagic.cli import main

    # GIVEN the tracker's package absent
    real = importlib.util.find_spec
    monkeypatch.setattr(trackers.importlib.util, "find_spec", lambda name, *a: None if name == tracker else real(name, *a))
    # WHEN a notebook asks for it THEN %config refuses it, naming the extra
    with pytest.raises(TraitError, match=rf"needs the {tracker} package: pip install 'npumagic\[{tracker}\]'"):
        shell.magics_manager.registry["NpuMagics"].log_to = tracker
    # and the CLI refuses it in one line before the command runs
    marker = Path("ran")
    assert main(["run", "--log", tracker, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"npumagic: error: logging to {tracker} needs the {tracker} package: "
                                        f"pip install 'npumagic[{tracker}]' (or {tracker})"]
    assert not marker.exists()


def test_the_trackers_are_imported_only_when_asked_for():
    # GIVEN a fresh process WHEN the magics, the CLI and the tracker module are imported
    code = ("import sys, npumagic.magics, npumagic.cli, npumagic.trackers, npumagic.pytest_plugin\n"
            "print(sorted(m for m in ('mlflow', 'wandb') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    # THEN neither tracker is
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# -- W&B, offline ------------------------------------------------------------------------------------
def _wandb_records(path: Path):
    """The records of a W&B run file: a 7-byte header (":W&B", magic, version), then LevelDB-log
    records in 32 KiB blocks (checksum, length, type; a record longer than a block's rest is split
    into first, middle and last parts), each a wandb_internal_pb2.Record."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, parts = 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:  # the block's zero padding
            pos += left
            continue
        parts += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # full, last
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            parts = b""
            yield record


def test_a_run_is_logged_to_a_wandb_offline_run_and_read_back(plots, tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason=NEED_WANDB)
    # GIVEN W&B offline, writing under tmp
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_PROJECT", "npumagic-test")
    (tmp_path / "wb").mkdir()
    assert plots.run_cell(TRAIN_SETUP).success
    plots.run_line_magic("config", 'NpuMagics.log_to = "wandb"')
    # WHEN a cell is profiled
    assert plots.run_cell(PROFILE.format(name="wb")).success
    report = plots.user_ns["r"]
    # THEN its offline run file holds the params, one history row per step, the verdict and the artifact
    files = glob.glob(str(tmp_path / "wb" / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(files) == 1
    config, history, summary, artifacts = {}, [], {}, []
    for record in _wandb_records(Path(files[0])):
        kind = record.WhichOneof("record_type")
        if kind == "config":
            config.update({u.key: json.loads(u.value_json) for u in record.config.update})
        elif kind == "history":
            history.append({u.key or "/".join(u.nested_key): json.loads(u.value_json) for u in record.history.item})
        elif kind == "summary":
            summary.update({u.key or "/".join(u.nested_key): json.loads(u.value_json) for u in record.summary.update})
        elif kind == "artifact":
            artifacts.append(record.artifact)
    assert config["npumagic.config.steps"] == "3" and config["npumagic.run"] == "wb"
    steps = report.summary.steps
    assert [row["npumagic/step"] for row in history] == steps["step"].tolist()
    assert [row["npumagic/wall_ms"] for row in history] == pytest.approx((steps["wall_us"] / 1000).tolist())
    assert summary["npumagic/wb/verdict"] == str(report.verdict)
    assert summary["npumagic.bottleneck"] == report.verdict.bottleneck
    [artifact] = artifacts
    paths = {entry.path for entry in artifact.manifest.contents}
    assert {"verdict.txt", "wb.json", "figures/timeline.png"} <= paths
    assert any(p.startswith("profiler/") and p.endswith(".pt.trace.json") for p in paths)


# -- what a run gives any tracker (no tracker needed) --------------------------------------------------
def test_a_run_gives_its_dataloader_settings_and_the_environment_that_matters_as_params(trainer, monkeypatch):
    from npumagic.trackers import entry

    # GIVEN a thread count set in the environment and a cell that trains from a DataLoader
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert trainer.run_cell("loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 32)), "
                            "batch_size=8)").success
    # WHEN it is profiled and made into a tracker entry
    assert trainer.run_cell("r = %%npuprofile --steps 2 --quiet --name fed\n"
                            "for (x,) in loader:\n    model(x).sum().backward(); opt.step(); opt.zero_grad()").success
    made = entry(trainer.user_ns["r"])
    # THEN the params carry them, with the capture's options and the versions
    assert made.params["dataloader0.batch_size"] == "8" and made.params["dataloader0.num_workers"] == "0"
    assert made.params["env.OMP_NUM_THREADS"] == "2"
    assert made.params["config.steps"] == "2" and "version.torch" in made.params
    assert {key for key, _, _ in made.metrics} >= {"wall_ms", "compute_ms", "comm_ms", "idle_ms", "data_ms", "busy_ms",
                                                    "device_util"}


def test_an_ascend_run_gives_hbm_llc_and_ai_core_frequency_per_step_and_its_memory_peaks():
    from npumagic.trackers import memory_peaks, step_metrics

    from .conftest import ASCEND, shared_summary

    # GIVEN a real torch_npu rank with device counters WHEN its per-step metrics are made
    summary = shared_summary(ASCEND / "level1" / "rank0_ascend_pt")
    metrics = step_metrics(summary)
    # THEN each step has the counters the profiler recorded, as its hardware table says
    for key, column in (("hbm_gbps", "hbm_gbps"), ("llc_hit_rate", "llc_hit_rate"), ("aicore_freq_mhz", "aicore_freq_mhz")):
        got = {step: value for k, value, step in metrics if k == key}
        assert got == pytest.approx(dict(zip(summary.hardware["step"], summary.hardware[column])))
    assert not [k for k, _, _ in metrics if k == "hbm_util"]  # no device peak known: nothing invented
    peaks = memory_peaks(summary)
    assert peaks and all(value > 0 for value in peaks.values())
    assert {k.split(".")[0] for k in peaks} <= {"memory_peak_allocated_mb", "memory_peak_reserved_mb"}


def test_a_tracker_that_fails_is_said_and_the_run_stays_recorded(trainer, monkeypatch, capsys):
    pytest.importorskip("mlflow", reason=NEED_MLFLOW)
    # GIVEN a tracking store that cannot be written
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "file:///proc/npumagic-cannot-write-here")
    trainer.run_line_magic("config", 'NpuMagics.log_to = "mlflow"')
    # WHEN a cell is profiled THEN the cell succeeds, the run is in the history, and the failure is one line
    assert trainer.run_cell(PROFILE.format(name="kept")).success
    assert "kept" in [r.name for r in trainer.magics_manager.registry["NpuMagics"].session.runs.records()]
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("npumagic: not logged to mlflow: ")], err
