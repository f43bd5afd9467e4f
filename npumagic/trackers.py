"""Experiment trackers: a recorded run, or a comparison, logged to MLflow or Weights & Biases, beside
the model's own metrics. ``npumagic.log(report, "mlflow")`` logs one after the fact,
``%config NpuMagics.log_to = "mlflow"`` every run of a notebook, ``npumagic run --log mlflow`` a
script's or a job's.

A run gives the tracker (:func:`entry`): params (its configuration, the versions, the environment
variables that matter, the DataLoader settings), metrics per step (wall, compute, comm, idle, data,
busy in ms, device utilisation, and the HBM, LLC and AI Core frequency figures where recorded; the
memory peaks once), the verdict and findings as text, and as artifacts the figures, the profiler's
output directory and the run's JSON document. They go to the tracker's active run if there is one,
else to a new run named as npumagic's. A comparison (:func:`comparison_entry`) logs its result on
the later run: the tracker run that run was logged to, found by its ``npumagic.run`` tag.

Neither tracker is a dependency (the extras ``npumagic[mlflow]`` and ``npumagic[wandb]``): each is
imported only when asked for, and asking without it installed is a clear :class:`NpumagicError`."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import NpumagicError

TRACKERS = ("mlflow", "wandb")
_INSTALL = {"mlflow": "pip install 'npumagic[mlflow]' (or mlflow)", "wandb": "pip install 'npumagic[wandb]' (or wandb)"}
# step table columns (µs) -> the tracker's metric (ms): the names a dashboard shows
STEP_MS = {"wall_us": "wall_ms", "computing_us": "compute_ms", "communication_us": "comm_ms", "idle_us": "idle_ms",
           "dataloader_us": "data_ms", "busy_us": "busy_ms"}
STEP_RATIOS = {"device_util": "device_util"}
# the device counters per step (Summary.hardware), where the profiler recorded them (Ascend)
HARDWARE = {"hbm_gbps": "hbm_gbps", "hbm_util": "hbm_util", "llc_hit_rate": "llc_hit_rate",
            "aicore_freq_mhz": "aicore_freq_mhz", "aicore_freq_min_mhz": "aicore_freq_min_mhz"}
PARAM_CHARS = 500  # MLflow keeps up to 6000; a command line or a path longer than this says enough cut
PREFIX = "npumagic"  # artifact folder, tag and metric namespace: beside the model's own, never over them


@dataclass(frozen=True)
class Entry:
    """What one run or comparison gives a tracker, whichever tracker it is."""

    name: str  # the npumagic run (the later one, for a comparison)
    params: dict[str, str] = field(default_factory=dict)
    metrics: list[tuple[str, float, int]] = field(default_factory=list)  # (key, value, step)
    once: dict[str, float] = field(default_factory=dict)  # metrics without a step (memory peaks, a comparison)
    texts: dict[str, str] = field(default_factory=dict)  # artifact file name -> content
    figures: list[tuple[str, bytes]] = field(default_factory=list)  # (file name, bytes)
    directory: Path | None = None  # the profiler's output
    tags: dict[str, str] = field(default_factory=dict)
    folder: str = ""  # the artifacts' folder in the tracker run
    comparison: bool = False  # logged on the tracker run its later run went to


def available(tracker: str) -> None:
    """A clear error when ``tracker`` is unknown or not installed, without importing it (checked
    before a run starts, and when ``NpuMagics.log_to`` is set)."""
    if tracker not in TRACKERS:
        raise NpumagicError(f"unknown tracker {tracker!r}; one of: {', '.join(TRACKERS)}")
    if importlib.util.find_spec(tracker) is None:
        raise NpumagicError(f"logging to {tracker} needs the {tracker} package: {_INSTALL[tracker]}")


def require(tracker: str):
    """The tracker's module, imported now (:func:`available`'s error when it cannot be)."""
    available(tracker)
    return importlib.import_module(tracker)


def log(result, to: str) -> str:
    """Log a run (a RunReport, the outcome of a capture) or a comparison (a CompareReport or
    Comparison) to the tracker ``to`` ("mlflow" or "wandb"); the tracker's run id.

    The tracker's active run takes it if there is one, else a new run named after npumagic's
    (ended again once logged). A comparison goes to the tracker run its later run was logged to."""
    available(to)
    comparison = getattr(result, "comparison", result)  # a CompareReport carries its Comparison
    if hasattr(comparison, "p_value") and hasattr(comparison, "median_b_us"):
        made = comparison_entry(comparison)
    elif hasattr(result, "run") and hasattr(result, "summary"):
        made = entry(result)
    else:
        raise NpumagicError(f"cannot log a {type(result).__name__}: give a run's report (r = %%npuprofile ...) "
                            "or a comparison")
    module = require(to)
    return (_mlflow if to == "mlflow" else _wandb)(module, made)


# -- what a run gives ------------------------------------------------------------------------------
def _text(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value) if not isinstance(value, (int, float, bool)) else str(value)
    return text if len(text) <= PARAM_CHARS else text[: PARAM_CHARS - 1] + "…"


def _key(text: str) -> str:
    """A metric, param or tag key both trackers accept (MLflow: letters, digits, ``_-./ ``)."""
    return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", str(text))


def params(run) -> dict[str, str]:
    """The run's configuration, versions, environment and DataLoader settings as flat params."""
    out = {"run": run.name, "kind": run.kind, "backend": run.backend or "", "device": run.device or "",
           "status": run.status}
    for group, values in (("config", run.arguments or {}), ("version", run.versions or {}),
                          ("env", run.environment or {})):
        for k, v in values.items():
            if v is not None and not (isinstance(v, (list, tuple, dict)) and not v):
                out[f"{group}.{k}"] = v
    for i, loader in enumerate(run.dataloaders or []):
        for k, v in loader.items():
            if v is not None:
                out[f"dataloader{i}.{k}"] = v
    return {_key(k): _text(v) for k, v in out.items()}


