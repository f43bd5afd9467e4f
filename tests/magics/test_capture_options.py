"""The torch_npu capture options through the magics (a real shell, the real CPU profiler): refused
before the cell runs, recorded with the run, noted where the backend ignores them; a capture that
writes no trace says so; the environment is recorded as the user set it."""

from __future__ import annotations

import os

import pytest
from IPython.core.error import UsageError

STEP = "%%npuprofile --wait 0 --warmup 0 --steps 2 --no-plot {options}\nfor i in range(3):\n    train_step()\n"


@pytest.mark.parametrize("options, message", [
    ("--level 0 --aic-metrics PipeUtilization", "needs --level 1 or 2"),
    ("--aic-metrics Memory", "needs --level 1 or 2"),
    ("--gc-threshold -5", "--gc-threshold must be >= 0"),
    ("--gc-threshold 5 --activities npu", "needs the cpu activity"),
    ("--host-sys cpu,gpu", "--host-sys must be a comma list of cpu, mem, disk, network, osrt"),
    ("--export json", "--export must be a comma list of text, db"),
    ("--export ,", "--export must be"),
])
def test_settings_torch_npu_would_change_are_refused_before_the_cell_runs(trainer, options, message):
    with pytest.raises(UsageError, match=message):
        trainer.run_cell_magic("npuprofile", f"--wait 0 --warmup 0 --steps 2 --no-plot {options}", "train_step()")
    result = trainer.run_cell(STEP.format(options=options))
    assert isinstance(result.error_in_exec, UsageError)
    assert trainer.user_ns["iterations"] == 0  # the cell never ran


def test_npu_settings_are_recorded_and_noted_as_ignored_on_the_cpu(trainer):
    options = ("--name npuopts --level 1 --aic-metrics L2Cache --l2-cache --gc-threshold 2.5 --host-sys cpu,mem "
               "--export text,db --keep-raw --modules")
    result = trainer.run_cell(STEP.format(options=options))
    assert result.success, result.error_in_exec
    report = result.result
    arguments = report.run.arguments
    assert (arguments["level"], arguments["aic_metrics"], arguments["l2_cache"], arguments["gc_threshold_ms"],
            arguments["host_sys"], arguments["export"], arguments["keep_raw"], arguments["modules"]) == \
        (1, "L2Cache", True, 2.5, ["cpu", "mem"], ["text", "db"], True, True)
    note = next(n for n in report.notes if "torch_npu settings" in n)
    for flag in ("--level", "--aic-metrics", "--l2-cache", "--gc-threshold", "--host-sys", "--export", "--keep-raw"):
        assert flag in note
    assert report.run.status == "ok"


@pytest.mark.parametrize("modules", [False, True])
def test_modules_reaches_the_torch_profiler(tmp_path, modules):
    from npumagic.capture import CaptureOptions, choose_backend

    profiler = choose_backend("cpu").backend.profiler(CaptureOptions(modules=modules), tmp_path)
    assert profiler.with_modules is modules
    assert profiler.with_stack is modules  # torch.profiler writes module spans only with stacks


def test_a_capture_with_modules_gives_each_layer_its_rows(trainer):
    trainer.run_cell_magic("npuprofile", "--wait 0 --warmup 1 --steps 2 --no-plot --modules --name mods",
                           "for _ in range(3):\n    train_step()")
    table = trainer.run_line_magic("npu", "modules mods").to_dict()
    assert table["recorded"] and table["note"] is None
    layers = {(r["pass"], r["name"]) for r in table["median"]}
    assert {("forward", "Linear_0"), ("backward", "Linear_0")} <= layers


def test_a_capture_that_writes_no_trace_says_so(trainer, monkeypatch):
    # the real profiler runs; its trace handler writes nothing, as when torch_npu swallows a failure
    from npumagic.capture import backends

    original = backends._profile_arguments

    def silent(module, options, run_dir):
        args = original(module, options, run_dir)
        args["on_trace_ready"] = lambda prof: None
        return args

    monkeypatch.setattr(backends, "_profile_arguments", silent)
    result = trainer.run_cell(STEP.format(options="--name silent"))
    assert result.success, result.error_in_exec
    report = result.result
    assert report.run.status == "no-trace"
    assert any(n.startswith(f"no trace was written to {report.run.run_dir}") for n in report.notes)
    assert report.summary is None


def test_the_environment_is_recorded_as_the_user_set_it_before_the_backend_import(trainer, monkeypatch):
    # torch_npu's import sets TASK_QUEUE_ENABLE=0 in IPython (torch_npu/_init/core/optional_features.py);
    # the backend choice here is the CPU one, with that side effect reproduced
    from npumagic import recorder

    real = recorder.choose_backend

    def importing(prefer=None):
        os.environ["TASK_QUEUE_ENABLE"] = "0"
        return real(prefer)

    monkeypatch.setenv("TASK_QUEUE_ENABLE", "2")
    monkeypatch.setattr(recorder, "choose_backend", importing)
    trainer.magics_manager.registry["NpuMagics"].session.recorder._choice = None
    first = trainer.run_cell(STEP.format(options="--name env1"))
    assert first.success, first.error_in_exec
    env = first.result.run.environment
    assert env["TASK_QUEUE_ENABLE"] == "2"
    assert env["TASK_QUEUE_ENABLE (after import torch)"] == "0"
    # set again by the user after the import: recorded as it is now
    os.environ["TASK_QUEUE_ENABLE"] = "1"
    second = trainer.run_cell(STEP.format(options="--name env2"))
    assert second.result.run.environment["TASK_QUEUE_ENABLE"] == "1"
    assert "TASK_QUEUE_ENABLE (after import torch)" not in second.result.run.environment
