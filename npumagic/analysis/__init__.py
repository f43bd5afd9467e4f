"""Pure analyses over profiler data: readers -> Trace -> Summary. No IPython, no matplotlib, no torch.

The four names below load on first use, so a module of this layer that needs no pandas (the
stored verdict, :mod:`.persist_verdict`) is imported without it (``npumagic runs``)."""

from __future__ import annotations

from typing import Any

__all__ = ["Trace", "Summary", "load", "summarize"]


def __getattr__(name: str) -> Any:
    if name in ("Summary", "summarize"):
        from .summary import Summary, summarize

        value = {"Summary": Summary, "summarize": summarize}[name]
    elif name == "Trace":
        from .schema import Trace as value
    elif name == "load":
        from .sources import load as value
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value
