"""Loading, unloading, configuration and the history magics."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from IPython.core.error import UsageError

from ..conftest import ASCEND, CUDA, need

MAGICS = {"line": {"npusteps", "npuruns", "npuload"}, "cell": {"npuprofile"}}


def test_unload_removes_every_magic_and_configurable(shell):
    manager = shell.magics_manager
    assert MAGICS["cell"] <= set(manager.magics["cell"])
    shell.run_line_magic("unload_ext", "npumagic")
    assert not (MAGICS["line"] & set(manager.magics["line"]))
    assert not (MAGICS["cell"] & set(manager.magics["cell"]))
    assert "NpuMagics" not in manager.registry
    assert not any(type(c).__name__ == "NpuMagics" for c in shell.configurables)
    shell.run_line_magic("load_ext", "npumagic")  # and it loads again
    assert "npuprofile" in manager.magics["cell"]


def test_output_dir_is_configurable(trainer, tmp_path):
    trainer.run_line_magic("config", f"NpuMagics.output_dir = {str(tmp_path / 'other')!r}")
    report = trainer.run_cell("%%npuprofile --repeat-cell --steps 1\ntrain_step()").result
    assert Path(report.run.run_dir).parent == tmp_path / "other"
    assert (tmp_path / "other" / "history.sqlite").exists()


def test_unknown_views_are_refused_when_configured(shell):
    from traitlets import TraitError

    magics = shell.magics_manager.registry["NpuMagics"]
    with pytest.raises(TraitError):
        magics.views = ["timeline", "flamegraph"]
    assert magics.views == ["timeline", "steps"]


def test_an_unknown_backend_is_refused_when_configured(shell):
    from traitlets import TraitError

    magics = shell.magics_manager.registry["NpuMagics"]
    with pytest.raises(TraitError):
        magics.backend = "tpu"
    assert magics.backend == ""


def test_quoted_paths_are_taken_without_their_quotes(trainer, tmp_path):
    # GIVEN a target folder with a space, quoted as in a shell
    target = tmp_path / "my runs" / "job"
    # WHEN it is given in single quotes to --out, then in double quotes to %npuload
    report = trainer.run_cell(f"%%npuprofile --repeat-cell --steps 1 --out '{target}'\ntrain_step()").result
    loaded = trainer.run_line_magic("npuload", f'"{target}" --name again --no-plot')
    # THEN both name the folder itself, and no folder with a quote in its name appears
    assert Path(report.run.run_dir) == target
    assert Path(loaded.run.run_dir) == target
    assert not [p for p in tmp_path.rglob("*") if "'" in p.name or '"' in p.name]


def test_npusteps_takes_quoted_values_with_spaces_before_its_statement(trainer, tmp_path):
    # GIVEN quoted option values with spaces, in both shell forms, before the statement
    for name, option in (("spaced", f'--out "{tmp_path}/my runs"'), ("joined", f"--out='{tmp_path}/our runs'")):
        result = trainer.run_cell(f"%npusteps {option} --name {name} --steps 1 --no-plot --quiet train_step()")
        # THEN the run is written to the folder named, the statement is the statement
        assert result.success, result.error_in_exec
        assert Path(result.result.run.run_dir).name in ("my runs", "our runs")
    assert (tmp_path / "my runs").is_dir() and (tmp_path / "our runs").is_dir()
    assert not [p for p in tmp_path.rglob("*") if "'" in p.name or '"' in p.name]
    # and an unclosed quote is a usage error naming it, not a traceback
    result = trainer.run_cell(f"%npusteps --out '{tmp_path}/x train_step()")
    assert isinstance(result.error_in_exec, UsageError) and "No closing quotation" in str(result.error_in_exec)


def test_config_lists_npumagics_traits(shell, capsys):
    shell.run_line_magic("config", "NpuMagics")
    out = capsys.readouterr().out
    assert "output_dir" in out and "backend" in out


def test_npuruns_returns_the_history_as_a_dataframe(trainer):
    trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --steps 2 --name a\ntrain_step()")
    trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --steps 2 --name b\ntrain_step()")
    table = trainer.run_line_magic("npuruns", "").data
    assert isinstance(table, pd.DataFrame)
    assert table["name"].tolist() == ["a", "b"]
    assert table["status"].tolist() == ["ok", "ok"]
    assert (table["steps"] == 2).all()
    assert table["backend"].eq("cpu").all()


def test_runs_keep_their_metadata(trainer, monkeypatch):
    from npumagic.capture.backends import RELEVANT_ENV

    for name in RELEVANT_ENV:  # what the machine running the tests has set (OMP_NUM_THREADS, ...)
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TASK_QUEUE_ENABLE", "2")
    trainer.run_cell("%%npuprofile --repeat-cell --steps 1 --name meta\ntrain_step()")
    run = trainer.magics_manager.registry["NpuMagics"].session.store.get("meta")
    assert run.source.strip() == "train_step()"
    assert run.arguments["steps"] == 1 and run.arguments["repeat_cell"] is True
    assert run.environment == {"TASK_QUEUE_ENABLE": "2"}
    assert run.versions["torch"].startswith("2.")
    assert run.backend == "cpu" and run.device
    assert run.finished >= run.created


def test_per_kernel_history_is_stored(trainer):
    trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --steps 2 --name k\ntrain_step()")
    store = trainer.magics_manager.registry["NpuMagics"].session.store
    kernels = store.kernels("k")
    assert len(kernels) > 0
    assert {"name", "count", "total_us", "mean_us"} <= set(kernels.columns)
    assert len(store.steps("k")) == 2


def test_npuload_imports_an_offline_ascend_run(shell):
    path = need(ASCEND / "level1" / "rank0_ascend_pt")
    report = shell.run_line_magic("npuload", f"{path} --name cluster --no-plot")
    assert report.run.kind == "load" and report.run.backend == "npu"
    assert report.verdict.bottleneck == "communication"
    assert shell.run_line_magic("npuruns", "")["name"].tolist() == ["cluster"]


def test_npushow_matrix_draws_the_communication_matrix_of_a_loaded_job(shell):
    shell.run_line_magic("npuload", f"{need(ASCEND / 'level1')} --name job --no-plot")
    report = shell.run_line_magic("npushow", "job --matrix")
    assert [f.view for f in report.figures] == ["matrix"]
    assert report.figures[0].data[:4] == b"\x89PNG" and report.figures[0].path.name == "job_matrix.png"


def test_npuload_names_the_run_after_its_directory(shell):
    path = need(ASCEND / "level0")
    first = shell.run_line_magic("npuload", f"{path} --no-plot")
    second = shell.run_line_magic("npuload", f"{path} --no-plot")
    assert (first.run.name, second.run.name) == ("level0", "level0-2")
    assert any("level0 is taken: this run is level0-2" in n for n in second.notes)
    assert shell.run_line_magic("npushow", "level0 --steps").figures[0].view == "steps"


def test_npuload_describes_the_rank_asked_for(shell):
    path = need(ASCEND / "level1")
    report = shell.run_line_magic("npuload", f"{path} --rank 1 --no-plot")
    assert report.summary.meta["rank"] == 1 and report.summary.steps["step"].tolist() == [50]
    with pytest.raises(UsageError, match=r"rank 7 not in trace; ranks: \[0, 1\]"):
        shell.run_line_magic("npuload", f"{path} --rank 7 --no-plot")
    assert shell.run_line_magic("npuruns", "").data["name"].tolist() == ["level1"]  # nothing stored for it


def test_npuload_of_a_bad_path_is_a_usage_error(shell, tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        shell.run_line_magic("npuload", str(tmp_path / "missing"))
    assert shell.run_line_magic("npuruns", "").data.empty


def test_npushow_redraws_any_view_of_any_run(trainer):
    trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --steps 2 --memory --name first\ntrain_step()")
    trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --steps 2 --name second --no-plot\ntrain_step()")
    report = trainer.run_line_magic("npushow", "first --kernels --memory")
    assert [f.view for f in report.figures] == ["kernels", "memory"]
    assert all(f.path.exists() and f.path.parent.name == "first" for f in report.figures)
    latest = trainer.run_line_magic("npushow", "-1 --timeline --svg --step-range 1:1")
    assert latest.run == "second" and latest.figures[0].data.lstrip().startswith(b"<?xml")


@pytest.mark.parametrize("line, message", [
    ("nope --steps", "Unknown run 'nope'"),
    ("-1 --step-range 3", "--step-range takes FIRST:LAST"),
    ("-1 --zoom 5:1", "the end comes before the start"),
    ("-1 --step-range 40:41", "no steps in 40..41"),
    ("-1 --zoom 1:1e400", "finite numbers below 1e12"),
    ("-1 --zoom nan:nan", "finite numbers below 1e12"),
    ("-1 --timeline --lanes nonsense", "--lanes nonsense: no lane's name holds it; the lanes are .*Thread"),
])
def test_npushow_bad_input_is_a_usage_error(trainer, line, message):
    trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --steps 1 --no-plot\ntrain_step()")
    with pytest.raises(UsageError, match=message):
        trainer.run_line_magic("npushow", line)


def test_npuruns_keeps_step_counts_integers_beside_a_run_without_steps(trainer):
    trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --steps 1 --name one\ntrain_step()")
    trainer.run_cell("%%npuprofile --name none\nx = 1")
    table = trainer.run_line_magic("npuruns", "")
    assert str(table["steps"].dtype) == "Int64"
    assert table["steps"].tolist()[0] == 1 and table["steps"].isna().tolist() == [False, True]


def test_a_one_step_run_reads_1_step(trainer):
    report = trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --steps 1\ntrain_step()").result
    assert "(1 step)" in str(report.verdict)


def test_advice_over_every_rank_lists_a_shared_finding_once(shell):
    shell.run_line_magic("npuload", f"{need(ASCEND / 'level1')} --no-plot")
    advice = shell.run_line_magic("npuadvise", "level1 --all")
    keys = [(f.category, f.where) for f in advice]
    assert len(keys) == len(set(keys))
    assert advice[0].category == "communication" and advice[0].ranks == (0, 1)
    assert "ranks 0, 1" in str(advice)
    assert "<th" in advice._repr_html_() and ">ranks<" in advice._repr_html_()


def test_a_relative_output_dir_stays_the_notebooks_after_a_cd(trainer, tmp_path, monkeypatch):
    # GIVEN runs kept in a relative folder, recorded from the notebook's folder
    trainer.run_line_magic("config", "NpuMagics.output_dir = 'rel_runs'")
    trainer.run_cell("%%npuprofile --repeat-cell --wait 0 --steps 1 --name here\ntrain_step()")
    # WHEN the kernel's working directory changes (%cd, os.chdir)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    # THEN the same history is read, and no empty one appears where the kernel now is
    assert trainer.run_line_magic("npuruns", "")["name"].tolist() == ["here"]
    assert (tmp_path / "rel_runs" / "history.sqlite").exists() and not (tmp_path / "elsewhere" / "rel_runs").exists()
    with pytest.raises(UsageError, match="-0 is no run"):
        trainer.run_line_magic("npuadvise", "-0")


def test_npuload_of_a_capture_never_parsed_names_the_command_and_parse_raw_needs_torch_npu(shell, tmp_path):
    # GIVEN a rank holding only torch_npu's raw data (its export failed)
    rank = tmp_path / "rank0_ascend_pt"
    (rank / "PROF_000001_20240929162113526_ABCDEFGHIJ").mkdir(parents=True)
    command = f"from torch_npu.profiler.profiler import analyse; analyse('{rank}')"
    # THEN %npuload says which command parses it, and --parse-raw, without torch_npu here, says where to run it
    for options in ("", "--parse-raw"):
        with pytest.raises(UsageError, match="torch_npu") as info:
            shell.run_line_magic("npuload", f"{rank} --no-plot {options}")
        assert command in str(info.value)
        assert shell.run_cell(f"%npuload {rank} --no-plot {options}").error_in_exec is not None


def test_a_loaded_cpu_trace_names_its_backend_once(shell):
    report = shell.run_line_magic("npuload", f"{need(CUDA / 'hta_more' / 'cpu_only_2024')} --name cpu --no-plot")
    header = str(report).splitlines()[0]
    assert header.startswith("npumagic cpu: ok — cpu, output in ") and "(cpu)" not in header
