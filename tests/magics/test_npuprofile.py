"""%%npuprofile and %npusteps in a real InteractiveShell with the real CPU profiler."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from IPython.core.error import UsageError

from npumagic.render import RunReport


def _step_ids(run_dir: Path) -> list[int]:
    ids = []
    for path in run_dir.glob("*.pt.trace.json"):
        events = json.loads(path.read_text())["traceEvents"]
        ids += [int(e["name"].split("#")[1]) for e in events
                if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")]
    return sorted(set(ids))


def _annotations(run_dir: Path, prefix: str) -> list[str]:
    names = []
    for path in run_dir.glob("*.pt.trace.json"):
        names += [e["name"] for e in json.loads(path.read_text())["traceEvents"]
                  if e.get("ph") == "X" and e.get("name", "").startswith(prefix)]
    return sorted(set(names))


LOOP_20 = """
for i in range(20):
    with torch.profiler.record_function(f"iteration_{i}"):
        train_step()
"""


def test_a_20_iteration_loop_records_exactly_the_3_active_steps(trainer):
    result = trainer.run_cell("%%npuprofile --wait 1 --warmup 1 --steps 3 --name acceptance\n" + LOOP_20)
    assert result.success, result.error_in_exec
    report = result.result
    assert isinstance(report, RunReport)
    run_dir = Path(report.run.run_dir)
    assert _step_ids(run_dir) == [2, 3, 4]
    assert trainer.user_ns["iterations"] == 20
    # wait (iteration 0), warmup (1) and everything after the window ran unrecorded
    assert _annotations(run_dir, "iteration_") == ["iteration_2", "iteration_3", "iteration_4"]
    assert report.summary.steps["step"].tolist() == [2, 3, 4]
    assert report.run.status == "ok"


def test_explicit_npumagic_step_wins_over_optimizer_steps(trainer):
    cell = """%%npuprofile --wait 0 --warmup 1 --steps 2
for i in range(6):
    train_step(); train_step()   # two optimizer steps per logical step
    npumagic.step()
"""
    result = trainer.run_cell(cell)
    assert result.success, result.error_in_exec
    assert _step_ids(Path(result.result.run.run_dir)) == [1, 2]
    assert result.result.run.steps_seen == 6


def test_repeat_cell_runs_the_body_once_per_step(trainer):
    result = trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --warmup 1 --steps 2\ntrain_step()")
    assert result.success, result.error_in_exec
    assert trainer.user_ns["iterations"] == 3
    assert _step_ids(Path(result.result.run.run_dir)) == [1, 2]


def test_a_cell_without_step_boundaries_says_how_to_fix_it(trainer):
    result = trainer.run_cell("%%npuprofile\nx = sum(range(10))")
    assert result.success
    report = result.result
    assert report.run.status == "no-steps"
    assert any("--repeat-cell" in n for n in report.notes)


def test_a_short_loop_records_what_it_reached(trainer):
    result = trainer.run_cell("%%npuprofile --wait 1 --warmup 1 --steps 5\nfor i in range(4):\n    train_step()")
    assert result.success
    assert any("2 of 5 active steps recorded" in n for n in result.result.notes)
    # and only those 2: the step the loop's end cut short (no work after its last optimizer step)
    # is left out, as the notes say
    assert result.result.summary.steps["step"].tolist() == [2, 3]
    assert "step 4 left out: the cell ended inside it" in result.result.notes


def test_a_failing_cell_stops_the_profiler_records_the_run_and_reraises(trainer, capsys):
    cell = """%%npuprofile --wait 0 --warmup 1 --steps 10 --name broken
for i in range(20):
    train_step()
    if i == 5:
        raise ValueError("boom at 5")
