"""Predict, then verify, kept: ``%npucompare A B --fix RULE`` sets A's finding's predicted saving
against the achieved one and keeps it in the history's verified_fixes (a table added to an old
history without losing anything); each rule's calibration (``npumagic rules``, ``%npu rules``,
``%npuadvise --calibration``) is the median achieved/predicted over those fixes. The history is
one written by npumagic 7c86840 (tests/data/make_history_v2.py): two real CPU runs, a 3 ms sleep
per step then none. Bookkeeping and arithmetic only: no timing is asserted."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from IPython.core.error import UsageError

from npumagic.analysis.calibration import RuleCalibration, calibrate
from npumagic.history import SCHEMA_VERSION, HistoryStore

V2 = Path(__file__).resolve().parents[1] / "data" / "history_v2.sqlite"  # written by npumagic 7c86840
TABLES = ("runs", "kernels", "steps", "summaries")


def _rows(path: Path) -> dict[str, list]:
    db = sqlite3.connect(path)
    try:
        return {t: db.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in TABLES}
    finally:
        db.close()


@pytest.fixture
def old(tmp_path) -> Path:
    shutil.copy(V2, tmp_path / "history.sqlite")
    return tmp_path


@pytest.fixture
def v2_shell(shell, old):
    shell.run_line_magic("config", f"NpuMagics.output_dir = {str(old)!r}")
    return shell


def test_an_old_history_gains_the_fixes_table_and_keeps_every_row(old):
    before = _rows(old / "history.sqlite")
    assert HistoryStore(old, create=False).fixes() == []  # read-only, before the table exists
    store = HistoryStore(old)
    assert store.version == 2 and SCHEMA_VERSION == 4
    after = _rows(old / "history.sqlite")  # schema 4's two columns added to each run, empty
    assert [r[:-2] for r in after["runs"]] == before["runs"] and {r[-2:] for r in after["runs"]} == {(None, None)}
    assert {t: after[t] for t in TABLES[1:]} == {t: before[t] for t in TABLES[1:]}  # nothing lost or changed
    assert store.get("baseline").note == "written by npumagic 7c86840" and store.summary("fixed") is not None
    store.add_fix("baseline", "fixed", "host_bound", 2.0, 1.5, 3.0, 1.8, 0.1)
    store.add_fix("baseline", "fixed", "host_bound", 2.0, 1.5, 3.0, 1.9, 0.1)  # verified again: replaces
    assert store.fixes() == [{"run_a": "baseline", "run_b": "fixed", "rule": "host_bound", "predicted_ms": 2.0,
                              "low_ms": 1.5, "high_ms": 3.0, "achieved_ms": 1.9, "noise_ms": 0.1}]
    assert HistoryStore(old).version == SCHEMA_VERSION  # nothing left to migrate


def test_npucompare_fix_sets_the_prediction_against_the_achieved_saving_and_keeps_it(v2_shell, old):
    report = v2_shell.run_line_magic("npucompare", "baseline fixed --fix host_bound --no-plot")
    session = v2_shell.magics_manager.registry["NpuMagics"].session
    told = next(f for f in session.advise("baseline").findings if f.rule == "host_bound")
    a, b = (session.runs.summary(n).step_stats["median_us"] for n in ("baseline", "fixed"))
    checked = report.verification
    assert (checked.rule, checked.predicted_ms, (checked.low_ms, checked.high_ms)) == \
        ("host_bound", told.predicted_saving_ms, told.predicted_interval)
    assert checked.achieved_ms == pytest.approx((a - b) / 1000)
    assert report.kept and report.significant == report.comparison.significant  # still the comparison
    assert f"fix verified: {checked.sentence()}; kept in the history" in str(report)
    assert f"host_bound: predicted -{told.predicted_saving_ms:,.2f} ms" in report._repr_mimebundle_()["text/html"]
    [kept] = HistoryStore(old).fixes()
    assert kept == {"run_a": "baseline", "run_b": "fixed", "rule": "host_bound", "predicted_ms": checked.predicted_ms,
                    "low_ms": checked.low_ms, "high_ms": checked.high_ms, "achieved_ms": checked.achieved_ms,
                    "noise_ms": checked.noise_ms}
    assert not hasattr(v2_shell.run_line_magic("npucompare", "baseline fixed --no-plot"), "verification")


def test_an_unknown_rule_is_a_usage_error_naming_the_baselines_rules(v2_shell, old):
    with pytest.raises(UsageError, match=r"baseline has no finding of rule 'nope'; its rules: host_bound"):
        v2_shell.run_line_magic("npucompare", "baseline fixed --fix nope --no-plot")
    assert HistoryStore(old).fixes() == []


@pytest.mark.parametrize("achieved, count, median, over", [((1.0,), 1, 0.5, False), ((0.2,), 1, 0.1, False),
                                                         ((0.2, 0.6), 2, 0.2, True), ((0.2, 1.2), 2, 0.35, True),
                                                         ((0.2, 1.2, 2.0), 3, 0.6, False), ((1.0, 1.0), 2, 0.5, False)])
def test_calibration_is_the_median_ratio_and_over_promises_under_half_over_two_fixes(achieved, count, median, over):
    rows = [{"rule": "dataloader", "predicted_ms": 2.0, "achieved_ms": x} for x in achieved]
    rows.append({"rule": "dataloader", "predicted_ms": 0.0, "achieved_ms": 3.0})  # predicted nothing: no ratio
    got = calibrate(rows)["dataloader"]
    assert (got.count, got.median_ratio, got.over_promises) == (count, pytest.approx(median), over)
    assert ("over-promises" in got.sentence()) == over
    assert RuleCalibration("sync", ()).sentence() == "sync: not verified yet"


def test_rules_and_npuadvise_calibration_show_each_rules_calibration(v2_shell, old, capsys):
    from npumagic.cli import main

    v2_shell.run_line_magic("npucompare", "baseline fixed --fix host_bound --no-plot")
    ratio = HistoryStore(old).fixes()[0]["achieved_ms"] / HistoryStore(old).fixes()[0]["predicted_ms"]
    HistoryStore(old).add_fix("earlier", "later", "dataloader", 10.0, 8.0, 12.0, 2.0)
    HistoryStore(old).add_fix("other", "later", "dataloader", 10.0, 8.0, 12.0, 4.0)
    table = v2_shell.run_line_magic("npu", "rules")
    rows = {r["rule"]: r for r in table.to_dict()["rules"]}
    assert rows["host_bound"]["verified_fixes"] == 1 and rows["host_bound"]["median_ratio"] == pytest.approx(ratio)
    assert rows["dataloader"]["median_ratio"] == pytest.approx(0.3) and rows["dataloader"]["over_promises"]
    assert rows["sync"]["verified_fixes"] == 0 and not rows["sync"]["over_promises"]
    assert "dataloader             core      achieved/predicted median 0.30 over 2 verified fixes; over-promises" \
        in table.text()
    advised = v2_shell.run_line_magic("npuadvise", "baseline --calibration")
    assert [r["rule"] for r in advised.to_dict()["rules"]] == ["host_bound"] and advised.run == "baseline"
    assert f"predicted -{advised.rows[0]['predicted_saving_ms']:,.2f} ms" in advised.text()
    assert f"median {ratio:.2f} over 1 verified fix" in advised.text()
    assert main(["rules", str(old), "--json"]) == 0  # the CLI reads the same table
    cli = {r["rule"]: r for r in json.loads(capsys.readouterr().out)["rules"]}
    assert cli["dataloader"]["over_promises"] and cli["host_bound"]["verified_fixes"] == 1


def test_the_cli_verifies_a_fix_and_keeps_nothing_in_the_history_it_only_reads(old, capsys):
    from npumagic.cli import main

    assert main(["compare", "baseline", "fixed", "--history", str(old), "--fix", "host_bound", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verification"]["rule"] == "host_bound" and doc["verification"]["kept"] is False
    assert HistoryStore(old, create=False).fixes() == []


def test_a_dataloader_sleep_removed_is_verified_against_the_dataloader_findings_prediction(trainer):
    from .test_checklist_magics import BATCHES_SETUP, _profile_cell

    # GIVEN a tiny real model whose DataLoader sleeps 30 ms a batch, then the same cell without the sleep
    trainer.run_cell("import time\n" + BATCHES_SETUP)
    slow = _profile_cell(trainer, "slow", 0.03)
    _profile_cell(trainer, "fast", 0.0)
    told = next(f for f in slow.verdict.advice.findings if f.rule == "dataloader")
    # WHEN the fix is named THEN its prediction is the baseline's finding's, and the saving the medians'
    checked = trainer.run_line_magic("npucompare", "slow fast --fix dataloader --no-plot").verification
    session = trainer.magics_manager.registry["NpuMagics"].session
    a, b = (session.runs.summary(n).step_stats["median_us"] for n in ("slow", "fast"))
    assert (checked.rule, checked.predicted_ms, (checked.low_ms, checked.high_ms)) == \
        ("dataloader", told.predicted_saving_ms, told.predicted_interval)
    assert checked.achieved_ms == pytest.approx((a - b) / 1000)
    [kept] = session.store.fixes()
    assert (kept["run_a"], kept["run_b"], kept["rule"]) == ("slow", "fast", "dataloader")
    row = next(r for r in trainer.run_line_magic("npu", "rules").rows if r["rule"] == "dataloader")
    assert row["verified_fixes"] == 1 and row["median_ratio"] == pytest.approx(checked.ratio)
