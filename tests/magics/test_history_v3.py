"""A capture's step times and device neighbours travel on the run's record, not in its Summary's
meta. The history is one written by npumagic 66b9da5 (tests/data/make_history_v3.py: two real
CPU runs of 12 steps, 4 profiled), whose recorder wrote them into the stored Summary's meta:
read-only they are still read from there; writable, they move onto the run's row as the Summary
is first read. What the analyses and ``analyze --json`` say is what they said before."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from npumagic.analysis.compare import profiling_inflation
from npumagic.analysis.persist import load_summary
from npumagic.commands.analyze import analyze
from npumagic.commands.places import Places
from npumagic.history import HistoryStore
from npumagic.named_runs import NamedRuns

V3 = Path(__file__).resolve().parents[1] / "data" / "history_v3.sqlite"  # written by npumagic 66b9da5


@pytest.fixture
def old(tmp_path) -> Path:
    shutil.copy(V3, tmp_path / "history.sqlite")
    return tmp_path


def _stored_meta(path: Path, name: str) -> dict:
    """The stored Summary's meta as it is in the file (nothing moved)."""
    db = sqlite3.connect(path / "history.sqlite")
    try:
        data, = db.execute("SELECT data FROM summaries JOIN runs ON runs.id = run_id WHERE name = ?", (name,)).fetchone()
    finally:
        db.close()
    return load_summary(data).meta


def test_a_read_only_old_history_reads_the_measurements_from_the_summarys_meta(old):
    written = _stored_meta(old, "baseline")
    assert len(written["step_times"]["profiled"]) == 4 and len(written["step_times"]["unprofiled"]) == 7
    before = (old / "history.sqlite").read_bytes()
    store = HistoryStore(old, create=False)
    assert "step_times" not in store.summary("baseline").meta  # the Summary holds what its trace says
    run = store.measured("baseline")
    assert run.step_times == written["step_times"] and run.device_neighbours == written["device_neighbours"] == []
    assert (old / "history.sqlite").read_bytes() == before  # read-only: nothing moved in the file


def test_analyze_json_of_an_old_run_shows_the_measurements_in_meta_as_before(old):
    written = _stored_meta(old, "baseline")
    meta = analyze(Places(runs=NamedRuns(old, create=False)), "baseline").to_dict()["meta"]  # every shell's analyze
    assert list(meta) == list(written) and meta["step_times"] == written["step_times"]


def test_a_writable_old_history_moves_the_measurements_onto_the_run_as_its_summary_is_read(old):
    written = _stored_meta(old, "baseline")
    runs = NamedRuns(old)  # brought up to the current schema: new columns, still empty
    assert runs.facts("fixed").step_times == _stored_meta(old, "fixed")["step_times"]  # not moved yet: from meta
    assert "step_times" not in runs.summary("baseline").meta
    assert "step_times" not in _stored_meta(old, "baseline")  # stored again without them
    db = sqlite3.connect(old / "history.sqlite")
    try:
        row, = db.execute("SELECT step_times FROM runs WHERE name = 'baseline'").fetchone()
    finally:
        db.close()
    assert json.loads(row) == written["step_times"]
    facts = NamedRuns(old).facts("baseline")
    assert facts.step_times == written["step_times"] and facts.device_neighbours == []
    inflation = profiling_inflation(facts)  # 4 profiled steps against 7 unprofiled ones
    assert inflation is not None and inflation.ratio > 0
    verdict = runs.compare("baseline", "fixed")  # each side's record read: no error, a real comparison
    assert verdict.n_a == 4 and verdict.n_b == 4