"""
    result = trainer.run_cell(cell)
    assert isinstance(result.error_in_exec, ValueError)
    assert str(result.error_in_exec) == "boom at 5"
    assert trainer.user_ns["iterations"] == 6
    store = trainer.magics_manager.registry["NpuMagics"].session.store
    run = store.get("broken")
    assert run.status == "failed"
    assert run.steps_seen == 6
    # steps 1..5 completed inside the active window; step 6, cut short by the error (it holds
    # no training work), is left out of the analysis, and the message says so
    assert run.headline.steps == 5
    assert trainer.run_line_magic("npusteps", "--run broken")["step"].tolist() == [1, 2, 3, 4, 5]
    assert "(5 active steps captured; step 6, cut short by the error, is left out)" in capsys.readouterr().err
    # the profiler is stopped and free: the next capture works
    again = trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --warmup 0 --steps 1\ntrain_step()")
    assert again.success, again.error_in_exec


def test_keyboard_interrupt_is_recorded_and_reraised(trainer):
    cell = "%%npuprofile --wait 0 --warmup 0 --steps 5 --name stopped\nfor i in range(9):\n    train_step()\n    if i == 2: raise KeyboardInterrupt\n"
    result = trainer.run_cell(cell)
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    store = trainer.magics_manager.registry["NpuMagics"].session.store
    assert store.get("stopped").status == "interrupted"
    assert trainer.run_cell("%%npuprofile --repeat-cell --steps 1\ntrain_step()").success


def test_nested_profiling_is_a_clear_error(trainer):
    cell = "%%npuprofile --repeat-cell --wait 0 --warmup 0 --steps 1 --name outer\n%npusteps --steps 1 train_step()\n"
    result = trainer.run_cell(cell)
    assert isinstance(result.error_in_exec, UsageError)
    assert "cannot be nested" in str(result.error_in_exec)
    assert trainer.run_line_magic("npuruns", "")["name"].tolist() == ["outer"]  # the inner attempt left no record
    assert trainer.run_cell("%%npuprofile --repeat-cell --steps 1\ntrain_step()").success


@pytest.mark.parametrize("line, message", [
    ("--steps 0", "--steps must be >= 1"),
    ("--wait -1", "--wait must be >= 0"),
    ("--level 3", "--level must be one of 0, 1, 2"),
    ("--aic-metrics Bogus", "--aic-metrics must be one of PipeUtilization"),
    ("--activities cpu,tpu", "--activities must be a comma list of cpu, cuda, npu"),
    ("--steps many", "invalid int value"),
    ("--name 'bad name'", "invalid --name"),
    ("--frobnicate", "unrecognized arguments"),
])
def test_bad_arguments_raise_usage_error_before_the_cell_runs(trainer, line, message):
    with pytest.raises(UsageError, match=message):
        trainer.run_cell_magic("npuprofile", line, "train_step()")
    result = trainer.run_cell(f"%%npuprofile {line}\ntrain_step()")
    assert isinstance(result.error_in_exec, UsageError)
    assert trainer.user_ns["iterations"] == 0


CELL = "%%npuprofile --repeat-cell --wait 0 --steps 2 --name base{}\ntrain_step()"


def test_rerunning_a_named_cell_works_and_says_the_new_name(trainer):
    first, second, third = (trainer.run_cell(CELL.format("")) for _ in range(3))
    assert first.success and second.success and third.success, second.error_in_exec
    assert [r.result.run.name for r in (first, second, third)] == ["base", "base-2", "base-3"]
    assert "base is taken: this run is base-2" in str(second.result)
    assert trainer.run_line_magic("npuruns", "")["name"].tolist() == ["base", "base-2", "base-3"]
    assert Path(second.result.run.run_dir).name == "base-2"


def test_replace_takes_the_name_once_the_capture_succeeded(trainer):
    old = Path(trainer.run_cell(CELL.format("")).result.run.run_dir)
    stale = old / "marker.txt"
    stale.write_text("old run")
    result = trainer.run_cell(CELL.format(" --replace"))
    assert result.success, result.error_in_exec
    assert result.result.run.name == "base" and Path(result.result.run.run_dir) == old
    assert not stale.exists() and list(old.glob("*.pt.trace.json"))
    assert trainer.run_line_magic("npuruns", "")["name"].tolist() == ["base"]
    assert "recorded as base " in str(result.result)
    assert trainer.run_line_magic("npubaseline", "") == "base"


def test_replace_keeps_the_old_run_when_the_new_one_fails(trainer):
    old = trainer.run_cell(CELL.format("")).result.run
    result = trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --steps 2 --name base --replace\n1 / 0")
    assert isinstance(result.error_in_exec, ZeroDivisionError)
    runs = trainer.run_line_magic("npuruns", "").data
    assert runs["name"].tolist() == ["base", "base-2"] and runs["status"].tolist() == ["ok", "failed"]
    assert Path(old.run_dir).is_dir() and list(Path(old.run_dir).glob("*.pt.trace.json"))


def test_replace_needs_a_name(trainer):
    with pytest.raises(UsageError, match="--replace needs --name"):
        trainer.run_cell_magic("npuprofile", "--repeat-cell --steps 1 --replace", "train_step()")


def test_runs_are_named_run1_run2(trainer):
    names = [trainer.run_cell("%%npuprofile --repeat-cell --steps 1\ntrain_step()").result.run.name for _ in range(2)]
    assert names == ["run1", "run2"]


def test_npu_options_are_noted_and_ignored_on_cpu(trainer):
    result = trainer.run_cell("%%npuprofile --repeat-cell --steps 1 --level 2 --aic-metrics Memory\ntrain_step()")
    assert result.success
    assert any("ignored on cpu" in n for n in result.result.notes)


def test_memory_shapes_and_stack_reach_the_profiler(trainer):
    result = trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --steps 2 --memory --shapes --stack\ntrain_step()")
    assert result.success, result.error_in_exec
    report = result.result
    assert not report.summary.memory.empty
    assert (report.summary.kernels["shapes"] != "").any()


def test_the_report_shows_table_verdict_and_timeline(trainer, plots):
    report = trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --steps 2\ntrain_step()").result
    text = str(report)
    assert "wall (ms)" in text and "1. Baseline" in text and "5. Record" in text
    timeline = report.figure("timeline")
    assert timeline.path is not None and timeline.path.read_bytes()[:4] == b"\x89PNG"
    assert report.figure("steps") is not None
    bundle = report._repr_mimebundle_()
    assert "data:image/png;base64" in bundle["text/html"]


def test_no_plot_skips_the_timeline(trainer):
    report = trainer.run_cell("%%npuprofile --repeat-cell --steps 1 --no-plot\ntrain_step()").result
    assert report.figures == []


def test_npusteps_runs_a_statement_once_per_step(trainer):
    result = trainer.run_cell('%npusteps --wait 0 --warmup 1 --steps 3 --name line train_step()')
    assert result.success, result.error_in_exec
    assert trainer.user_ns["iterations"] == 4
    assert result.result.summary.steps["step"].tolist() == [1, 2, 3]


def test_npusteps_keeps_the_statement_verbatim(trainer):
    trainer.run_cell("seen = []\ndef note(s): seen.append(s); train_step()")
    result = trainer.run_cell('%npusteps --wait 0 --warmup 0 --steps 2 note("a  b")')
    assert result.success, result.error_in_exec
    assert trainer.user_ns["seen"] == ["a  b", "a  b"]


def test_npusteps_without_statement_shows_the_latest_step_table(trainer):
    trainer.run_cell("%npusteps --wait 0 --steps 2 --name first train_step()")
    trainer.run_cell("%npusteps --wait 0 --steps 3 --name second train_step()")
    assert len(trainer.run_line_magic("npusteps", "")) == 3
    assert len(trainer.run_line_magic("npusteps", "--run first")) == 2
    with pytest.raises(UsageError, match="Unknown run 'third'; known: first, second"):
        trainer.run_line_magic("npusteps", "--run third")


def test_npuprofile_help_documents_every_option(trainer):
    doc = trainer.find_cell_magic("npuprofile").__doc__
    for option in ("--wait", "--warmup", "--steps", "--repeat", "--skip-first", "--name", "--out", "--activities",
                   "--memory", "--shapes", "--stack", "--level", "--aic-metrics", "--repeat-cell", "--quiet", "--no-plot"):
        assert option in doc


def test_npuprofile_help_shows_the_cell_magic_usage(trainer):
    doc = trainer.find_cell_magic("npuprofile").__doc__
    assert doc.lstrip(": \n").startswith("%%npuprofile [")


def test_out_writes_the_run_where_asked(trainer, tmp_path):
    target = tmp_path / "elsewhere"
    report = trainer.run_cell(f"%%npuprofile --repeat-cell --steps 1 --out {target}\ntrain_step()").result
    assert Path(report.run.run_dir) == target
    assert list(target.glob("*.pt.trace.json"))


def test_async_cells_are_refused(trainer):
    with pytest.raises(UsageError, match="async cells"):
        trainer.run_cell_magic("npuprofile", "", "import asyncio\nawait asyncio.sleep(0)")


def test_npumagic_step_inside_a_helper_ends_the_same_step_as_the_optimizer(trainer):
    # GIVEN npumagic.step() called from a helper, so the cell's text never names it
    trainer.run_cell("def train_and_mark():\n    train_step()\n    npumagic.step()")
    # WHEN six iterations run under wait 1 + warmup 1 + steps 3
    result = trainer.run_cell("%%npuprofile --wait 1 --warmup 1 --steps 3\nfor i in range(6):\n    train_and_mark()")
    # THEN six boundaries are counted, not seven, and the window holds steps 2-4 as in the plain loop
    assert result.success, result.error_in_exec
    assert result.result.run.steps_seen == 6
    assert _step_ids(Path(result.result.run.run_dir)) == [2, 3, 4]


@pytest.mark.parametrize("cell", ["train_step()", "for i in range(3):\n    train_step()"],
                         ids=["no-loop", "skip-first-past-the-loop"])
def test_a_cell_that_never_reaches_the_active_window_is_no_steps(trainer, cell):
    line = "%%npuprofile" if cell == "train_step()" else "%%npuprofile --skip-first 5"
    result = trainer.run_cell(f"{line}\n{cell}")
    assert result.success
    report = result.result
    assert report.run.status == "no-steps"
    assert any("--repeat-cell" in n and "nothing was recorded" in n for n in report.notes)
    # no verdict and no advice about nothing: %npuadvise says the run recorded nothing
    assert report.verdict is None
    with pytest.raises(UsageError, match="recorded nothing"):
        trainer.run_line_magic("npuadvise", report.run.name)


@pytest.mark.parametrize("options, iterations, recorded, traces", [
    ("--wait 1 --warmup 1 --steps 2 --repeat 2", 10, [2, 3, 6, 7], 2),
    ("--skip-first 3 --wait 0 --warmup 1 --steps 2", 10, [4, 5], 1),
], ids=["repeat-2", "skip-first-3"])
def test_repeat_and_skip_first_record_the_scheduled_steps(trainer, options, iterations, recorded, traces):
    # GIVEN a loop longer than the schedule; WHEN profiled with repeat cycles or skipped steps
    result = trainer.run_cell(f"%%npuprofile {options} --no-plot\nfor i in range({iterations}):\n    train_step()")
    assert result.success, result.error_in_exec
    run_dir = Path(result.result.run.run_dir)
    # THEN exactly the scheduled steps are in the trace, one trace file per cycle, and all are analysed
    assert _step_ids(run_dir) == recorded
    assert len(list(run_dir.glob("*.pt.trace.json"))) == traces
    assert result.result.summary.steps["step"].tolist() == recorded
    assert result.result.run.status == "ok"


def test_a_failing_cells_traceback_starts_at_the_users_code(trainer, capsys):
    trainer.run_cell("def diverge(i):\n    if i == 1:\n        raise RuntimeError('loss is nan')\n")
    result = trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --steps 3 --no-plot\ndiverge(iterations)\ntrain_step()")
    assert isinstance(result.error_in_exec, RuntimeError)
    shown = capsys.readouterr().out
    assert "raise RuntimeError('loss is nan')" in shown and "diverge(iterations)" in shown
    assert "npumagic" not in shown.split("Traceback", 1)[1]  # none of npumagic's frames
