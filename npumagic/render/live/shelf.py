"""The live timeline's index kept beside the run: each lane's arrays as numpy ``.npy`` files in
``<output>/npumagic_store/timeline/`` (the folder of :mod:`npumagic.analysis.store`), read back
memory-mapped, with the names by code and each one's kind and the critical path's spans, so
reopening a run (a kernel restart, ``%npushow``) answers its first view without building anything;
a lane's pyramid is added there the first time a view needs it.

``manifest.json`` there follows the store's rules: npumagic's version and format and the size and
mtime of every source file (:func:`~npumagic.analysis.store.stale`), plus this index's own format,
its events drawn and the trace's count of each kind, its lanes and the kinds drawn. A manifest that does not match is never trusted: the index is built again
and written over it. A folder that is read-only, or owned by another user, gets no store (said
once); ``NPUMAGIC_STORE=0`` turns it off."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ...analysis import store

log = logging.getLogger(__name__)
FORMAT = 4  # this index's own layout (the store's FORMAT and npumagic's version are checked too); 3: the critical
# path null where it was not built yet (2 stored none past 1M events: those are built again); 4: the names, their
# kinds and the kinds drawn stored too, keyed on the events drawn and the count of each kind (3's are built again)
FOLDER = "timeline"
ARRAYS = ("starts", "ends", "reach", "codes", "rows", "depth", "union_starts", "union_ends", "union_cum")
# a smaller index is built again in about 0.1 s: no folder is written beside the user's trace for it
MIN_EVENTS = 200_000
OPTIONAL = ("own", "overview_codes", "overview_weights")  # regions lanes' own; lanes over EXACT_LIMIT's overview
_said: set[str] = set()


def _sources(path: str) -> dict[str, list[int]]:
    """The stamps the analysis store keys on (the output's files, its host sampler's too); the
    path's own where no reader takes it (a trace written by hand)."""
    from ...analysis import sources
    from ...errors import NpumagicError

    try:
        _, paths = sources.detect(path)
        return store.stamps(paths, sources.host_file(path))
    except (NpumagicError, OSError, ValueError):
        return store.stamps([Path(path)])


def _version() -> str:
    # as the analysis store reads it: the package is imported before its modules (an import
    # statement here would close a cycle)
    return sys.modules[__name__.partition(".")[0]].__version__


