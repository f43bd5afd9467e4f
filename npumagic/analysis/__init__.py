"""Pure analyses over profiler data: readers -> Trace -> Summary. No IPython, no matplotlib, no torch."""

from .summary import Summary, summarize
from .schema import Trace
from .sources import load

__all__ = ["Trace", "Summary", "load", "summarize"]
