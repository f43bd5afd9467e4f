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
from . import ascend, kineto
from .host import FILE_NAME as HOST_FILE
from .host import read_host

__all__ = ["load", "detect"]

_TRACE_SUFFIXES = (".json", ".json.gz")


def detect(path: str | Path) -> tuple[str, list[Path]]:
    """Return ``(format, paths)`` for ``path``: format is ``"kineto"`` or ``"ascend"``."""
    path = Path(path)
    if not path.exists():
        raise TraceError(path, "no such file or directory")
    if path.is_file():
        if path.name.endswith(_TRACE_SUFFIXES):
            return "kineto", [path]
        raise TraceError(path, "unknown format; expected a torch.profiler trace (*.json, *.json.gz) "
                               "or a torch_npu *_ascend_pt directory")
    ranks = ascend.rank_dirs(path)
    if ranks:
        return "ascend", ranks
    traces = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(_TRACE_SUFFIXES))
    if traces:
        return "kineto", traces
    nested = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith((".pt.trace.json", ".pt.trace.json.gz")))
    if nested:
        return "kineto", nested
    found = sorted(p.name for p in path.iterdir())[:5]
    what = f"it holds {', '.join(found)}" if found else "it is empty"
    raise TraceError(path, f"no profiler output found ({what}); expected *.pt.trace.json files "
                           "or torch_npu *_ascend_pt directories with ASCEND_PROFILER_OUTPUT/")


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
        bar = tqdm(total=0 if fmt == "kineto" else len(paths), desc=f"reading {Path(path).name}", unit=unit,
                   unit_scale=fmt == "kineto", leave=False, delay=0.5)
    try:
        reader = kineto.read if fmt == "kineto" else ascend.read
        trace = reader(paths, progress=bar)
    finally:
        if bar is not None:
            bar.close()
    return _with_host_samples(trace, Path(path))


def _with_host_samples(trace: Trace, path: Path) -> Trace:
    """Add the host samples npumagic's capture wrote into a run directory, if any."""
    host = path / HOST_FILE
    if not path.is_dir() or not host.is_file():
        return trace
    rank = trace.ranks[0] if trace.ranks else 0
    samples = read_host(host, rank)
    samples["ts_ns"] -= int(trace.meta.get("base_time_ns") or 0)  # sampled in epoch ns, as torch_npu stamps
    counters = pd.concat([trace.counters, samples], ignore_index=True)
    return dataclasses.replace(trace, counters=sort_counters(schema.coerce(counters, schema.COUNTER_COLUMNS)))
