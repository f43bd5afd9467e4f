"""Readers: detect the format of a profiler output path and read it into one normalized Trace.

Accepted: a Kineto trace file (``*.json``, ``*.json.gz``), a ``tensorboard_trace_handler``
directory of them (one file per rank, worker or repeat cycle), a torch_npu ``*_ascend_pt``
directory, or a folder holding several ``*_ascend_pt`` ranks.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import TraceError
from ..schema import Trace
from . import ascend, kineto

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
        from tqdm.auto import tqdm

        unit = "event" if fmt == "kineto" else "rank"
        bar = tqdm(total=0 if fmt == "kineto" else len(paths), desc=f"reading {Path(path).name}", unit=unit,
                   unit_scale=fmt == "kineto", leave=False, delay=0.5)
    try:
        reader = kineto.read if fmt == "kineto" else ascend.read
        return reader(paths, progress=bar)
    finally:
        if bar is not None:
            bar.close()
