"""The npumagic command line on real outputs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from npumagic.cli import main

from .conftest import ASCEND, CUDA, ROOT, need


def test_analyze_prints_the_table_and_verdict(capsys):
    assert main(["analyze", str(need(ASCEND / "level1"))]) == 0
    out = capsys.readouterr().out
    assert "npu on Ascend NPU, rank 0" in out
    assert "2. Classify     communication" in out
    assert "none is the slowest" in " ".join(out.split())  # two ranks side by side, within 5% of each other


def test_analyze_reads_a_db_export_with_both_ranks(capsys):
    assert main(["analyze", str(need(ASCEND / "db" / "level1"))]) == 0
    out = capsys.readouterr().out
    assert "npu on Ascend910B, rank 0" in out
    ranks = [line.split()[:2] for line in out.splitlines() if line.strip().startswith(("0 ", "1 "))]
    assert [r[0] for r in ranks] == ["0", "1"]  # the rank table lists both db ranks


def test_analyze_json_is_machine_readable(capsys):
    assert main(["analyze", str(need(ASCEND / "level2" / "rank1_ascend_pt")), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["verdict"]["bottleneck"] == "communication"
    assert payload["steps"][0]["step"] == 50


def test_bad_input_exits_2_with_one_line_naming_the_file(tmp_path):
    bad = tmp_path / "broken.pt.trace.json"
    bad.write_text("{")
    done = subprocess.run([sys.executable, "-m", "npumagic.cli", "analyze", str(bad)], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert str(bad) in done.stderr and "not a valid Chrome trace JSON" in done.stderr


def test_runs_lists_an_empty_history(tmp_path, capsys):
    assert main(["runs", "--out", str(tmp_path)]) == 0
    assert "no runs" in capsys.readouterr().out


def test_advise_ranks_findings(capsys):
    assert main(["advise", str(need(ASCEND / "level1" / "rank0_ascend_pt")), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    findings = out["findings"]
    assert findings[0]["category"] == "communication"
    assert [f["impact"] for f in findings] == sorted((f["impact"] for f in findings), reverse=True)
    assert out["steps_inferred"] is False  # torch_npu marked its steps


def test_advise_json_lists_rule_severity_impact_evidence_fix_where(capsys):
    assert main(["advise", str(need(ASCEND / "level1" / "rank0_ascend_pt")), "--json", "--all"]) == 0
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert all({"rule", "severity", "impact", "evidence", "fix", "where"} <= set(f) for f in findings)
    by_rule = {f["rule"]: f for f in findings}
    assert {"byte_alignment", "dynamic_shape", "affinity_api", "environment"} <= set(by_rule)
    aligned = by_rule["byte_alignment"]
    assert [o["size_bytes"] for o in aligned["evidence"]["ops"]] == [28647232, 17267200]
    assert aligned["severity"] == "low" and 0 < aligned["impact"] < 0.03  # 397 us of a 136.6 ms step
    assert by_rule["communication"]["severity"] == "high"
    assert "main.py(366)" in by_rule["affinity_api"]["where"]


def test_compare_two_outputs(capsys):
    a, b = need(ASCEND / "level1" / "rank0_ascend_pt"), need(ASCEND / "level2" / "rank0_ascend_pt")
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "level1/rank0_ascend_pt" in out and "1 step on a side" in out
    assert main(["compare", str(a), str(b), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["significant"] is False and payload["kernels"]


def test_show_writes_the_image(tmp_path, capsys):
    out = tmp_path / "timeline"  # no suffix: a PNG, and the name said is the file's
    assert main(["show", str(need(ASCEND / "level1" / "rank0_ascend_pt")), "--timeline", "-o", str(out)]) == 0
    assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert capsys.readouterr().out.strip() == f"wrote {tmp_path / 'timeline.png'}"


def test_show_without_output_writes_the_trace_and_view_name_here(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["show", str(need(ASCEND / "level1" / "rank0_ascend_pt")), "--steps"]) == 0
    assert capsys.readouterr().out.strip() == "wrote rank0_ascend_pt_steps.png"
    assert (tmp_path / "rank0_ascend_pt_steps.png").read_bytes()[:4] == b"\x89PNG"


def test_show_into_a_folder_names_the_image_and_a_missing_folder_is_said_before_reading(tmp_path, capsys):
    rank0 = str(need(ASCEND / "level1" / "rank0_ascend_pt"))
    assert main(["show", rank0, "--steps", "-o", str(tmp_path)]) == 0
    assert (tmp_path / "rank0_ascend_pt_steps.png").stat().st_size > 0
    assert capsys.readouterr().out.strip() == f"wrote {tmp_path / 'rank0_ascend_pt_steps.png'}"
    assert main(["show", rank0, "-o", str(tmp_path / "nope" / "a.png")]) == 2
    assert capsys.readouterr().err.strip() == (f"npumagic: error: {tmp_path / 'nope' / 'a.png'}: no folder "
                                               f"{tmp_path / 'nope'} to write it in")


def test_show_matrix_writes_the_heatmap(tmp_path, capsys):
    out = tmp_path / "matrix.png"
    assert main(["show", str(need(ASCEND / "db" / "level1")), "--matrix", "-o", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_runs_and_export_read_a_real_history(tmp_path, capsys):
    from npumagic.session import Session

    session = Session(tmp_path)
    session.recorder.load(need(ASCEND / "level0" / "rank0_ascend_pt"), name="cluster0")
    assert main(["runs", "--out", str(tmp_path), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert runs[0]["name"] == "cluster0" and runs[0]["bottleneck"] == "communication"
    md = tmp_path / "log.md"
    assert main(["export", "--out", str(tmp_path), "--md", str(md)]) == 0
    assert capsys.readouterr().out == f"exported 1 run to {md}\n"  # as show says what it wrote
    text = md.read_text()
    assert "## cluster0 — ok" in text
    # inert Markdown that reads as written: no escaped - or ., no entity for ->, no spaces in the path's code
    assert "\\-" not in text and "\\." not in text and "&gt;" not in text
    assert f"- output: `{need(ASCEND / 'level0' / 'rank0_ascend_pt').resolve()}`" in text
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    rendered = markdown2html_mistune(text)
    assert "&amp;gt;" not in rendered and "\\" not in rendered


def test_reading_commands_leave_the_history_as_they_found_it(tmp_path, capsys):
    # runs/export/compare read the history as the magics do (NamedRuns), writing nothing: not a
    # summary, not SQLite's -wal/-shm files (a read-only connection leaves those behind)
    from npumagic.session import Session

    session = Session(tmp_path)
    for name in ("a", "b"):
        session.recorder.load(need(CUDA / "alexnet_sync"), name=name)
    before = sorted(p.name for p in tmp_path.iterdir()), (tmp_path / "history.sqlite").read_bytes()
    for argv in (["runs"], ["export"], ["compare", "a", "b", "--history", str(tmp_path)]):
        assert main([*argv, "--out", str(tmp_path)] if argv[0] != "compare" else argv) == 0, capsys.readouterr().err
    assert "b against a" in " ".join(capsys.readouterr().out.split())
    assert (sorted(p.name for p in tmp_path.iterdir()), (tmp_path / "history.sqlite").read_bytes()) == before


def test_compare_takes_runs_counted_back_and_export_writes_to_standard_output(tmp_path, capsys):
    from npumagic.session import Session

    session = Session(tmp_path)
    for name in ("a", "b"):
        session.recorder.load(need(CUDA / "alexnet_sync"), name=name)
    # -2 and -1 are the runs before the latest and the latest, as %npucompare takes them
    assert main(["compare", "-2", "-1", "--history", str(tmp_path), "--json"]) == 0, capsys.readouterr().err
    doc = json.loads(capsys.readouterr().out)
    assert (doc["a"], doc["b"]) == ("a", "b")
    assert main(["compare", "-2", "-1", "--history", str(tmp_path), "--by-operator"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["compare", "-1", "b", "--history", str(tmp_path)]) == 2
    assert "both sides are 'b'" in capsys.readouterr().err
    # one output directory on both sides, however it is spelled, is refused as the MCP server refuses it
    trace = need(CUDA / "alexnet_sync")
    assert main(["compare", str(trace), str(trace / ".." / trace.name)]) == 2
    assert f"both sides are '{trace.resolve()}'; name two different paths" in capsys.readouterr().err
    # `--md -` is the Markdown on standard output, not a file named "-"
    assert main(["export", "--out", str(tmp_path), "--md", "-"]) == 0
    assert capsys.readouterr().out.startswith("# ") and not (tmp_path / "-").exists()


def test_a_missing_history_is_exit_2(tmp_path, capsys):
    assert main(["runs", "--out", str(tmp_path / "none")]) == 2
    assert "no such output directory" in capsys.readouterr().err


def test_runs_and_export_take_the_directory_as_the_other_commands_take_their_path(tmp_path, capsys, monkeypatch):
    from npumagic.session import Session

    Session(tmp_path / "npumagic_demo").recorder.load(need(CUDA / "alexnet_sync"), name="sample")
    monkeypatch.chdir(tmp_path)
    assert main(["runs", "npumagic_demo", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["name"] == "sample"
    assert main(["export", "npumagic_demo"]) == 0 and "## sample" in capsys.readouterr().out
    # without one, and no ./npumagic_runs: the error names the demo's directory, which is here
    assert main(["runs"]) == 2
    assert "npumagic runs DIR; the demo's is here: npumagic runs npumagic_demo" in capsys.readouterr().err
    assert main(["export", "npumagic_demo", "--out", "elsewhere"]) == 2
    assert "two output directories" in capsys.readouterr().err


def test_advise_all_adds_every_rank_and_low_findings(capsys):
    # GIVEN a two-rank job; WHEN advised plainly, then with --all
    job = str(need(ASCEND / "level1"))
    assert main(["advise", job, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)["findings"]
    assert main(["advise", job, "--json", "--all"]) == 0
    every = json.loads(capsys.readouterr().out)["findings"]
    # THEN --all covers rank 1 too, each finding the ranks share once with the ranks listed, and
    # keeps the low-severity findings the plain call leaves out
    assert not any("ranks" in f for f in plain)
    assert any(f["ranks"] == [0, 1] for f in every)
    # a finding of both ranks gives the figures of the rank where it weighs most, and says which
    shared = [f for f in every if len(f.get("ranks", [])) > 1]
    assert shared and all(f["figures_of_rank"] in f["ranks"] for f in shared)
    comm = next(f for f in every if f["rule"] == "communication")
    assert comm["figures_of_rank"] == 0 and "105.99 ms" in comm["title"]  # rank 0's; rank 1's is 100.38 ms
    assert main(["advise", job, "--all"]) == 0
    out = capsys.readouterr().out
    assert "(ranks 0, 1; figures of rank 0)" in out and "(ranks 0, 1; figures of rank 1)" in out
    assert len({(f["category"], f["where"]) for f in every}) == len(every)
    assert len(every) > len(plain)


def test_plain_advice_says_how_many_low_findings_it_leaves_out(capsys):
    rank0 = str(need(ASCEND / "level1" / "rank0_ascend_pt"))
    assert main(["advise", rank0, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["advise", rank0, "--json", "--all"]) == 0
    every = json.loads(capsys.readouterr().out)
    low = [f for f in every["findings"] if f["severity"] == "low"]
    # msprof-analyze's byte-alignment, dynamic-shape, affinity and environment findings are low here
    assert plain["low_findings_not_shown"] == len(low) >= 4 and every["low_findings_not_shown"] == 0
    assert main(["advise", rank0]) == 0
    assert f"{len(low)} low-severity findings not shown (all of them: --all)" in capsys.readouterr().out


def test_advise_all_keeps_what_only_the_job_shows(capsys):
    # level0's rank 0 waits 16.9 ms more per step in communication than rank 1: a finding of the
    # job, not of either rank, which advice over every rank must still list
    for extra in ([], ["--all"]):
        assert main(["advise", str(need(ASCEND / "level0")), "--json", *extra]) == 0
        titles = [f["title"] for f in json.loads(capsys.readouterr().out)["findings"]]
        assert any(t.startswith("slow rank: rank 0 spends 16.90 ms more") for t in titles), (extra, titles)


@pytest.mark.slow
def test_the_demo_runs_twice_in_one_folder(tmp_path):
    """The README's first command must always work, also when run again: the second run replaces
    the demo's runs instead of failing on their taken names; it writes only in its own folder (not
    in the user's IPython history)."""
    import os
    import sqlite3

    ipython_dir = tmp_path / "ipython"
    for attempt in (1, 2):
        done = subprocess.run([sys.executable, "-m", "npumagic.cli", "demo", "--out", str(tmp_path / "demo")],
                              capture_output=True, text=True, timeout=600,
                              env={**os.environ, "IPYTHONDIR": str(ipython_dir)})
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "npumagic fixed: ok" in done.stdout  # what the comparison says is timing: not asserted
    assert "replaced the earlier run baseline" in done.stdout
    with sqlite3.connect(tmp_path / "demo" / "history.sqlite") as db:
        names = sorted(r[0] for r in db.execute("SELECT name FROM runs"))
    assert names == ["baseline", "fixed"]
    assert not list(ipython_dir.rglob("history.sqlite"))