class Shelf:
    """The stored index of one profiler output: :meth:`lanes` reads it (None where it cannot be
    trusted), :meth:`write` writes it, :meth:`levels` and :meth:`keep_levels` a lane's pyramid."""

    def __init__(self, path: str, events: int, kinds: list[int] | None = None) -> None:
        self.path, self.events, self.kinds = str(path), int(events), [int(k) for k in kinds or ()]
        self.folder = store.location(path) / FOLDER
        self.stamps = _sources(self.path)
        self.doc: dict | None = None
        self._critical: pd.DataFrame | None = None
        self._names: tuple[np.ndarray, np.ndarray] = (np.array([], dtype=object),) * 2

    @classmethod
    def of(cls, path: str | None, events: int, kinds: list[int] | None = None) -> "Shelf | None":
        """The shelf of ``path`` (None where there is no path or the store is off), of an index of
        ``events`` events drawn, the trace's events of each kind counted in ``kinds`` (what the
        index's regions and modules are made of too: their spans are not counted before the store
        is read)."""
        if not path or events < MIN_EVENTS or not store.enabled() or not Path(path).exists():
            return None
        try:
            return cls(path, events, kinds)
        except OSError as exc:
            log.debug("no timeline store for %s: %s", path, exc)
            return None

    def lanes(self) -> list[dict] | None:
        """Per lane: name, rank, group and its arrays (memory-mapped); None where no stored index
        matches the sources and the events."""
        doc = store.manifest_of(self.folder)
        why = store.stale(doc, self.stamps)
        if not why and (doc.get("timeline") != FORMAT or doc.get("events") != self.events or doc.get("kinds") != self.kinds):
            why = "written for another index"
        if why:
            if doc is not None and str(self.folder) not in _said:
                _said.add(str(self.folder))
                store.say(f"the timeline index of {self.path} is not used: {why}; building it again")
            return None
        try:
            out = []
            for k, (rank, name, group) in enumerate(doc["lanes"]):
                aliases = doc["aliases"][k]
                arrays = {a: np.load(self.folder / f"{k}.{a}.npy", mmap_mode="r") for a in ARRAYS if a not in aliases}
                arrays.update({a: arrays[target] for a, target in aliases.items()})
                arrays.update({a: np.load(self.folder / f"{k}.{a}.npy", mmap_mode="r")
                               for a in OPTIONAL if (self.folder / f"{k}.{a}.npy").exists()})
                out.append(dict(arrays, rank=rank, name=name, group=group, overview=doc["overviews"][k]))
            # read with the lanes: the path's lanes are among them, its spans must be there too
            self._critical = None if doc["critical"] is None else _read_table(self.folder, "critical", doc["critical"])
            self._names = tuple(np.load(self.folder / f"{a}.npy").astype(object) for a in ("names", "name_kinds"))
            self.doc = doc
            return out
        except (OSError, ValueError, KeyError, TypeError) as exc:  # damaged: build again
            store.say(f"the timeline index of {self.path} cannot be read ({type(exc).__name__}: {exc}); building it again")
            return None

    def names(self) -> tuple[np.ndarray, np.ndarray, set[str]] | None:
        """The index's names, each one's kind and the kinds drawn, stored with the lanes (read after
        :meth:`lanes` found them)."""
        return None if self.doc is None else (*self._names, set(self.doc["drawn_kinds"]))

    def marks(self) -> pd.DataFrame | None:
        """The findings' marks stored with the lanes (read after :meth:`lanes` found them)."""
        return None if self.doc is None else pd.DataFrame(self.doc["marks"], columns=self.doc["marks_columns"])

    def critical(self) -> pd.DataFrame | None:
        """The critical path's spans stored with the lanes (read after :meth:`lanes` found them);
        None where the index was stored before its critical path was built."""
        from .nested import COLUMNS

        return None if self._critical is None else self._critical[COLUMNS]

    def write(self, lanes: list[dict], marks: pd.DataFrame, critical: pd.DataFrame | None, names: np.ndarray,
              name_kinds: np.ndarray, drawn_kinds: set[str]) -> bool:
        """Write the index (``lanes`` as :meth:`lanes` gives them, an array that is another of its
        lane given by that one's name; the critical path's spans; the names by code, each one's kind
        and the kinds drawn); False where it cannot be (said once)."""
        parent = self.folder.parent
        why = store.unwritable(parent if parent.exists() else parent.parent)
        if why:
            if str(parent) not in _said:
                _said.add(str(parent))
                store.say(f"no store of the timeline's index: {why} (it is built again each time)")
            return False
        parent.mkdir(exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{FOLDER}-", dir=parent))
        try:
            for k, lane in enumerate(lanes):
                for a in ARRAYS + OPTIONAL:
                    if lane.get(a) is not None and not isinstance(lane[a], str):
                        np.save(tmp / f"{k}.{a}.npy", np.ascontiguousarray(lane[a]))
            for a, texts in (("names", names), ("name_kinds", name_kinds)):
                np.save(tmp / f"{a}.npy", np.array([str(t) for t in texts], dtype=str))
            doc = {"format": store.FORMAT, "npumagic": _version(), "timeline": FORMAT, "written": time.time(),
                   "sources": self.stamps, "events": self.events, "kinds": self.kinds, "drawn_kinds": sorted(drawn_kinds),
                   "lanes": [[int(ln["rank"]), str(ln["name"]), str(ln["group"])] for ln in lanes],
                   "overviews": [ln.get("overview") for ln in lanes],
                   # an array that is another of its lane (a device stream's reach is its ends): its name
                   "aliases": [{a: ln[a] for a in ARRAYS if isinstance(ln.get(a), str)} for ln in lanes],
                   "marks_columns": list(marks.columns), "marks": json.loads(marks.to_json(orient="values")),
                   # its spans' columns as arrays too (millions of spans on a trace of millions of events)
                   "critical": None if critical is None else _save_table(tmp, "critical", critical)}
            (tmp / store.MANIFEST).write_text(json.dumps(doc))
            shutil.rmtree(self.folder, ignore_errors=True)
            os.replace(tmp, self.folder)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            store.say(f"no store of the timeline's index ({type(exc).__name__}: {exc})")
            return False
        self.doc = doc
        return True

    def levels(self, k: int) -> list[tuple[float, float, np.ndarray, np.ndarray]] | None:
        """Lane ``k``'s stored pyramid (lo, bin_ns, codes, weights per level), None where none is."""
        try:
            heads = np.load(self.folder / f"{k}.levels.npy")
            return [(float(lo), float(bin_ns), np.load(self.folder / f"{k}.level{j}.codes.npy", mmap_mode="r"),
                     np.load(self.folder / f"{k}.level{j}.weights.npy", mmap_mode="r")) for j, (lo, bin_ns) in enumerate(heads)]
        except (OSError, ValueError):
            return None

    def keep_levels(self, k: int, levels: list[tuple[float, float, np.ndarray, np.ndarray]]) -> None:
        """Store lane ``k``'s pyramid, once its index is stored (the heads last: they say it is whole)."""
        if self.doc is None:
            return
        try:
            for j, (_, _, codes, weights) in enumerate(levels):
                np.save(self.folder / f"{k}.level{j}.codes.npy", codes)
                np.save(self.folder / f"{k}.level{j}.weights.npy", weights)
            np.save(self.folder / f"{k}.levels.npy", np.array([[lo, b] for lo, b, _, _ in levels], dtype=np.float64))
        except OSError as exc:
            log.debug("pyramid of lane %s not stored: %s", k, exc)


def _save_table(folder: Path, prefix: str, table: pd.DataFrame) -> dict:
    """``table``'s columns as ``PREFIX.COLUMN.npy`` in ``folder``, a text column as codes into its
    texts (listed in the returned dict, which :func:`_read_table` reads it back with)."""
    doc = {"columns": [str(c) for c in table.columns], "texts": {}}
    for c in table.columns:
        values = table[c]
        if values.dtype.kind in "biuf":
            np.save(folder / f"{prefix}.{c}.npy", values.to_numpy())
        else:
            codes, texts = pd.factorize(values)
            doc["texts"][str(c)] = [str(t) for t in texts]
            np.save(folder / f"{prefix}.{c}.npy", codes.astype(np.int32))
    return doc


def _read_table(folder: Path, prefix: str, doc: dict) -> pd.DataFrame:
    columns = {}
    for c in doc["columns"]:
        values = np.load(folder / f"{prefix}.{c}.npy")
        columns[c] = pd.array(doc["texts"][c], dtype="str").take(values, allow_fill=True) if c in doc["texts"] else values
    return pd.DataFrame(columns, columns=doc["columns"])
