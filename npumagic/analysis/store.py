"""A store of every analysed job's tables: each DataFrame of its Summary (and of every rank's
Summary) written once as Parquet beside the profiler output, so that reading the job again
(``npumagic analyze --every-rank``, ``%npuload``) opens them instead of parsing, and so that SQL
reads them (:mod:`npumagic.query`).

Layout of ``<output>/npumagic_store/`` (a trace file's: ``<file>.npumagic_store/`` beside it):

- ``<table>.parquet``: the table of every rank's own Summary, one after the other, with a
  ``rank`` column where the table has none (``steps``, ``kernels``, ``comm``, ``memory``, ...);
- ``job.<table>.parquet``: the job Summary's tables that are not its focused rank's own
  (``ranks``, ``links``, ``matrix``, ``temporal``);
- ``manifest.json``: :data:`FORMAT`, npumagic's version, how the job was read, the size and
  mtime of every source file, and per rank and table its rows, columns and dtypes (so each
  table is given back exactly, categories included), meta and vendor tables as JSON, and what
  each rank made from its events (``made``: the findings' places, the fixes' bounds).

A store whose manifest does not match (format, version, source stamps, reading) is never
trusted: the job is parsed again and the store rewritten. A folder that is read-only, or owned
by another user, gets no store (said once). ``NPUMAGIC_STORE=0`` turns the store off."""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

from .persist import _frame, _plain, _revive
from .summary import Summary

FORMAT = 1
# an analysis quicker than this is not stored: parsing it again costs less than the store's write
# (about 0.5 s on a 3 MB trace, pyarrow's import included) and the folder stays as the user left it
WORTH_S = 2.0
STORE_DIR = "npumagic_store"
MANIFEST = "manifest.json"
FULL, OUTLINE, RUN = "full", "outline", "run"  # how the job was read (RUN: a recorded run, for queries only)
# what a Summary made from its events and keeps without them: the findings' places, the fixes' bounds
MADE = ("placed", "path_bounds")
PLACES = ("forward", "backward", "regions")  # the Trees of a rank's Places (where.Places), and its launches
_said: set[str] = set()


def _replayed_together(summary: Summary) -> bool:
    """Whether the job's bounds are its ranks' replayed together (:mod:`.job_path`), not a rank's own."""
    return any((b or {}).get("ranks", 1) > 1 for b in (summary.path_bounds or {}).values())


def enabled() -> bool:
    """Whether stores are read and written: on unless ``NPUMAGIC_STORE=0``, where pyarrow is there."""
    import importlib.util

    return (os.environ.get("NPUMAGIC_STORE", "1").strip().lower() not in ("0", "off", "no", "false")
            and importlib.util.find_spec("pyarrow") is not None)


def location(path: str | Path) -> Path:
    """Where the store of the profiler output ``path`` lives."""
    path = Path(path)
    return path / STORE_DIR if path.is_dir() else path.parent / f"{path.name}.{STORE_DIR}"


def stamps(paths: list[Path], host: Path | None = None) -> dict[str, list[int]]:
    """Size and mtime (ns) of every file of ``paths`` (files, or folders walked), by path."""
    out = {}
    for root in [*paths, *([host] if host is not None else [])]:
        root = Path(root)
        if root.is_file():
            st = root.stat()
            out[str(root.resolve())] = [st.st_size, st.st_mtime_ns]
            continue
        for folder, dirs, files in os.walk(root.resolve()):
            dirs[:] = [d for d in dirs if not d.endswith(STORE_DIR)]
            for name in files:
                file = os.path.join(folder, name)
                st = os.stat(file)
                out[file] = [st.st_size, st.st_mtime_ns]
    return out


def _version() -> str:
    # the package's own __version__: the package is imported before any of its modules, and an
    # import statement here would close a cycle (npumagic imports the analysis layer)
    return sys.modules[__name__.partition(".")[0]].__version__


def unwritable(folder: Path) -> str:
    """Why no store can be written in ``folder`` ("" where one can): its mode, not only access,
    counts, so root is kept out of a read-only folder too."""
    try:
        st = folder.stat()
    except OSError as exc:
        return f"cannot read {folder} ({exc.strerror})"
    if st.st_uid != os.geteuid():
        return f"{folder} belongs to another user"
    if not st.st_mode & stat.S_IWUSR or not os.access(folder, os.W_OK):
        return f"{folder} is read-only"
    return ""


def say(text: str) -> None:
    print(f"npumagic: {text}", file=sys.stderr)


INT_KEYS = "__int_keys__"  # a dict keyed by rank ids (JSON keys are text)


