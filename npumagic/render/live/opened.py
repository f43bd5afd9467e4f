"""The live views this kernel has open, by the profiler output they show: a click on a finding of
``%npuadvise`` moves the latest view of its run (:func:`latest`). Held weakly, and a closed view
(its comm gone) is forgotten, so this keeps no view alive."""

from __future__ import annotations

import weakref
from pathlib import Path

_OPEN: list[tuple[Path, weakref.ref]] = []  # (the folder or file shown, the view), oldest first


def remember(source: str | Path | None, view) -> None:
    """Note ``view`` as the latest open view of ``source`` (nothing where it has none)."""
    if source:
        _OPEN.append((Path(source).resolve(), weakref.ref(view)))


def latest(run_dir: str | Path):
    """The latest open view of ``run_dir`` or of a file under it; None where none is open."""
    folder = Path(run_dir).resolve()
    _OPEN[:] = [(p, ref) for p, ref in _OPEN if ref() is not None and getattr(ref(), "comm", None) is not None]
    for path, ref in reversed(_OPEN):
        if path == folder or folder in path.parents:
            return ref()
    return None