def test_a_reader_that_stops_early_gets_no_error_message(tmp_path):
    # `npumagic analyze TRACE | head -1`: the reader is gone by the time npumagic writes
    job = str(need(ASCEND.parent / "cuda" / "alexnet_sync"))  # any input: the smallest
    proc = subprocess.Popen([sys.executable, "-m", "npumagic.cli", "analyze", job], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert proc.returncode == 1, err
    assert "Broken pipe" not in err and "Traceback" not in err and "Exception ignored" not in err


def test_help_reads_as_written_and_show_takes_one_view(capsys):
    # every subcommand's help is shown as argparse formats it ("95%" once, not "95%%")
    for command in ("analyze", "advise", "compare", "check", "show", "runs", "export", "demo", "ab"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        out = capsys.readouterr().out
        assert "%%" not in out and f"usage: npumagic {command}" in out
    with pytest.raises(SystemExit) as exit_:
        main(["show", "job", "--steps", "--timeline", "-o", "x.png"])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # 100000 dpi would ask for terabytes
        main(["show", "job", "--dpi", "100000", "-o", "x.png"])
    assert exit_.value.code == 2 and "100000 is not from 20 to 600" in capsys.readouterr().err


def test_warnings_read_as_one_line_like_the_errors(tmp_path):
    # a job with a rank torch_npu did not parse: the reader warns that it is left out
    job = tmp_path / "job"
    shutil.copytree(need(ASCEND / "level1" / "rank0_ascend_pt"), job / "rank0_ascend_pt")
    (job / "rank1_ascend_pt").mkdir()
    done = subprocess.run([sys.executable, "-m", "npumagic.cli", "analyze", str(job)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("npumagic: warning: ") and "rank1_ascend_pt" in done.stderr
    assert "UserWarning" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_runs_takes_the_same_folder_given_both_ways(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "npumagic_demo").mkdir()
    assert main(["runs", "npumagic_demo", "--out", str(tmp_path / "npumagic_demo")]) == 0
    assert "no runs in npumagic_demo" in capsys.readouterr().out


def _raw_job(tmp_path):
    """A job folder whose one rank holds only torch_npu's raw data (PROF_*), as a failed export leaves it."""
    rank = tmp_path / "job" / "rank0_ascend_pt"
    (rank / "PROF_000001_20240929162113526_ABCDEFGHIJ").mkdir(parents=True)
    (rank / "FRAMEWORK").mkdir()
    return rank.parent


def test_parse_raw_without_torch_npu_is_exit_2_naming_the_command_to_run_elsewhere(tmp_path):
    job = _raw_job(tmp_path)
    done = subprocess.run([sys.executable, "-m", "npumagic.cli", "analyze", str(job), "--parse-raw"],
                          capture_output=True, text=True)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "torch_npu does not import here" in line
    assert line.endswith(f"run python -c \"from torch_npu.profiler.profiler import analyse; analyse('{job}')\"")


def test_parse_raw_runs_torch_npus_offline_analysis_then_reads_the_result(tmp_path):
    # GIVEN a never-parsed rank, and a torch_npu whose offline analysis has the wheel's signature
    # (torch_npu 2.14.0 profiler/profiler.py: analyse(profiler_path, max_process_number, export_type));
    # it stands in for CANN's parse by writing a genuine rank's ASCEND_PROFILER_OUTPUT
    job = _raw_job(tmp_path)
    fake = tmp_path / "site" / "torch_npu" / "profiler"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    source = need(ASCEND / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT")
    (fake / "profiler.py").write_text(
        "import pathlib, shutil\n"
        "def analyse(profiler_path, max_process_number=1, export_type=None):\n"
        "    for rank in pathlib.Path(profiler_path).glob('*_ascend_pt'):\n"
        f"        shutil.copytree({str(source)!r}, rank / 'ASCEND_PROFILER_OUTPUT', copy_function=shutil.copyfile)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)])}
    # WHEN analyze --parse-raw runs; THEN it parsed the rank and reads it
    done = subprocess.run([sys.executable, "-m", "npumagic.cli", "analyze", str(job), "--parse-raw", "--json"],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert f"parsed {job / 'rank0_ascend_pt'} with torch_npu's offline analysis" in done.stderr
    assert json.loads(done.stdout)["steps"][0]["step"] == 50


@pytest.mark.slow  # unpacks the torch_npu wheel
def test_the_offline_analysis_npumagic_calls_has_the_wheels_signature():
    import ast
    import zipfile

    from .conftest import torch_npu_wheel

    with zipfile.ZipFile(torch_npu_wheel()) as wheel:
        tree = ast.parse(wheel.read("torch_npu/profiler/profiler.py"))
    [analyse] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "analyse"]
    assert [a.arg for a in analyse.args.args] == ["profiler_path", "max_process_number", "export_type"]
    assert len(analyse.args.defaults) == 2  # analyse(path) alone is a whole call


def test_plain_advise_on_two_ranks_says_what_it_left_out_of_the_other_rank(capsys, monkeypatch):
    # GIVEN level1: rank 1 alone is host-bound (a high finding), rank 0 is advised on by default
    monkeypatch.setenv("COLUMNS", "300")
    # WHEN plain advise runs on the job
    assert main(["advise", str(need(ASCEND / "level1"))]) == 0
    out = capsys.readouterr().out
    # THEN the last line counts the low findings left out, and rank 1's own findings by severity
    assert "host_bound" not in out
    assert out.splitlines()[-1] == ("8 low-severity findings not shown, nor rank 1's own findings (1 high, 1 low); all "
                                    "of them, of every rank: --all")
    assert main(["advise", str(need(ASCEND / "level1")), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["other_ranks_not_shown"] == {"ranks": [1], "findings": {"high": 1, "low": 1}}


def test_compare_by_operator_on_two_cell_captures(trainer, tmp_path):
    # GIVEN two runs captured by %%npuprofile on the CPU (no device task launched: the table of
    # launches is empty, and pandas inferred its thread column as object, the calls' as text)
    for name in ("p1", "p2"):
        ran = trainer.run_cell(f"%%npuprofile --wait 0 --warmup 1 --steps 3 --quiet --name {name}\n"
                               "for _ in range(6):\n    train_step()\n")
        assert ran.success, ran.error_in_exec
    # WHEN they are compared by operator from the command line
    done = subprocess.run([sys.executable, "-m", "npumagic.cli", "compare", "--history", str(tmp_path / "runs"),
                           "p1", "p2", "--by-operator", "--json"], capture_output=True, text=True)
    # THEN the operators are matched (it raised "incompatible merge keys" before)
    assert done.returncode == 0, done.stderr
    operators = {row["operator"]: row for row in json.loads(done.stdout)["operators"]}
    assert "aten::linear" in operators or "aten::addmm" in operators
    assert all(row["calls_a"] > 0 and row["calls_b"] > 0 for row in operators.values())


def test_counts_agree_in_number_and_an_open_range_is_said_in_words(capsys):
    level1 = str(need(ASCEND / "level1"))
    assert main(["steps", level1]) == 0
    assert capsys.readouterr().out.startswith(f"{level1}: 1 step\n")
    assert main(["memory", level1]) == 0
    out = capsys.readouterr().out
    assert " 1 allocs " not in out and " 1 alloc " in out
    assert main(["steps", level1, "--first", "60"]) == 2
    assert f"no steps from 60 in {level1}; its steps: 50..50" in capsys.readouterr().err
    assert main(["steps", level1, "--last", "10"]) == 2
    assert "no steps up to 10 in" in capsys.readouterr().err


def test_two_ranks_of_one_job_are_compared_and_one_folder_with_itself_is_refused(capsys):
    level1 = str(need(ASCEND / "level1"))
    assert main(["compare", level1, level1, "--rank-a", "0", "--rank-b", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["name_a"], doc["name_b"]) == ("ascend/level1 rank 0", "ascend/level1 rank 1")
    for same in ([], ["--rank-a", "1", "--rank-b", "1"]):
        assert main(["compare", level1, level1, *same]) == 2
        assert "both sides are" in capsys.readouterr().err


def test_a_rank_without_host_lanes_says_its_host_waits_are_not_measured_not_zero(capsys):
    # GIVEN partial/job2: kernel_details.csv and step_trace_time.csv, no trace_view.json (no host lanes)
    job2, level1 = str(need(ASCEND / "partial" / "job2")), str(need(ASCEND / "level1"))
    assert main(["analyze", job2, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["headline"]["dataloader_share"] is None and doc["headline"]["sync_share"] is None
    assert all(s["dataloader_us"] is None and s["sync_us"] is None for s in doc["steps"])
    # WHEN it is compared with a rank that has them THEN those rows are not measured, not -100% better
    assert main(["compare", level1, job2, "--json"]) == 0
    rows = {r["column"]: r for r in json.loads(capsys.readouterr().out)["breakdown"]}
    for column in ("dataloader_us", "sync_us", "idle_python_us"):
        assert rows[column]["b"] is None and rows[column]["direction"] == "not measured", rows[column]
    assert rows["computing_us"]["direction"] == "worse"
    # and no finding is made of an unmeasured wait ("the step waits nan ms for the next batch")
    assert main(["advise", job2, "--all"]) == 0
    advice = capsys.readouterr().out
    assert "nan" not in advice.lower() and "for the next batch" not in advice
