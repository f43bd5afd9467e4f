"""Readers: detect the format of a profiler output path and read it into one normalized Trace.

Accepted: a Kineto trace file (``*.json``, ``*.json.gz``), a ``tensorboard_trace_handler``
directory of them (one file per rank, worker or repeat cycle), a torch_npu ``*_ascend_pt``
directory, or a folder holding several ``*_ascend_pt`` ranks.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from ...errors import TraceError
from .. import schema
from ..schema import Trace, sort_counters
from . import readers
from .ascend import discover
from .host import FILE_NAME as HOST_FILE
from .host import read_host
from .readers import KINETO_FILES, READERS, Reader, reader_for

__all__ = ["load", "detect", "rank_groups", "read", "merge_meta", "host_file", "with_host_samples", "READERS",
           "Reader", "reader_for", "KINETO_FILES"]


def detect(path: str | Path) -> tuple[str, list[Path]]:
    """Return ``(format, paths)`` for ``path``: format is the name of the first reader in
    :data:`~npumagic.analysis.sources.readers.READERS` that takes it (``"kineto"``, ``"ascend"``)."""
    path = Path(path)
    if not path.exists():
        raise TraceError(path, "no such file or directory")
    if not (path.is_file() or path.is_dir()):  # reading a FIFO would wait for a writer
        raise TraceError(path, "neither a file nor a folder (a FIFO, socket or device); expected a profiler trace "
                               "file or the folder holding the profiler's output")
    found = readers.sniff(path)
    if found is not None:
        reader, paths = found
        return reader.name, paths
    if path.is_file():
        raise TraceError(path, "unknown format; expected a torch.profiler trace (*.json, *.json.gz) "
                               "or a torch_npu *_ascend_pt directory")
    raw = discover.raw_only(path)
    if raw:
        raise TraceError(path, discover.never_parsed(raw, path))
    held = sorted(path.iterdir())[:5]
    # a FIFO or socket named like a trace is never read (reading one waits for a writer): said so
    odd = [p.name for p in held if not (p.is_file() or p.is_dir())]
    what = (f"it holds {', '.join(p.name for p in held)}" + (
        f"; {', '.join(odd)} {'is' if len(odd) == 1 else 'are'} neither a file nor a folder" if odd else "")
        if held else "it is empty")
    raise TraceError(path, f"no profiler output found ({what}); expected *.pt.trace.json files (searched "
                           f"{readers.NESTED_DEPTH} folder levels down) or torch_npu *_ascend_pt directories with "
                           "ASCEND_PROFILER_OUTPUT/")


def progress_bar_class():
    """tqdm's notebook widget where ipywidgets is installed, else the plain text bar (tqdm.auto
    would warn "IProgress not found" and leave a bar stuck at 0% in Jupyter)."""
    import importlib.util

    if importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm
    else:
        from tqdm.std import tqdm
    return tqdm


def load(path: str | Path, progress: bool = False, found: tuple[str, list[Path]] | None = None) -> Trace:
    """Read any supported profiler output into a normalized :class:`~npumagic.analysis.schema.Trace`.

    Parameters
    ----------
    path : a trace file, a run directory, or a folder of torch_npu rank directories.
    progress : show a tqdm progress bar (events decoded, files read) while reading; it appears
        only when reading takes longer than half a second.
    found : ``(format, paths)`` as :func:`detect` gave them for ``path`` (a caller that has
        detected it already: the format is not sniffed again).

    Raises
    ------
    TraceError : naming the file that could not be read and what was expected.
    """
    fmt, paths = found if found is not None else detect(path)
    bar = None
    if progress:
        tqdm = progress_bar_class()
        by_event = reader_for(fmt, paths).unit == "event"
        bar = tqdm(total=None if by_event else len(paths), desc=f"reading {Path(path).name}",
                   unit=reader_for(fmt, paths).unit, unit_scale=by_event, leave=False, delay=0.5)
    try:
        trace = read(fmt, paths, progress=bar)
    finally:
        if bar is not None:
            bar.close()
    return with_host_samples(trace, Path(path))


def read(fmt: str, paths: list[Path], progress=None) -> Trace:
    """Read ``paths`` of format ``fmt`` (as :func:`detect` returns them) with that reader; a
    format no reader has is a TraceError naming it."""
    return reader_for(fmt, paths).read(paths, progress=progress)


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
    samples["ts_ns"] -= trace.meta.base_time_ns  # sampled in epoch ns, as torch_npu stamps
    counters = pd.concat([trace.counters, samples], ignore_index=True)
    return dataclasses.replace(trace, counters=sort_counters(schema.coerce(counters, schema.COUNTER_COLUMNS)))


def rank_groups(fmt: str, paths: list[Path]) -> list[list[Path]]:
    """``paths`` split into groups that each hold one rank and can be read on their own (see
    :meth:`~npumagic.analysis.sources.readers.Reader.rank_groups`)."""
    return reader_for(fmt, paths).rank_groups(paths)


def merge_meta(fmt: str, paths: list[Path], metas: list[dict], unreadable: dict | None = None) -> dict:
    """The meta of a job read group by group: what reading all ``paths`` at once gives, from each
    group's own meta (in the order of :func:`rank_groups`)."""
    job = reader_for(fmt, paths).merge_meta(paths, metas, unreadable)
    inferred = sorted({int(r) for m in metas for r in m.get("steps_inferred", [])})
    if inferred:  # as schema.finish marks the ranks without ProfilerStep marks
        job["steps_inferred"] = inferred
    found = {r: how for m in metas for r, how in m.get("steps_from", {}).items()}
    if found:  # how schema.finish cut the steps of ranks without ProfilerStep marks
        job["steps_from"] = found
    return job
