"""The npumagic command line on real outputs."""

from __future__ import annotations

import json
import subprocess
import sys

from npumagic.cli import main

from .conftest import ASCEND, need


def test_analyze_prints_the_table_and_verdict(capsys):
    assert main(["analyze", str(need(ASCEND / "level1"))]) == 0
    out = capsys.readouterr().out
    assert "npu on Ascend NPU, rank 0" in out
    assert "2. Classify     communication" in out
    assert "slowest" in out  # two ranks side by side


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
