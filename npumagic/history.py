"""The run history: an SQLite database (WAL mode) in the output directory, safe for several
kernels at once. One row per run with its metadata, its full Summary (so old runs can be
compared and advised on without their trace files), plus each run's per-step and per-kernel
tables so kernels can be followed across runs with SQL.

Schema versions: ``PRAGMA user_version`` is the number of :data:`MIGRATIONS` applied. Version 0
is the schema npumagic wrote before versions existed (:data:`SCHEMA`). Opening a store brings an
older file up to :data:`SCHEMA_VERSION` in place, in one transaction (a second kernel opening it
at the same time waits, then finds nothing left to do). To change the schema, append a
migration; never edit one that has shipped."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import socket
import sqlite3
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from .analysis.persist_verdict import read_verdict_record
from .wording import say
from .errors import NpumagicError, RunNameTaken, UnknownRun  # noqa: F401 - the history raises them
from .names import DB_NAME, check_name  # noqa: F401  (DB_NAME: imported from here too)
from .records import RUN_LIST_COLUMNS, Headline, Run, run_list_frame, run_row
from .writers import another_live_process, process_started, writer_alive  # noqa: F401 - imported from here too

if TYPE_CHECKING:  # reading the runs' records needs neither (`npumagic runs`, `export`): imported where used
    import numpy as np
    import pandas as pd

    from .analysis.summary import Summary

AUTO_NAME = re.compile(r"^run(\d+)$")
SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL DEFAULT 'profile',
    status TEXT NOT NULL,
    created REAL NOT NULL,
    finished REAL,
    backend TEXT, device TEXT,
    source TEXT, arguments TEXT, environment TEXT, versions TEXT, dataloaders TEXT,
    run_dir TEXT, message TEXT, pid INTEGER, host TEXT,
    steps_seen INTEGER, headline TEXT, verdict TEXT, note TEXT
);
CREATE TABLE IF NOT EXISTS kernels (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    name TEXT, type TEXT, core TEXT, count INTEGER,
    total_us REAL, mean_us REAL, min_us REAL, max_us REAL, share REAL
);
CREATE TABLE IF NOT EXISTS steps (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER, wall_us REAL, computing_us REAL, communication_us REAL, comm_not_overlapped_us REAL,
    overlapped_us REAL, free_us REAL, preparing_us REAL, dataloader_us REAL, sync_us REAL, busy_us REAL,
    device_util REAL
);
CREATE INDEX IF NOT EXISTS kernels_by_name ON kernels(name);
CREATE INDEX IF NOT EXISTS kernels_by_run ON kernels(run_id);
CREATE INDEX IF NOT EXISTS steps_by_run ON steps(run_id);
"""


def _add_summaries(db: sqlite3.Connection) -> None:
    """1: the full Summary of each run (see :mod:`npumagic.analysis.persist`)."""
    db.execute("""CREATE TABLE IF NOT EXISTS summaries (
        run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
        format INTEGER NOT NULL, data BLOB NOT NULL)""")


def _add_ownership(db: sqlite3.Connection) -> None:
    """2: whether npumagic created the run directory (only those may be deleted), and the start
    time of the process that wrote a row (a pid alone may have been reused)."""
    columns = {r[1] for r in db.execute("PRAGMA table_info(runs)")}
    if "run_dir_owned" not in columns:
        db.execute("ALTER TABLE runs ADD COLUMN run_dir_owned INTEGER NOT NULL DEFAULT 0")
    if "pid_started" not in columns:
        db.execute("ALTER TABLE runs ADD COLUMN pid_started REAL")


def _add_verified_fixes(db: sqlite3.Connection) -> None:
    """3: each verified fix (``%npucompare A B --fix RULE``): the rule's predicted saving per step
    (ms, with its interval) against the achieved one. Runs are kept by name, not by a reference:
    a rule's calibration outlives the runs that measured it."""
    db.execute("""CREATE TABLE IF NOT EXISTS verified_fixes (
        id INTEGER PRIMARY KEY AUTOINCREMENT, created REAL NOT NULL,
        run_a TEXT NOT NULL, run_b TEXT NOT NULL, rule TEXT NOT NULL,
        predicted_ms REAL NOT NULL, low_ms REAL NOT NULL, high_ms REAL NOT NULL, achieved_ms REAL NOT NULL,
        noise_ms REAL NOT NULL DEFAULT 0, UNIQUE (run_a, run_b, rule))""")


