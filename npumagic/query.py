"""SQL over the stored tables of every run of one or many histories (DuckDB, embedded, in memory).

Each table of the stores (:mod:`npumagic.analysis.store`) is a view of the same name (``steps``,
``kernels``, ``comm``, ``links``, ``ranks``, ``memory``, ``events``, ...; a Places table as
``places_forward``) over the Parquet files of every run, with the columns ``run`` (the run's
name), ``history`` (its output directory) and ``rank``. Only reading statements run (SELECT,
WITH, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN): DuckDB's own parser says what each statement is. A
reading statement can still name a file (``read_text('/etc/passwd')``, ``glob``), so DuckDB opens
only the stores' Parquet files: external access off, those files its only allowed paths, and its
configuration locked before the statement runs (the MCP tool runs an assistant's SQL here).
DuckDB is an optional extra: ``pip install 'npumagic[query]'``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import NpumagicError

INSTALL = "SQL over the stored tables needs DuckDB: pip install 'npumagic[query]' (or pip install duckdb)"
READING = ("SELECT", "EXPLAIN")  # DuckDB's statement types of SELECT, WITH, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN


@dataclass(frozen=True)
class Stored:
    """One run's store: its run name, history directory and store folder."""

    run: str
    history: str
    folder: Path


def stores(history: str | Path) -> list[Stored]:
    """The stores of the runs of the history in ``history`` (an output directory of the magics),
    or of ``history`` itself where it is a profiler output with a store and no history."""
    from .analysis import store
    from .names import DB_NAME

    out = Path(history).expanduser()
    if not out.is_dir():
        raise NpumagicError(f"--history {history}: no such directory")
    found = []
    if (out / DB_NAME).is_file():
        from .history import HistoryStore

        history = HistoryStore(out, create=False)
        runs = [run for run in history.runs() if run.run_dir]
        missing = [run for run in runs if not _usable(store.location(run.run_dir))]
        if missing and store.enabled():
            _store_from_history(history, missing)
        found += [Stored(run.name, str(out), store.location(run.run_dir)) for run in runs
                  if _usable(store.location(run.run_dir))]
    elif _usable(store.location(out)):
        found.append(Stored(out.name, str(out), store.location(out)))
    return found


def _store_from_history(history, runs: list) -> None:
    """Write the store of each of ``runs`` from its Summary kept in ``history``: a capture or a
    %npuload leaves none (the write would cost every run about 0.1 s, the first 0.3 s, for a query
    that may never come), so the first query over a history pays it, once per run."""
    from .analysis import job, store

    kept = [(run, history.summary(run.name)) for run in runs if Path(run.run_dir).exists()]
    kept = [(run, summary) for run, summary in kept if summary is not None]
    if kept:
        store.say(f"storing the tables of {len(kept)} run{'s' if len(kept) != 1 else ''} of {history.directory} "
                  "for queries (once)")
    for run, summary in kept:
        job.keep(run.run_dir, summary, summary.meta.get("rank"), recorded=run.kind != "load")


def _usable(folder: Path) -> bool:
    from .analysis import store

    doc = store.manifest_of(folder) if folder.is_dir() else None
    return doc is not None and doc.get("format") == store.FORMAT


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def stored_files(runs: list[Stored]) -> list[tuple[Stored, str, Path]]:
    """Each run's stored tables that are there: (run, table name, its Parquet file); a job's own
    table where the run has one (``job.links`` holds every rank's links of a job read as an outline)."""
    from .analysis import store

    found = []
    for kept in runs:
        doc = store.manifest_of(kept.folder) or {}
        for name, entry in {**(doc.get("tables") or {}), **(doc.get("job_tables") or {})}.items():
            if "file" in entry and (kept.folder / entry["file"]).is_file():
                found.append((kept, name, kept.folder / entry["file"]))
    return found


def views(files: list[tuple[Stored, str, Path]]) -> dict[str, str]:
    """Each table's view: the SQL reading its Parquet files of every run (:func:`stored_files`)."""
    parts: dict[str, list[str]] = {}
    for kept, name, path in files:
        parts.setdefault(name.replace(".", "_"), []).append(
            f"SELECT {_quoted(kept.run)} AS run, {_quoted(kept.history)} AS history, * "
            f"FROM read_parquet({_quoted(str(path))})")
    return {view: " UNION ALL BY NAME ".join(selects) for view, selects in sorted(parts.items())}


def check_reading(duckdb, sql: str) -> None:
    """NpumagicError unless every statement of ``sql`` only reads."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise NpumagicError(f"SQL error: {exc}") from None
    if not statements:
        raise NpumagicError("no SQL statement given")
    for statement in statements:
        kind = str(statement.type).rpartition(".")[2]
        if kind not in READING:
            raise NpumagicError(f"only reading statements run here (SELECT, WITH, DESCRIBE, SHOW, EXPLAIN): this is "
                                f"{'an' if kind[:1] in 'AEIOU' else 'a'} {kind} statement; the stored tables are read-only")


@dataclass(frozen=True)
class Answer:
    columns: list[str]
    rows: list[tuple]
    runs: list[Stored]
    tables: list[str]


def run_query(sql: str, histories: list[str | Path]) -> Answer:
    """``sql`` run over the stored tables of every run of ``histories``."""
    try:
        import duckdb
    except ImportError:
        raise NpumagicError(INSTALL) from None
    check_reading(duckdb, sql)
    runs = [kept for history in histories for kept in stores(history)]
    with duckdb.connect(":memory:") as con:
        con.execute("SET threads = 2")
        files = stored_files(runs)
        tables = views(files)
        _confine(duckdb, con, sorted({str(path) for _, _, path in files}))
        for view, select in tables.items():
            con.execute(f'CREATE VIEW "{view}" AS {select}')
        try:
            cursor = con.execute(sql)
            columns = [d[0] for d in cursor.description or []]
            rows = cursor.fetchall() if cursor.description else []
        except duckdb.Error as exc:
            known = ", ".join(tables) or f"none: no stored run in {', '.join(map(str, histories))}"
            hint = f" (tables: {known})" if isinstance(exc, duckdb.CatalogException) else ""
            if isinstance(exc, duckdb.PermissionException):
                first = str(exc).splitlines()[0]
                raise NpumagicError(f"a query reads the stored tables only ({known}); {first}") from None
            raise NpumagicError(f"SQL error: {exc}{hint}") from None
    return Answer(columns, rows, runs, list(tables))


def _confine(duckdb, con, files: list[str]) -> None:
    """Lets ``con`` open ``files`` (the stores' Parquet files) and no other file, URL or extension."""
    try:
        con.execute("SET autoinstall_known_extensions = false")
        con.execute("SET autoload_known_extensions = false")
        con.execute(f"SET allowed_paths = [{', '.join(map(_quoted, files))}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except duckdb.Error as exc:
        raise NpumagicError(f"DuckDB {duckdb.__version__} cannot keep a query to the stored tables ({exc}): "
                            "pip install 'duckdb>=1.2'") from None


def plain(value: Any) -> Any:
    """A JSON-able version of a DuckDB value (dates, decimals, lists)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return str(value)