def _encode(value: Any) -> Any:
    """``value`` as JSON (:func:`~npumagic.analysis.persist._plain`), dicts keyed by integers kept so."""
    if isinstance(value, dict):
        if value and all(isinstance(k, int) and not isinstance(k, bool) for k in value):
            return {INT_KEYS: [[int(k), _encode(v)] for k, v in value.items()]}
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return _plain(value)


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if INT_KEYS in value and len(value) == 1:
            return {k: _decode(v) for k, v in value[INT_KEYS]}
        return _revive(value) if value.get("__frame__") else {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


# -- writing -------------------------------------------------------------------------------
def _tables(s: Summary) -> dict[str, pd.DataFrame]:
    """The DataFrames of Summary ``s`` by name: its fields, its vendor tables and its Places' tables."""
    out = {f.name: getattr(s, f.name) for f in dataclasses.fields(s)
           if isinstance(getattr(s, f.name), pd.DataFrame)}
    out.update({f"{VENDOR}{k}": v for k, v in s.vendor.items() if isinstance(v, pd.DataFrame)})
    where = s.places
    if where is not None:
        for name in PLACES:
            tree = getattr(where, name)
            if tree is not None:
                out[f"places.{name}"] = tree.spans
        out["places.launches"] = where.launches
    return out


VENDOR = "vendor."  # the vendor tables the rules read (hccl_tasks, ...), each a table of its own
INDEX = "__index__"  # a table's own index (not 0..n-1), kept as a column


def _default_index(frame: pd.DataFrame) -> bool:
    index = frame.index
    return isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1 and index.name is None


def _storable(frame: pd.DataFrame) -> bool:
    """Whether ``frame`` goes to Parquet exactly: unique string column names and a plain index."""
    return (all(isinstance(c, str) and c != INDEX for c in frame.columns) and frame.columns.is_unique
            and (_default_index(frame) or (frame.index.nlevels == 1 and frame.index.name is None)))


def _pooled(pool: dict[str, list], categories: pd.Index) -> str:
    """The key in ``pool`` of ``categories`` (ranks of one job share most of their lists)."""
    values = _plain(list(categories))
    key = hashlib.sha1(json.dumps(values).encode()).hexdigest()[:16]
    pool.setdefault(key, values)
    return key


def _shape(frame: pd.DataFrame, pool: dict[str, list]) -> dict[str, Any]:
    """What restores ``frame`` from its rows in a concatenation: rows, columns, dtypes, categories."""
    cats = {c: {"pool": _pooled(pool, d.categories), "ordered": bool(d.ordered), "dtype": str(d.categories.dtype)}
            for c, d in frame.dtypes.items() if isinstance(d, pd.CategoricalDtype)}
    return {"rows": len(frame), "columns": list(frame.columns), "dtypes": [str(d) for d in frame.dtypes],
            "categories": cats, "index": None if _default_index(frame) else str(frame.index.dtype)}


def _arrow(parts: list[tuple[int | None, pd.DataFrame]], add_rank: bool):
    """The frames of ``parts`` as one Arrow table: categorical columns stay dictionary-encoded (a
    rank's own dictionary each, never expanded into values), other columns are concatenated first
    where ranks' dtypes agree."""
    import pyarrow as pa

    frames = [_indexed_frame(f).assign(rank=r) if add_rank else _indexed_frame(f) for r, f in parts]
    if len({tuple(map(str, f.dtypes)) + tuple(f.columns) for f in frames}) > 1 or any(
            isinstance(d, pd.CategoricalDtype) for d in frames[0].dtypes):
        # ranks differ (or hold categories): one Arrow table each, their schemas unified
        tables = [pa.Table.from_pandas(f, preserve_index=False) for f in frames]
        unified = pa.unify_schemas([_plain_dictionaries(t.schema) for t in tables], promote_options="permissive")
        return pa.concat_tables([t.cast(unified) if not t.schema.equals(unified) else t
                                 for t in (_cast_dictionaries(t) for t in tables)], promote_options="permissive")
    whole = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return pa.Table.from_pandas(whole, preserve_index=False)


def _plain_dictionaries(schema):
    """``schema`` with every dictionary column's indices as int32 (ranks' code widths differ)."""
    import pyarrow as pa

    return pa.schema([f.with_type(pa.dictionary(pa.int32(), f.type.value_type)) if pa.types.is_dictionary(f.type)
                      else f for f in schema]).with_metadata(None)


def _cast_dictionaries(table):
    import pyarrow as pa

    schema = _plain_dictionaries(table.schema)
    return table.cast(schema) if not table.schema.remove_metadata().equals(schema) else table.replace_schema_metadata(None)


def _indexed_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its own index (not 0..n-1) as the column :data:`INDEX`."""
    return frame if _default_index(frame) else frame.rename_axis(INDEX).reset_index()


def _write_table(folder: Path, file: str, parts: list[tuple[int | None, pd.DataFrame]],
                 pool: dict[str, list]) -> dict[str, Any]:
    """The frames of ``parts`` (rank, frame) one after the other in ``folder/file``; its entry of
    the manifest (JSON instead where a frame cannot go to Parquet exactly)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shapes = [_shape(f, pool) for _, f in parts]
    entry: dict[str, Any] = {"shapes": shapes}
    if not all(_storable(f) for _, f in parts):
        entry["json"] = [_frame(f) for _, f in parts]
        return entry
    add_rank = all(r is not None for r, _ in parts) and not any("rank" in f.columns for _, f in parts)
    try:
        table = _arrow(parts, add_rank)
    except (pa.ArrowException, TypeError, ValueError):  # mixed Python objects in a column
        entry["json"] = [_frame(f) for _, f in parts]
        return entry
    pq.write_table(table, folder / file)
    entry.update(file=file, added_rank=add_rank)
    return entry


def write(path: str | Path, summary: Summary, sources: dict[str, list[int]], reading: str,
          rank: int | None, caught: list[warnings.WarningMessage] = ()) -> Path | None:
    """Write the store of ``summary`` (read from ``path`` as ``reading``, describing ``rank``);
    its folder, or None where none can be written (said once)."""
    target = location(path)
    why = unwritable(target.parent)
    if why:
        if str(target.parent) not in _said:  # once per folder
            _said.add(str(target.parent))
            say(f"no store of the tables analysed here: {why} (they are parsed again each time)")
        return None
    ranks = sorted(summary.per_rank) or [None]
    own = {r: (summary.per_rank[r] if r is not None else summary) for r in ranks}
    tables = {r: _tables(s) for r, s in own.items()}
    job_tables = _tables(summary)
    focus = summary.meta.get("rank")
    manifest: dict[str, Any] = {
        "format": FORMAT, "npumagic": _version(), "written": time.time(), "reading": reading, "rank": rank,
        "focus": focus if focus in own else None, "ranks": ranks, "sources": sources,
        "warnings": [{"category": w.category.__name__, "message": str(w.message)} for w in caught],
        "meta": {"job": _encode(summary.meta), **{str(r): _encode(s.meta) for r, s in own.items()}},
        "vendor": {str(r): _encode({k: v for k, v in s.vendor.items() if not isinstance(v, pd.DataFrame)})
                   for r, s in own.items()},
        "skipped": {str(r): {n: getattr(s.places, n).skipped for n in PLACES if getattr(s.places, n) is not None}
                    for r, s in own.items() if s.places is not None},
        "made": {str(r): _encode({n: getattr(s, n) for n in MADE}) for r, s in own.items()},
        "job_bounds": _encode(summary.path_bounds) if _replayed_together(summary) else {},
        "tables": {}, "job_tables": {}, "categories": {}}
    fields = {f.name for f in dataclasses.fields(Summary)}
    tmp = Path(tempfile.mkdtemp(prefix=f".{STORE_DIR}-", dir=target.parent))
    try:
        names = sorted({n for t in tables.values() for n in t})
        for name in names:
            parts = [(r, tables[r][name]) for r in ranks if name in tables[r]]
            manifest["tables"][name] = dict(_write_table(tmp, f"{name}.parquet", parts, manifest["categories"]),
                                             ranks=[r for r, _ in parts])
        mine = tables.get(manifest["focus"], {}) if not any(s is summary for s in own.values()) else _tables(summary)
        for name, frame in job_tables.items():
            if name in fields and mine.get(name) is not frame:  # the job's own: ranks, links, matrix, ...
                manifest["job_tables"][name] = _write_table(tmp, f"job.{name}.parquet", [(None, frame)],
                                                             manifest["categories"])
        (tmp / MANIFEST).write_text(json.dumps(manifest, allow_nan=True))
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


# -- reading -------------------------------------------------------------------------------
def manifest_of(folder: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def stale(doc: dict[str, Any] | None, sources: dict[str, list[int]]) -> str:
    """Why the store described by ``doc`` cannot be trusted for ``sources`` ("" where it can)."""
    if doc is None:
        return "no readable manifest"
    if doc.get("format") != FORMAT or doc.get("npumagic") != _version():
        return f"written by npumagic {doc.get('npumagic')} (store format {doc.get('format')})"
    kept = doc.get("sources") or {}
    if kept != sources:
        changed = sorted(set(kept) ^ set(sources)) or sorted(p for p in sources if kept.get(p) != sources[p])
        return f"{Path(changed[0]).name if changed else 'a source file'} changed since"
    return ""


class _Concatenation:
    """One stored table read back: every rank's rows one after the other, each column's values
    and (categorical columns) codes taken once, so that a rank's rows cost a slice."""

    def __init__(self, whole: pd.DataFrame, categories) -> None:
        self.whole, self.categories = whole, categories
        self.dtypes = dict(whole.dtypes.items())
        self.kinds = {c: str(d) for c, d in self.dtypes.items()}
        self.arrays = {c: whole[c].array for c in whole.columns}
        self.codes = {c: whole[c].cat.codes.to_numpy() for c, k in self.kinds.items() if k == "category"}
        self.recodings: dict[tuple[str, int], Any] = {}
        self.labels: dict[tuple[str, ...], pd.Index] = {}  # a rank's column labels, made once a table

    def recode(self, column: str, wanted: pd.CategoricalDtype):
        """The column's codes over every rank -> codes of ``wanted``'s categories (None: the same)."""
        key = (column, id(wanted))
        if key not in self.recodings:
            union = self.dtypes[column].categories
            same = union.dtype == wanted.categories.dtype and union.equals(wanted.categories)
            self.recodings[key] = None if same else np.append(wanted.categories.get_indexer(union), -1)
        return self.recodings[key]

    def rank(self, start: int, shape: dict[str, Any]) -> pd.DataFrame:
        """The rows ``start`` on of one rank's table (``shape``: as :func:`_shape` wrote it), as it was."""
        rows, columns = shape["rows"], shape["columns"]
        span = slice(start, start + rows)
        if shape.get("index") is not None:
            return self._indexed(span, shape)
        changed = {}
        for column, dtype in zip(columns, shape["dtypes"]):
            cat = shape["categories"].get(column)
            if cat is not None:
                wanted = self.categories(cat)
                if self.kinds[column] != "category":
                    changed[column] = pd.Series(self.arrays[column][span]).astype(wanted).array
                    continue
                mapping = self.recode(column, wanted)
                codes = self.codes[column][span]
                if mapping is not None or self.dtypes[column].ordered != wanted.ordered:
                    changed[column] = pd.Categorical.from_codes(codes if mapping is None else mapping[codes],
                                                                dtype=wanted, validate=False)
            elif self.kinds[column] != dtype:
                changed[column] = pd.Series(self.arrays[column][span]).astype(dtype).array
        if not changed and list(self.whole.columns) == columns:
            frame = self.whole.iloc[span]
            frame.index = pd.RangeIndex(rows)
            return frame
        labels = self.labels.get(tuple(columns))
        if labels is None:
            labels = self.labels[tuple(columns)] = pd.Index(columns)
        # the columns are whole arrays of their dtypes already: no checks (pandas' own constructor
        # spends most of a rank's time on them)
        return pd.DataFrame._from_arrays([changed[c] if c in changed else self.arrays[c][span] for c in columns],
                                         columns=labels, index=pd.RangeIndex(rows), verify_integrity=False)

    def _indexed(self, span: slice, shape: dict[str, Any]) -> pd.DataFrame:
        """A rank's rows of a table with an index of its own (kept in the column :data:`INDEX`)."""
        frame = self.rank(span.start, dict(shape, index=None))
        frame.index = pd.Index(self.arrays[INDEX][span], dtype=shape["index"])
        return frame


def _read_table(folder: Path, entry: dict[str, Any], categories) -> list[pd.DataFrame]:
    if "json" in entry:
        return [_revive(d) for d in entry["json"]]
    import pyarrow.parquet as pq

    coded = sorted({c for shape in entry["shapes"] for c in shape["categories"]})
    # categorical columns decoded once, over every rank's values; each rank then takes its own categories
    whole = pq.read_table(folder / entry["file"], read_dictionary=coded or None).to_pandas()
    if entry.get("added_rank"):
        whole = whole.drop(columns="rank")
    table, out, start = _Concatenation(whole, categories), [], 0
    for shape in entry["shapes"]:
        out.append(table.rank(start, shape))
        start += shape["rows"]
    return out


def _places(tables: dict[str, pd.DataFrame], skipped: dict[str, Any]):
    from .regions import Tree
    from .where import Places

    trees = {n: (Tree(tables[f"places.{n}"], skipped.get(n, {})) if f"places.{n}" in tables else None) for n in PLACES}
    return Places(trees["forward"], trees["backward"], trees["regions"], tables["places.launches"])


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a store is read: reading a 256-rank job makes some
    10^5 container objects (each rank's frames, indexes and dtypes), all kept, so the collector's
    passes over the growing heap free nothing and cost a fifth of the read (0.2 s of CPU of 1.0 s).
    Reference counting still frees what is dropped; any cycle waits for the next collection."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read(folder: Path, doc: dict[str, Any]) -> Summary:
    """The Summary the store in ``folder`` (its manifest ``doc``) holds."""
    with _collector_paused():
        return _read(folder, doc)


def _read(folder: Path, doc: dict[str, Any]) -> Summary:
    fields = {f.name for f in dataclasses.fields(Summary)}
    ranks = [r if r is None else int(r) for r in doc["ranks"]]
    pool, made = doc.get("categories") or {}, {}

    def categories(cat: dict[str, Any]) -> pd.CategoricalDtype:
        key = (cat["pool"], cat["ordered"], cat["dtype"])
        if key not in made:
            made[key] = pd.CategoricalDtype(pd.Index(pool[cat["pool"]], dtype=cat["dtype"]), ordered=cat["ordered"])
        return made[key]

    tables: dict[Any, dict[str, pd.DataFrame]] = {r: {} for r in ranks}
    for name, entry in doc["tables"].items():
        for r, frame in zip(entry["ranks"], _read_table(folder, entry, categories)):
            tables[r][name] = frame

    def summary(r, meta: dict[str, Any], own: dict[str, pd.DataFrame]) -> Summary:
        where = _places(own, (doc.get("skipped") or {}).get(str(r), {})) if "places.launches" in own else None
        vendor = {**_decode(doc["vendor"].get(str(r), {})),
                  **{k[len(VENDOR):]: v for k, v in own.items() if k.startswith(VENDOR)}}
        made = _decode((doc.get("made") or {}).get(str(r), {}))  # {} in a store written before it was kept
        return Summary(**{k: v for k, v in own.items() if k in fields}, meta=_decode(meta), vendor=vendor,
                       places=where, **{n: made[n] for n in MADE if n in made})

    if ranks == [None]:
        return summary(None, doc["meta"]["job"], tables[None])
    per_rank = {r: summary(r, doc["meta"][str(r)], tables[r]) for r in ranks}
    focus = doc.get("focus")
    base = per_rank[focus] if focus in per_rank else per_rank[ranks[0]]
    job = {name: _read_table(folder, entry, categories)[0] for name, entry in doc["job_tables"].items()}
    return dataclasses.replace(base, meta=_decode(doc["meta"]["job"]), per_rank=per_rank, **job,
                               path_bounds=_decode(doc.get("job_bounds") or {}) or base.path_bounds)


def open_store(path: str | Path, sources: dict[str, list[int]], reading: str, rank: int | None) -> Summary | None:
    """The Summary stored for ``path`` read as ``reading`` describing ``rank``, replaying the
    warnings its parse raised; None where there is none that can be trusted (parse again)."""
    if not enabled():
        return None
    folder = location(path)
    if not folder.is_dir():
        return None
    doc = manifest_of(folder)
    why = stale(doc, sources)
    if why or doc.get("reading") != reading:
        if why and str(folder) not in _said:
            _said.add(str(folder))
            say(f"the store of {path} is not used: {why}; parsing again")
        return None
    if rank is not None and rank != doc.get("focus"):
        if reading != FULL or rank not in [r for r in doc["ranks"] if r is not None]:
            return None
    try:
        summary = read(folder, doc)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # damaged: parse again
        say(f"the store of {path} cannot be read ({type(exc).__name__}: {exc}); parsing again")
        return None
    if rank is not None and rank != doc.get("focus"):
        from .summary import combine

        summary = combine(summary.per_rank, rank, _decode(doc.get("job_bounds") or {}))
    for w in doc.get("warnings", []):
        warnings.warn(w["message"], _category(w["category"]), stacklevel=3)
    how = (f"an outline, rank {doc.get('focus')} in full" if reading == OUTLINE
           else f"{len(summary.per_rank) or 1} rank(s)")
    say(f"{path}: read from its store ({how}, written "
        f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(doc['written']))}), not parsed")
    return summary


def _category(name: str) -> type[Warning]:
    import builtins

    found = getattr(builtins, name, None)
    if isinstance(found, type) and issubclass(found, Warning):
        return found
    return UserWarning
