"""Readers: detect the format of a profiler output path and read it into one normalized Trace.

Accepted: a Kineto trace file (``*.json``, ``*.json.gz``), a ``tensorboard_trace_handler``
directory of them (one file per rank, worker or repeat cycle), a torch_npu ``*_ascend_pt``
directory, or a folder holding several ``*_ascend_pt`` ranks.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pandas as pd

from ...errors import NpumagicError, TraceError
from .. import schema
from ..schema import Trace, sort_counters
from . import kineto
from .ascend import discover
from .ascend import reader as ascend_reader
from ._inflate import open_trace
from .host import FILE_NAME as HOST_FILE
from .host import read_host

__all__ = ["load", "detect", "rank_groups", "read", "merge_meta", "host_file", "with_host_samples"]

_TRACE_SUFFIXES = (".json", ".json.gz")
KINETO_FILES = (".pt.trace.json", ".pt.trace.json.gz")  # what torch.profiler's trace handler writes


def detect(path: str | Path) -> tuple[str, list[Path]]:
    """Return ``(format, paths)`` for ``path``: format is ``"kineto"`` or ``"ascend"``."""
    path = Path(path)
    if not path.exists():
        raise TraceError(path, "no such file or directory")
    inside = path if path.is_dir() else path.parent  # torch_npu's ASCEND_PROFILER_OUTPUT or a file in it
    if inside.name == discover.OUTPUT and discover.rank_dirs(inside.parent):
        return "ascend", [inside.parent]  # its rank, read whole: trace_view.json alone is no Kineto trace
    if path.is_file():
        if path.name.endswith(_TRACE_SUFFIXES):
            return "kineto", [path]
        raise TraceError(path, "unknown format; expected a torch.profiler trace (*.json, *.json.gz) "
                               "or a torch_npu *_ascend_pt directory")
    ranks = discover.rank_dirs(path)
    if ranks:
        return "ascend", ranks
    traces = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(_TRACE_SUFFIXES))
    if traces:  # a config.json beside the traces is none of them; with no trace at all, the error names each
        return "kineto", [p for p in traces if _looks_like_trace(p)] or traces
    nested = _nested_traces(path)
    if nested:
        return "kineto", nested
    raw = discover.raw_only(path)
    if raw:
        raise TraceError(path, discover.never_parsed(raw, path))
    found = sorted(p.name for p in path.iterdir())[:5]
    what = f"it holds {', '.join(found)}" if found else "it is empty"
    raise TraceError(path, f"no profiler output found ({what}); expected *.pt.trace.json files (searched "
                           f"{NESTED_DEPTH} folder levels down) or torch_npu *_ascend_pt directories with "
                           "ASCEND_PROFILER_OUTPUT/")


# the search for traces in the folders below the one given is bounded: a run's rank or worker
# folders lie a level or two down, and a home directory named by mistake (or by an assistant over
# MCP) is refused in a moment instead of walked for minutes
NESTED_DEPTH = 4  # folder levels searched below the one given
NESTED_ENTRIES = 20_000  # files and folders looked at, at most


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
        found += [Path(top, f) for f in files if f.endswith(KINETO_FILES)]
        if len(Path(top).relative_to(path).parts) >= NESTED_DEPTH:
            dirs.clear()
    return sorted(found)


SNIFF_BYTES = 2**20  # Kineto writes its small header (schemaVersion, deviceProperties, ...) first


def _looks_like_trace(path: Path) -> bool:
    """Whether a *.json[.gz] file starts as a Chrome trace: an event array, or an object with a
    ``traceEvents`` key in its first MiB."""
    try:
        with open_trace(path) as fh:
            head = fh.read(SNIFF_BYTES)
    except (OSError, NpumagicError):
        return True  # unreadable: let the reader name what is wrong with it
    return head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"[" or b'"traceEvents"' in head


def _progress_bar_class():
    """tqdm's notebook widget where ipywidgets is installed, else the plain text bar (tqdm.auto
    would warn "IProgress not found" and leave a bar stuck at 0% in Jupyter)."""
    import importlib.util

    if importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm
    else:
        from tqdm.std import tqdm
    return tqdm


def load(path: str | Path, progress: bool = False) -> Trace:
    """Read any supported profiler output into a normalized :class:`~npumagic.analysis.schema.Trace`.

    Parameters
    ----------
    path : a trace file, a run directory, or a folder of torch_npu rank directories.
    progress : show a tqdm progress bar (events decoded, files read) while reading; it appears
        only when reading takes longer than half a second.

    Raises
    ------
    TraceError : naming the file that could not be read and what was expected.
    """
    fmt, paths = detect(path)
    bar = None
    if progress:
        tqdm = _progress_bar_class()
        unit = "event" if fmt == "kineto" else "rank"
        bar = tqdm(total=None if fmt == "kineto" else len(paths), desc=f"reading {Path(path).name}", unit=unit,
                   unit_scale=fmt == "kineto", leave=False, delay=0.5)
    try:
        trace = read(fmt, paths, progress=bar)
    finally:
        if bar is not None:
            bar.close()
    return with_host_samples(trace, Path(path))


def read(fmt: str, paths: list[Path], progress=None) -> Trace:
    """Read ``paths`` of format ``fmt`` (as :func:`detect` returns them) with that reader."""
    read_format = kineto.read if fmt == "kineto" else ascend_reader.read
    return read_format(paths, progress=progress)


def host_file(path: str | Path) -> Path | None:
    """npumagic's host samples in the run directory ``path`` (written by its capture), if any."""
    host = Path(path) / HOST_FILE
    return host if Path(path).is_dir() and host.is_file() else None


def with_host_samples(trace: Trace, path: str | Path) -> Trace:
    """Add the host samples npumagic's capture wrote into a run directory, if any (to the
    trace's lowest rank: the capture sampled its own process)."""
    host = host_file(path)
    if host is None:
        return trace
    rank = trace.ranks[0] if trace.ranks else 0
    samples = read_host(host, rank)
    samples["ts_ns"] -= int(trace.meta.get("base_time_ns") or 0)  # sampled in epoch ns, as torch_npu stamps
    counters = pd.concat([trace.counters, samples], ignore_index=True)
    return dataclasses.replace(trace, counters=sort_counters(schema.coerce(counters, schema.COUNTER_COLUMNS)))


def rank_groups(fmt: str, paths: list[Path]) -> list[list[Path]]:
    """``paths`` split into groups that each hold one rank and can be read on their own.

    A torch_npu rank directory is one rank. Kineto files are kept together (one group): a
    folder of them may be repeat cycles of one rank, which must be read as one.
    """
    if fmt == "ascend":
        return [[p] for p in paths]
    return [list(paths)]


def merge_meta(fmt: str, paths: list[Path], metas: list[dict], unreadable: dict | None = None) -> dict:
    """The meta of a job read group by group: what reading all ``paths`` at once gives, from each
    group's own meta (in the order of :func:`rank_groups`)."""
    if fmt == "ascend":
        job = ascend_reader.merge_meta(paths, metas, unreadable)
    elif len(metas) != 1:
        raise ValueError("Kineto files are read as one group")
    else:
        job = dict(metas[0])
    inferred = sorted({int(r) for m in metas for r in m.get("steps_inferred", [])})
    if inferred:  # as schema.finish marks the ranks without ProfilerStep marks
        job["steps_inferred"] = inferred
    return job
