"""Predict, then verify, kept: ``%npucompare A B --fix RULE`` sets A's finding's predicted saving
against the achieved one and keeps it in the history's verified_fixes (a table added to an old
history without losing anything); each rule's calibration (``npumagic rules``, ``%npu rules``,
``%npuadvise --calibration``) is the median achieved/predicted over those fixes. The history is
one written by npumagic 7c86840 (tests/data/make_history_v2.py): two real CPU runs, a 3 ms sleep
per step then none. Bookkeeping and arithmetic only: no timing is asserted."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

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


def test_an_old_history_gains_the_fixes_table_and_keeps_every_row(old):
    before = _rows(old / "history.sqlite")
    assert HistoryStore(old, create=False).fixes() == []  # read-only, before the table exists
    store = HistoryStore(old)
    assert store.version == 2 and SCHEMA_VERSION == 3
    assert _rows(old / "history.sqlite") == before  # nothing lost or changed
    assert store.get("baseline").note == "written by npumagic 7c86840" and store.summary("fixed") is not None
    store.add_fix("baseline", "fixed", "host_bound", 2.0, 1.5, 3.0, 1.8, 0.1)
    store.add_fix("baseline", "fixed", "host_bound", 2.0, 1.5, 3.0, 1.9, 0.1)  # verified again: replaces
    assert store.fixes() == [{"run_a": "baseline", "run_b": "fixed", "rule": "host_bound", "predicted_ms": 2.0,
                              "low_ms": 1.5, "high_ms": 3.0, "achieved_ms": 1.9, "noise_ms": 0.1}]
    assert HistoryStore(old).version == SCHEMA_VERSION  # nothing left to migrate