def step_metrics(summary) -> list[tuple[str, float, int]]:
    """Per step: the times (ms) and device utilisation, then the device counters where recorded."""
    if summary is None:
        return []
    out = []
    steps = summary.steps
    for _, row in steps.iterrows():
        step = int(row["step"])
        for column, key in STEP_MS.items():
            if column in steps and row[column] == row[column]:
                out.append((key, float(row[column]) / 1000, step))
        for column, key in STEP_RATIOS.items():
            if column in steps and row[column] == row[column]:
                out.append((key, float(row[column]), step))
    hardware = getattr(summary, "hardware", None)
    if hardware is not None and len(hardware):
        for _, row in hardware.iterrows():
            for column, key in HARDWARE.items():
                if column in hardware and row[column] == row[column]:
                    out.append((key, float(row[column]), int(row["step"])))
    return out


def memory_peaks(summary) -> dict[str, float]:
    """The memory peaks per device, MB (allocated and reserved)."""
    memory = getattr(summary, "memory", None)
    if memory is None or not len(memory):
        return {}
    out = {}
    for _, row in memory.iterrows():
        device = _key(row["device"]).replace("/", "_")
        for column, key in (("peak_allocated_bytes", "memory_peak_allocated_mb"),
                            ("peak_reserved_bytes", "memory_peak_reserved_mb")):
            if row[column] == row[column]:
                out[f"{key}.{device}"] = float(row[column]) / 2**20
    return out


def entry(report) -> Entry:
    """What a run (a RunReport, or a capture's outcome) gives a tracker."""
    from .jsonout import document, dumps, run_outcome

    run, summary, verdict = report.run, report.summary, report.verdict
    texts = {f"{run.name}.json": dumps(document("logged_run", run=run_outcome(_Outcome(report))))}
    if verdict is not None:
        texts["verdict.txt"] = str(verdict)
        if verdict.advice is not None and len(list(verdict.advice)):
            texts["findings.txt"] = str(verdict.advice)
    elif run.message:
        texts["verdict.txt"] = f"not analysed: {run.message}"
    figures = []
    for figure in getattr(report, "figures", None) or []:
        figures.append((f"{figure.view}.{figure.fmt}", figure.data))
    directory = Path(run.run_dir) if run.run_dir and Path(run.run_dir).is_dir() else None
    tags = {f"{PREFIX}.run": run.name, f"{PREFIX}.status": run.status}
    if verdict is not None:
        tags[f"{PREFIX}.bottleneck"] = str(verdict.bottleneck)  # a Category: W&B would log its enum name
    if run.run_dir:
        tags[f"{PREFIX}.run_dir"] = _text(run.run_dir)
    return Entry(run.name, params(run), step_metrics(summary), memory_peaks(summary), texts, figures, directory,
                 tags, f"{PREFIX}/{_key(run.name)}")


@dataclass(frozen=True)
class _Outcome:
    """A RunReport read as jsonout.run_outcome reads a capture's outcome."""

    report: Any

    def __getattr__(self, name: str):
        if name == "notes":
            return list(getattr(self.report, "notes", None) or [])
        return getattr(self.report, name)


def comparison_entry(cmp) -> Entry:
    """What a comparison gives the tracker run of its later run (B): the ratio A/B, its interval,
    the p-value and whether it is significant, the sentence and the JSON document."""
    from .jsonout import comparison_doc, dumps

    once = {"compare.speedup": float(cmp.speedup), "compare.ci_low": float(cmp.ci[0]),
            "compare.ci_high": float(cmp.ci[1]), "compare.p_value": float(cmp.p_value),
            "compare.significant": float(bool(cmp.significant))}
    once = {k: v for k, v in once.items() if v == v}
    against = _key(cmp.a)
    return Entry(cmp.b, once=once, texts={f"compare-{against}.txt": cmp.sentence(),
                                          f"compare-{against}.json": dumps(comparison_doc(cmp))},
                 tags={f"{PREFIX}.run": cmp.b, f"{PREFIX}.compared_with": cmp.a}, folder=f"{PREFIX}/{_key(cmp.b)}",
                 comparison=True)


