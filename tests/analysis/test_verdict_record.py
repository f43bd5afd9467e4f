"""A run's verdict stored through its versioned record reads back by attribute, from format 1
and from the unnumbered format 0 the history held before, and the troubleshooting log reads it so."""

from __future__ import annotations

import json

import npumagic
from npumagic.analysis.persist_verdict import VERDICT_FORMAT, read_verdict_record, verdict_record
from npumagic.records import Run
from npumagic.render.export import log_table, render_markdown

from ..conftest import ASCEND, shared_summary

ALERT = {"outside": True, "band": [1.0, 2.0]}


def _verdict():
    return npumagic.checklist(shared_summary(ASCEND / "level1" / "rank0_ascend_pt"))


def test_a_verdict_round_trips_through_its_record_in_json():
    verdict = _verdict()
    stored = json.loads(json.dumps(verdict_record(verdict, ALERT)))
    assert stored["format"] == VERDICT_FORMAT == 1
    record = read_verdict_record(stored)
    assert record.bottleneck == verdict.bottleneck == "communication"
    assert record.next_change == verdict.next_change
    assert [list(s) for s in record.steps] == [list(s) for s in verdict.steps]
    assert [(f.severity, f.category, f.title, f.fix) for f in record.findings] == \
        [(f.severity, str(f.category), f.title, f.fix) for f in verdict.advice]
    assert record.alert == ALERT and record.evidence == json.loads(json.dumps(verdict.evidence))
    assert "format" not in record.to_dict()


def test_a_format_0_record_reads_as_format_1_does():
    verdict = _verdict()
    old = json.loads(json.dumps(dict(verdict.as_dict(), alert=ALERT)))  # what the history stored before
    new = json.loads(json.dumps(verdict_record(verdict, ALERT)))
    assert read_verdict_record(old) == read_verdict_record(new)
    assert read_verdict_record(old).to_dict() == old


def test_a_hand_edited_record_reads_leniently():
    record = read_verdict_record({"bottleneck": 5, "findings": [1, "x", {"severity": 1}], "steps": [5, [1]]})
    assert record.bottleneck is None and record.steps == (("1",),)
    assert [(f.severity, f.category) for f in record.findings] == [("1", "")]
    assert read_verdict_record("nonsense") == read_verdict_record({}) and read_verdict_record({}).alert is None


def test_the_log_reads_the_record_by_attribute():
    verdict = _verdict()
    record = read_verdict_record(json.loads(json.dumps(verdict_record(verdict))))
    run = Run(1, "r0", "import", "ok", 0.0, 1.0, "npu", "Ascend", None, verdict=record)
    row = log_table([run]).iloc[0]
    assert row["bottleneck"] == "communication" and row["next_change"] == verdict.next_change
    assert row["findings"].startswith(f"[{verdict.advice[0].severity}] communication: ")
    text = render_markdown([run])
    assert "| 2 |" in text and "Findings:" in text and "fix: " in text