def _add_run_facts(db: sqlite3.Connection) -> None:
    """4: what a capture measured beside its trace, on the run's row: its step times with and
    without the profiler and the other processes on its device (schema 3 kept them in the stored
    Summary's meta; they move here as that Summary is first read, :meth:`HistoryStore.summary`)."""
    columns = {r[1] for r in db.execute("PRAGMA table_info(runs)")}
    for column in ("step_times", "device_neighbours"):
        if column not in columns:
            db.execute(f"ALTER TABLE runs ADD COLUMN {column} TEXT")


# Each entry takes the schema from version i to i + 1 inside the opening transaction.
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_add_summaries, _add_ownership, _add_verified_fixes,
                                                          _add_run_facts]
SCHEMA_VERSION = len(MIGRATIONS)
KERNEL_FIELDS = ["name", "type", "core", "count", "total_us", "mean_us", "min_us", "max_us", "share"]
STEP_FIELDS = ["step", "wall_us", "computing_us", "communication_us", "comm_not_overlapped_us", "overlapped_us",
               "free_us", "preparing_us", "dataloader_us", "sync_us", "busy_us", "device_util"]
FIX_FIELDS = ["run_a", "run_b", "rule", "predicted_ms", "low_ms", "high_ms", "achieved_ms", "noise_ms"]


class HistoryError(NpumagicError):
    """A history that cannot be opened or written: not a database, corrupt, read-only, or an
    output directory that is not a directory. The message names the path."""


class NewerHistory(HistoryError):
    """A history written by a newer npumagic (a schema version this one does not know)."""


_TEXT_FIELDS = ("name", "kind", "status", "backend", "device", "source", "run_dir", "message", "note")


def _run(row: sqlite3.Row) -> Run:
    """A stored row as a :class:`~npumagic.records.Run` (a 'running' row whose process is gone
    reads as crashed). A value of the wrong type (a history edited by hand or by another tool)
    reads as text where text is kept, and as missing where a number or a structure is."""
    d = {k: row[k] for k in row.keys() if k in _RUN_FIELDS}
    for key in ("arguments", "environment", "versions", "headline", "verdict", "dataloaders", "step_times",
                "device_neighbours"):
        d[key] = _decode(d.get(key), [] if key in ("dataloaders", "device_neighbours") else {})
    for key in _TEXT_FIELDS:
        d[key] = _text(d.get(key))
    d["name"], d["kind"], d["status"] = d["name"] or "?", d["kind"] or "profile", d["status"] or "?"
    for key in ("created", "finished"):
        d[key] = d.get(key) if _is_number(d.get(key)) else None
    d["steps_seen"] = d.get("steps_seen") if isinstance(d.get("steps_seen"), int) else None
    d["headline"] = Headline.of(d["headline"])
    d["verdict"] = read_verdict_record(d["verdict"])
    d["dataloaders"] = [x for x in d["dataloaders"] if isinstance(x, dict)]
    d["device_neighbours"] = [x for x in d["device_neighbours"] if isinstance(x, dict)]
    d["run_dir_owned"] = d.get("run_dir_owned") in (1, True)
    if d["status"] == "running" and not writer_alive(row["pid"], row["host"], _get(row, "pid_started")):
        d["status"] = "crashed"  # its kernel died mid-capture
    return Run(**d)


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _get(row: sqlite3.Row, key: str) -> Any:
    return row[key] if key in row.keys() else None


def _lenient_text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _decode(text: Any, empty: Any) -> Any:
    """A stored JSON field; text edited into something else reads as empty."""
    if not text:
        return empty
    try:
        value = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return empty
    return value if isinstance(value, type(empty)) else empty


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _readonly_failure(exc: BaseException) -> bool:
    text = str(exc)
    return (isinstance(exc, PermissionError) or "read-only" in text or "readonly" in text
            or "unable to open" in text or getattr(exc, "errno", None) == 30)  # EROFS