# -- the trackers ----------------------------------------------------------------------------------
_LOGGED: dict[tuple[str, str], str] = {}  # (tracker, npumagic run) -> the tracker run it went to, in this process


def _mlflow(mlflow, made: Entry) -> str:
    import time

    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    active = mlflow.active_run()
    run_id = active.info.run_id if active is not None else None
    if run_id is None and made.comparison:  # the later run's tracker run
        run_id = _LOGGED.get(("mlflow", made.name)) or _mlflow_find(mlflow, made.name)
    owned = run_id is None
    if owned:
        run_id = mlflow.start_run(run_name=made.name).info.run_id
    try:
        now = int(time.time() * 1000)
        # a tracker run that already holds another npumagic run's params (several captures under one
        # active run): MLflow refuses to change a param, so the later run's differing ones get "/NAME"
        held = client.get_run(run_id).data.params
        logged = {}
        for k, v in made.params.items():
            logged[k if held.get(f"{PREFIX}.{k}", v) == v else f"{k}/{_key(made.name)}"[:240]] = v
        metrics = [Metric(f"{PREFIX}/{k}", v, now, step) for k, v, step in made.metrics]
        metrics += [Metric(f"{PREFIX}/{k}", v, now, 0) for k, v in made.once.items()]
        params_ = [Param(f"{PREFIX}.{k}", v) for k, v in logged.items()]
        tags = [RunTag(k, v) for k, v in made.tags.items()]
        for i in range(0, max(len(metrics), len(params_), len(tags), 1), 100):  # log_batch's limits
            client.log_batch(run_id, metrics=metrics[i:i + 100], params=params_[i:i + 100], tags=tags[i:i + 100])
        for name, text in made.texts.items():
            client.log_text(run_id, text, f"{made.folder}/{name}")
        with tempfile.TemporaryDirectory() as tmp:
            for name, data in made.figures:
                path = Path(tmp) / name
                path.write_bytes(data)
                client.log_artifact(run_id, str(path), f"{made.folder}/figures")
        if made.directory is not None:
            client.log_artifacts(run_id, str(made.directory), f"{made.folder}/profiler")
    finally:
        if owned:
            mlflow.end_run()
    _LOGGED[("mlflow", made.name)] = run_id
    return run_id


def _mlflow_find(mlflow, name: str) -> str | None:
    """The latest tracker run of the current experiment tagged as npumagic's run ``name``."""
    quoted = name.replace("'", "\\'")
    found = mlflow.search_runs(filter_string=f"tags.`{PREFIX}.run` = '{quoted}'", max_results=1,
                               order_by=["attributes.start_time DESC"], output_format="list")
    return found[0].info.run_id if found else None


def _wandb(wandb, made: Entry) -> str:
    run = wandb.run
    owned = run is None
    if owned:
        resume = _LOGGED.get(("wandb", made.name)) if made.comparison else None  # the later run's
        run = wandb.init(project=os.environ.get("WANDB_PROJECT", PREFIX), name=made.name,
                         **({"id": resume, "resume": "allow"} if resume else {}))
    try:
        if made.params:
            run.config.update({f"{PREFIX}.{k}": v for k, v in made.params.items()}, allow_val_change=True)
        # npumagic's steps on their own axis: the model's own wandb.log calls keep theirs
        run.define_metric(f"{PREFIX}/step")
        run.define_metric(f"{PREFIX}/*", step_metric=f"{PREFIX}/step")
        by_step: dict[int, dict[str, float]] = {}
        for k, v, step in made.metrics:
            by_step.setdefault(step, {})[f"{PREFIX}/{k}"] = v
        for step in sorted(by_step):
            run.log({f"{PREFIX}/step": step, **by_step[step]})
        for k, v in made.once.items():
            run.summary[f"{PREFIX}/{k}"] = v
        for k, v in made.tags.items():
            run.summary[k] = v
        for name, text in made.texts.items():
            if name.endswith(".txt"):
                run.summary[f"{made.folder}/{name[:-4]}"] = text
        artifact = wandb.Artifact(re.sub(r"[^A-Za-z0-9_.-]", "_", f"{PREFIX}-{made.name}"), type=f"{PREFIX}-run")
        with tempfile.TemporaryDirectory() as tmp:
            for name, text in made.texts.items():
                (Path(tmp) / name).write_text(text)
                artifact.add_file(str(Path(tmp) / name), name=name)
            for name, data in made.figures:
                (Path(tmp) / name).write_bytes(data)
                artifact.add_file(str(Path(tmp) / name), name=f"figures/{name}")
            if made.directory is not None:
                artifact.add_dir(str(made.directory), name="profiler")
            run.log_artifact(artifact)
            if owned:
                run.finish()  # the files are read before the folder goes
    except BaseException:
        if owned:
            run.finish(exit_code=1)
        raise
    _LOGGED[("wandb", made.name)] = run.id
    return run.id
