"""The readers, one per profiler output format, and the one list they are chosen from.

A reader says whether a path is its format (:meth:`Reader.sniff`), reads its files into a Trace,
splits them into groups that each hold one rank, and merges the meta of groups read apart. The
job reader (:mod:`~npumagic.analysis.job`) asks the reader instead of testing format names; a
format no reader has is refused by name (:func:`reader_for`), never handed to another reader.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from ...errors import NpumagicError, TraceError
from ..read_ahead import KINETO_FILES, TRACE_SUFFIXES
from ._inflate import open_trace
from . import kineto
from .ascend import discover


class Reader(Protocol):
    name: str  # the format's name, as detect returns it
    unit: str  # what its progress bar counts: "event" (a total unknown beforehand) or "rank"
    leaves_out_unreadable: bool  # a rank that cannot be read is left out of a job read apart
    outline: Any  # the many-rank outline reader (``unfit(paths)``, ``read(paths, bar)``), or None

    def sniff(self, path: Path) -> list[Path] | None:
        """The paths to read when ``path`` (which exists) is this format, else None."""

    def read(self, paths: list[Path], progress=None): ...

    def rank_groups(self, paths: list[Path]) -> list[list[Path]]:
        """``paths`` split into groups that each hold one rank and can be read on their own."""

    def merge_meta(self, paths: list[Path], metas: list[dict], unreadable: dict | None = None) -> dict:
        """The job's meta from each group's own meta, in the order of :meth:`rank_groups`."""


# the search for traces in the folders below the one given is bounded: a run's rank or worker
# folders lie a level or two down, and a home directory named by mistake (or by an assistant over
# MCP) is refused in a moment instead of walked for minutes
NESTED_DEPTH = 4  # folder levels searched below the one given
NESTED_ENTRIES = 20_000  # files and folders looked at, at most
SNIFF_BYTES = 2**20  # Kineto writes its small header (schemaVersion, deviceProperties, ...) first
SNIFF_STEP = 2**16


class AscendReader:
    """torch_npu's ``*_ascend_pt`` rank directories, one rank each."""

    name, unit, leaves_out_unreadable = "ascend", "rank", True

    # torch_npu's reader and outline (CSV, SQLite) are imported where a job is torch_npu's: a
    # Kineto trace's analysis never loads them
    @property
    def outline(self):
        from .ascend import outline

        return outline

    def sniff(self, path: Path) -> list[Path] | None:
        inside = path if path.is_dir() else path.parent  # torch_npu's ASCEND_PROFILER_OUTPUT or a file in it
        if inside.name == discover.OUTPUT and discover.rank_dirs(inside.parent):
            return [inside.parent]  # its rank, read whole: trace_view.json alone is no Kineto trace
        if path.is_dir():
            return discover.rank_dirs(path) or None
        return None

    def read(self, paths: list[Path], progress=None):
        from .ascend import reader

        return reader.read(paths, progress=progress)

    def rank_groups(self, paths: list[Path]) -> list[list[Path]]:
        return [[p] for p in paths]

    def merge_meta(self, paths: list[Path], metas: list[dict], unreadable: dict | None = None) -> dict:
        from .ascend import reader

        return reader.merge_meta(paths, metas, unreadable)


class KinetoReader:
    """torch.profiler's Chrome traces: a file, or a folder of them (ranks, workers or repeat cycles)."""

    name, unit, leaves_out_unreadable, outline = "kineto", "event", False, None

    def sniff(self, path: Path) -> list[Path] | None:
        if path.is_file():
            return [path] if path.name.endswith(TRACE_SUFFIXES) else None
        traces = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
        if traces:  # a config.json beside the traces is none of them; with no trace at all, the error names each
            return [p for p in traces if _looks_like_trace(p)] or traces
        return _nested_traces(path) or None

    def read(self, paths: list[Path], progress=None):
        return kineto.read(paths, progress=progress)

    def rank_groups(self, paths: list[Path]) -> list[list[Path]]:
        # kept together: a folder of them may be repeat cycles of one rank, which must be read as one
        return [list(paths)]

    def merge_meta(self, paths: list[Path], metas: list[dict], unreadable: dict | None = None) -> dict:
        if len(metas) != 1:
            raise ValueError("Kineto files are read as one group")
        return dict(metas[0])


# in the order they are asked: a torch_npu rank holds a trace_view.json no Kineto reader should take
READERS: list[Reader] = [AscendReader(), KinetoReader()]


def reader_for(fmt: str, paths: list[Path] | None = None) -> Reader:
    """The reader of format ``fmt``; a TraceError naming the format (and the first of ``paths``)
    when no reader has it."""
    for reader in READERS:
        if reader.name == fmt:
            return reader
    where = paths[0] if paths else "(no path)"
    raise TraceError(where, f"no reader for format {fmt!r}; readers: {', '.join(r.name for r in READERS)}")


def sniff(path: Path) -> tuple[Reader, list[Path]] | None:
    """The first reader that takes ``path``, with the paths it would read; None when none does."""
    for reader in READERS:
        paths = reader.sniff(path)
        if paths:
            return reader, paths
    return None


def _nested_traces(path: Path) -> list[Path]:
    """The Kineto trace files in the folders below ``path``, at most :data:`NESTED_DEPTH` levels
    down, links to folders not followed; more than :data:`NESTED_ENTRIES` entries there is a
    TraceError (the traces found so far could be some of a job's ranks only)."""
    found, seen = [], 0
    for top, dirs, files in os.walk(path):
        seen += len(dirs) + len(files)
        if seen > NESTED_ENTRIES:
            raise TraceError(path, f"more than {NESTED_ENTRIES:,} files and folders below it, too many to search for "
                                   "profiler output: give the folder that holds the *.pt.trace.json files or the "
                                   "*_ascend_pt directories")
        found += [Path(top, f) for f in files if f.endswith(KINETO_FILES) and Path(top, f).is_file()]  # no FIFO
        if len(Path(top).relative_to(path).parts) >= NESTED_DEPTH:
            dirs.clear()
    return sorted(found)


def _looks_like_trace(path: Path) -> bool:
    """Whether a *.json[.gz] file starts as a Chrome trace: an event array, or an object with a
    ``traceEvents`` key in its first MiB."""
    head = b""
    try:
        with open_trace(path) as fh:
            # read a little at a time: the key is in the first few KiB of a trace, and inflating a
            # whole MiB of a .gz to find it cost more than the rest of the sniff (it is read again)
            while len(head) < SNIFF_BYTES:
                more = fh.read(min(SNIFF_STEP, SNIFF_BYTES - len(head)))
                head += more
                if not more or _trace_head(head):
                    break
    except (OSError, NpumagicError):
        return True  # unreadable: let the reader name what is wrong with it
    return _trace_head(head)


def _trace_head(head: bytes) -> bool:
    return head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"[" or b'"traceEvents"' in head