def _json(value: Any) -> str:
    return json.dumps(value, default=str, allow_nan=True)


def _encode(fields: dict[str, Any]) -> dict[str, Any]:
    """Column values as stored: dicts and lists as JSON text."""
    return {k: (_json(v) if isinstance(v, (dict, list)) else v) for k, v in fields.items()}


_RUN_FIELDS = frozenset(Run.__dataclass_fields__)


class HistoryStore:
    """Runs of one output directory. Every call opens its own short transaction, so two kernels
    (or a crashed one) never leave it half-written."""

    def __init__(self, directory: str | Path, create: bool = True) -> None:
        """Open (and create or migrate) the history of ``directory``.

        A history that cannot be written (a read-only file or folder) is opened read-only:
        it can be listed, and recording raises :class:`HistoryError`. With ``create=False``
        nothing is created or changed (the CLI's ``runs``/``export``).

        Raises
        ------
        HistoryError : naming the path, when ``directory`` is not a directory, or the history is
            not an SQLite database, is corrupt or truncated, or cannot be opened at all.
        """
        self.directory = Path(directory)
        self.path = self.directory / DB_NAME
        self.readonly = False
        if self.directory.exists() and not self.directory.is_dir():
            raise HistoryError(f"{self.directory}: is a file, not a directory; the output directory holds "
                               f"{DB_NAME} and one folder per run (set NpuMagics.output_dir or --out to a directory)")
        for path in (self.path, *(self.path.with_name(DB_NAME + end) for end in ("-wal", "-shm", "-journal"))):
            if path.is_symlink():  # planted in a shared folder: SQLite would write through it
                raise HistoryError(f"{path}: is a symbolic link; npumagic uses only a history it created "
                                   "(plain files): remove the link or choose another output directory")
        if self.path.exists() and not self.path.is_file():
            raise HistoryError(f"{self.path}: is not a file; expected npumagic's SQLite history")
        if not create:
            if not self.directory.is_dir():
                raise HistoryError(f"{self.directory}: no such output directory (expected the directory "
                                   "npumagic's captures wrote their runs to)")
            if not self.path.is_file():
                raise HistoryError(f"{self.path}: no history here (expected the directory npumagic's captures wrote their "
                                   "runs to)")
            self._open_readonly()
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with self._errors("open"):
                db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
                try:
                    db.execute("PRAGMA busy_timeout=30000")
                    self._check_ours(db)  # before WAL mode or a table is written into someone else's database
                    db.execute("PRAGMA journal_mode=WAL")  # readers never block the writer (several kernels)
                finally:
                    db.close()
                self.version = self._migrate()
        except (OSError, HistoryError) as exc:
            if not self.path.is_file() or not _readonly_failure(exc):
                if isinstance(exc, HistoryError):
                    raise
                raise HistoryError(f"{self.directory}: cannot create the output directory ({exc.strerror or exc})") \
                    from None
            self._open_readonly()

    def _check_ours(self, db: sqlite3.Connection) -> None:
        """Raise HistoryError for a database npumagic did not create: one with tables but not
        npumagic's ``runs`` table (another application's, left in or linked into the folder)."""
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        columns = {r[1] for r in db.execute("PRAGMA table_info(runs)")}
        if tables and not {"name", "status", "created"} <= columns:
            raise HistoryError(f"{self.path}: another application's SQLite database, not an npumagic history "
                               f"(tables: {', '.join(sorted(tables)[:5])}); it is left as it is: move it aside or "
                               "choose another output directory")

    def _open_readonly(self) -> None:
        """Read-only: sees what a live kernel just wrote (WAL). Opened writable where it can be (it
        is never written): SQLite removes the -wal and -shm files as the last writable connection
        closes, never a read-only one's; where even SQLite's own files cannot be written (a
        read-only folder cannot hold the -shm file), immutable."""
        self.readonly = True
        for mode in ("rw", "ro", "ro&immutable=1"):
            self._mode = mode
            try:
                with self._connect() as db:
                    self.version = int(db.execute("PRAGMA user_version").fetchone()[0])
                    db.execute("SELECT 1 FROM runs LIMIT 1").fetchall()  # a database without runs is not a history
                if self.version > SCHEMA_VERSION:  # its tables may not mean what this npumagic reads
                    raise NewerHistory(f"{self.path} has history schema version {self.version}; this npumagic knows "
                                       f"up to {SCHEMA_VERSION}: upgrade npumagic")
                return
            except HistoryError:
                if mode == "ro&immutable=1":
                    raise

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """sqlite3 failures as one HistoryError naming the file."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            text = str(exc)
            if "readonly" in text or "read-only" in text or "unable to open" in text:
                hint = "it is read-only here: runs can be listed but not recorded (choose another output_dir)"
            elif "not a database" in text or "malformed" in text or "no such table" in text:
                hint = "not a readable npumagic history (corrupt, truncated or another file); move it aside"
            else:
                hint = "the history could not be used"
            raise HistoryError(f"{self.path}: {hint} ({doing}: {text})") from None

    def _migrate(self) -> int:
        """Create or upgrade the schema to :data:`SCHEMA_VERSION`; return the version found."""
        with self._connect(immediate=True) as db:
            found = int(db.execute("PRAGMA user_version").fetchone()[0])
            if found > SCHEMA_VERSION:
                raise NewerHistory(f"{self.path} has history schema version {found}; this npumagic knows up to "
                                   f"{SCHEMA_VERSION}: upgrade npumagic, or use another NpuMagics.output_dir")
            if found < SCHEMA_VERSION:
                for statement in SCHEMA.split(";"):  # version 0; CREATE ... IF NOT EXISTS
                    if statement.strip():
                        db.execute(statement)
                for migration in MIGRATIONS[found:]:
                    migration(db)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")  # also proves the file can be written
        return found

    @contextmanager
    def _connect(self, immediate: bool = False) -> Iterator[sqlite3.Connection]:
        if immediate and self.readonly:
            raise HistoryError(f"{self.path}: it is read-only here: runs can be listed but not recorded "
                               "(choose another output_dir)")
        with self._errors("write" if immediate else "read"):
            if self.readonly:
                db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode={self._mode}", uri=True,
                                     isolation_level=None, timeout=30)
            else:
                db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.row_factory = sqlite3.Row
            db.text_factory = _lenient_text  # a text value that is no UTF-8 must not fail the whole query
            try:
                if not self.readonly:
                    db.execute("PRAGMA foreign_keys=ON")
                    db.execute("PRAGMA busy_timeout=30000")
                db.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
                try:
                    yield db
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
            finally:
                db.close()

    # -- writing -------------------------------------------------------------------------------
    def reserve(self, name: str | None = None, *, next_free: bool = False, **fields: Any) -> str:
        """Insert a new run as 'running' and return its name (``runN`` when ``name`` is None).
        A taken ``name`` raises RunNameTaken, or with ``next_free`` becomes ``name-2``,
        ``name-3``, ... (chosen in the same transaction, so two kernels never get the same)."""
        now = time.time()
        with self._connect(immediate=True) as db:
            if name is None:
                taken = [AUTO_NAME.match(r[0]) for r in db.execute("SELECT name FROM runs WHERE name GLOB 'run[0-9]*'")]
                name = f"run{1 + max((int(m.group(1)) for m in taken if m), default=0)}"
            elif db.execute("SELECT 1 FROM runs WHERE name = ?", (check_name(name),)).fetchone():
                if not next_free:
                    raise RunNameTaken(f"run name {name!r} is taken; {say('name_taken', name)}")
                taken = {r[0] for r in db.execute("SELECT name FROM runs WHERE name LIKE ? ESCAPE '\\'",
                                                  (name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "-%",))}
                name = next(f"{name}-{i}" for i in range(2, len(taken) + 3) if f"{name}-{i}" not in taken)
            values = {"name": name, "status": "running", "created": now, "pid": os.getpid(), "host": socket.gethostname(),
                      "pid_started": process_started()}
            values.update(_encode(fields))
            cols = ", ".join(values)
            db.execute(f"INSERT INTO runs ({cols}) VALUES ({', '.join('?' * len(values))})", list(values.values()))
        return name

    def finish(self, name: str, status: str, kernels: pd.DataFrame | None = None, steps: pd.DataFrame | None = None,
               summary: Summary | None = None, **fields: Any) -> None:
        """Record a run's outcome, its Summary and tables in one transaction."""
        values = {"status": status, "finished": time.time(), **_encode(fields)}
        with self._connect(immediate=True) as db:
            run_id = self._id(db, name)
            sets = ", ".join(f"{k} = ?" for k in values)
            db.execute(f"UPDATE runs SET {sets} WHERE id = ?", [*values.values(), run_id])
            if kernels is not None and len(kernels):
                rows = kernels.reindex(columns=KERNEL_FIELDS).astype(object).where(kernels.notna(), None)
                db.executemany(f"INSERT INTO kernels (run_id, {', '.join(KERNEL_FIELDS)}) VALUES (?{', ?' * len(KERNEL_FIELDS)})",
                               [(run_id, *r) for r in rows.itertuples(index=False)])
            if steps is not None and len(steps):
                rows = steps.reindex(columns=STEP_FIELDS).astype(object)
                db.executemany(f"INSERT INTO steps (run_id, {', '.join(STEP_FIELDS)}) VALUES (?{', ?' * len(STEP_FIELDS)})",
                               [(run_id, *r) for r in rows.itertuples(index=False)])
            if summary is not None:
                self._put_summary(db, run_id, summary)

    @staticmethod
    def _put_summary(db: sqlite3.Connection, run_id: int, summary: Summary) -> None:
        from .analysis.persist import FORMAT as SUMMARY_FORMAT
        from .analysis.persist import dump_summary

        db.execute("INSERT OR REPLACE INTO summaries (run_id, format, data) VALUES (?, ?, ?)",
                   (run_id, SUMMARY_FORMAT, dump_summary(summary)))

    def put_summary(self, name: str, summary: Summary) -> None:
        """Store (or replace) a run's Summary, e.g. one re-computed for a run recorded before
        summaries were stored."""
        with self._connect(immediate=True) as db:
            self._put_summary(db, self._id(db, name), summary)

    def add_fix(self, run_a: str, run_b: str, rule: str, predicted_ms: float, low_ms: float, high_ms: float,
                achieved_ms: float, noise_ms: float = 0.0) -> None:
        """Keep a verified fix (the same runs and rule verified again replace it: counted once)."""
        values = [run_a, run_b, rule, predicted_ms, low_ms, high_ms, achieved_ms, noise_ms]
        with self._connect(immediate=True) as db:
            db.execute(f"INSERT OR REPLACE INTO verified_fixes (created, {', '.join(FIX_FIELDS)}) "
                       f"VALUES (?{', ?' * len(FIX_FIELDS)})", [time.time(), *values])

    def fixes(self) -> list[dict[str, Any]]:
        """Every verified fix, oldest first (none in a history read before version 3 added them);
        a row whose numbers were edited into something else is left out."""
        with self._connect() as db:
            if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'verified_fixes'").fetchone():
                return []
            rows = db.execute(f"SELECT {', '.join(FIX_FIELDS)} FROM verified_fixes ORDER BY id").fetchall()
        return [dict(r) for r in rows if all(_is_number(r[k]) for k in FIX_FIELDS[3:])]

    def update(self, name: str, **fields: Any) -> None:
        values = _encode(fields)
        with self._connect(immediate=True) as db:
            run_id = self._id(db, name)
            db.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in values)} WHERE id = ?", [*values.values(), run_id])

    def rename(self, name: str, new: str, **fields: Any) -> None:
        """Give run ``name`` the free name ``new`` (and update ``fields``), in one transaction."""
        values = {"name": new, **_encode(fields)}
        with self._connect(immediate=True) as db:
            run_id = self._id(db, name)
            if db.execute("SELECT 1 FROM runs WHERE name = ?", (new,)).fetchone():
                raise RunNameTaken(f"run name {new!r} is taken")
            db.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in values)} WHERE id = ?", [*values.values(), run_id])

    def remove(self, name: str) -> Run:
        with self._connect(immediate=True) as db:
            run = _run(self._row(db, name))
            db.execute("DELETE FROM runs WHERE id = ?", (run.id,))
        return run

    # -- reading -------------------------------------------------------------------------------
    def _row(self, db: sqlite3.Connection, name: str) -> sqlite3.Row:
        row = db.execute("SELECT * FROM runs WHERE name = ?", (name,)).fetchone()
        if row is None:
            known = [r[0] for r in db.execute("SELECT name FROM runs ORDER BY id")]
            raise UnknownRun(f"Unknown run {name!r}; known: {', '.join(known) or 'none yet'}")
        return row

    def _id(self, db: sqlite3.Connection, name: str) -> int:
        return int(self._row(db, name)["id"])

    def get(self, name: str) -> Run:
        with self._connect() as db:
            return _run(self._row(db, name))

    def runs(self) -> list[Run]:
        with self._connect() as db:
            rows = db.execute("SELECT * FROM runs ORDER BY id").fetchall()
        runs = []
        for row in rows:  # a row that cannot be read is left out, never the others with it
            try:
                runs.append(_run(row))
            except (TypeError, ValueError, AttributeError) as exc:
                warnings.warn(f"{self.path}: run row {row['id']!r} left out: it cannot be read ({exc})")
        return runs

    def names(self, other_live_kernels: bool = True) -> list[str]:
        """Run names, oldest first; without ``other_live_kernels``, leaving out the runs of another
        process that is still running (a second notebook's kernel on the same output directory)."""
        with self._connect() as db:
            if other_live_kernels:
                return [r[0] for r in db.execute("SELECT name FROM runs ORDER BY id")]
            rows = db.execute("SELECT * FROM runs ORDER BY id").fetchall()
        here, my_start = socket.gethostname(), process_started()  # once, not per row
        return [r["name"] for r in rows
                if not another_live_process(r["pid"], r["host"], _get(r, "pid_started"), here, my_start)]

    def exists(self, name: str) -> bool:
        with self._connect() as db:
            return db.execute("SELECT 1 FROM runs WHERE name = ?", (name,)).fetchone() is not None

    def kernels(self, name: str | None = None) -> pd.DataFrame:
        """Per-kernel rows of one run, or of every run (with a ``run`` column)."""
        import pandas as pd

        query = ("SELECT runs.name AS run, kernels.* FROM kernels JOIN runs ON runs.id = kernels.run_id"
                 + (" WHERE runs.name = ?" if name else "") + " ORDER BY runs.id, kernels.total_us DESC")
        with self._connect() as db:
            frame = pd.read_sql_query(query, db, params=(name,) if name else ())
        return frame.drop(columns=["run_id"])

    def summary(self, name: str) -> Summary | None:
        """The stored Summary of a run; None when none was stored (a run recorded before
        summaries were, or one whose analysis failed) or it cannot be read. One stored with a
        capture's measurements in its meta (schema 3 and older) is read without them, and where
        the history can be written they move onto the run's row (:meth:`measured`)."""
        from .analysis.run_facts import take_from_meta

        stored = self._stored_summary(name)
        if stored is None:
            return None
        summary, moved = take_from_meta(stored)
        if moved and not self.readonly:
            with self._connect(immediate=True) as db:
                run_id = self._id(db, name)
                db.execute("UPDATE runs SET step_times = ?, device_neighbours = ? WHERE id = ? AND step_times IS NULL "
                           "AND device_neighbours IS NULL", (_json(moved.get("step_times") or {}),
                                                             _json(moved.get("device_neighbours") or []), run_id))
                self._put_summary(db, run_id, summary)
        return summary

    def _stored_summary(self, name: str) -> Summary | None:
        from .analysis.persist import READABLE as READABLE_SUMMARY_FORMATS
        from .analysis.persist import load_summary

        with self._connect() as db:
            row = db.execute("SELECT format, data FROM summaries WHERE run_id = ?", (self._id(db, name),)).fetchone()
        if row is None or row["format"] not in READABLE_SUMMARY_FORMATS:
            return None
        try:
            return load_summary(row["data"])
        except ValueError:
            return None

    def stored_table(self, name: str, field: str) -> dict[str, list] | None:
        """Table ``field`` of run ``name``'s stored Summary as plain columns, read without pandas
        (:func:`~npumagic.analysis.persist_plain.table_columns`); None where no Summary is stored
        or it cannot be read."""
        from .analysis.persist_plain import READABLE, table_columns

        with self._connect() as db:
            row = db.execute("SELECT format, data FROM summaries WHERE run_id = ?", (self._id(db, name),)).fetchone()
        if row is None or row["format"] not in READABLE:
            return None
        try:
            return table_columns(row["data"], field)
        except ValueError:
            return None

    def measured(self, name: str) -> Run:
        """Run ``name``'s record with what its capture measured beside the trace (``step_times``,
        ``device_neighbours``): from its row, or for a run recorded before they had columns
        (schema 3 and older, where no migration has moved them yet: a read-only history) from its
        stored Summary's meta."""
        with self._connect() as db:
            row = self._row(db, name)
        run = _run(row)
        if _get(row, "step_times") is not None or _get(row, "device_neighbours") is not None:
            return run
        from .analysis.run_facts import take_from_meta

        stored = self._stored_summary(name)
        moved = take_from_meta(stored)[1] if stored is not None else {}
        return dataclasses.replace(run, step_times=_decode(_json(moved.get("step_times")), {}),
                                   device_neighbours=_decode(_json(moved.get("device_neighbours")), []))

    def step_walls(self, name: str | None = None, column: str = "wall_us") -> dict[str, list[float]]:
        """Every run's step wall times (us; NaN where a stored value is no number), by run name, in
        run order; with ``name``, that run's only; with ``column``, that column of the step table
        (one of :data:`STEP_FIELDS`) instead. Plain lists: ``npumagic check`` imports no numpy."""
        return self.step_columns((column,), name)[column]

    def step_columns(self, columns: tuple[str, ...], name: str | None = None) -> dict[str, dict[str, list[float]]]:
        """:meth:`step_walls` of each of ``columns`` (of :data:`STEP_FIELDS`), read in one query: by
        column, then by run name."""
        unknown = [c for c in columns if c not in STEP_FIELDS]
        if unknown:
            raise ValueError(f"no step column {unknown[0]!r}; the history keeps {', '.join(STEP_FIELDS)}")
        where, params = ("WHERE runs.name = ? ", (name,)) if name is not None else ("", ())
        chosen = ", ".join(f"steps.{c}" for c in columns)
        with self._connect() as db:
            rows = db.execute(f"SELECT runs.name, {chosen} FROM steps JOIN runs ON runs.id = steps.run_id "
                              f"{where}ORDER BY runs.id, steps.step", params).fetchall()
        out: dict[str, dict[str, list[float]]] = {c: {} for c in columns}
        for run, *values in rows:
            for c, value in zip(columns, values):
                out[c].setdefault(run, []).append(float(value) if _is_number(value) else math.nan)
        return out

    def steps(self, name: str) -> pd.DataFrame:
        import pandas as pd

        with self._connect() as db:
            run_id = self._id(db, name)
            return pd.read_sql_query(f"SELECT {', '.join(STEP_FIELDS)} FROM steps WHERE run_id = ? ORDER BY step",
                                     db, params=(run_id,))

    def rows(self) -> list[dict[str, Any]]:
        """The history as plain rows, one per run (:data:`RUN_LIST_COLUMNS`; ``created`` a naive
        UTC datetime to the second): what ``npumagic runs`` prints, without pandas."""
        return [run_row(run) for run in self.runs()]

    def table(self) -> pd.DataFrame:
        """The history as one DataFrame, one row per run (:data:`RUN_LIST_COLUMNS`)."""
        return run_list_frame(self.rows())
