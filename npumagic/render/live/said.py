"""Where the live timeline says what it left out (a lane, and why): a warning in the cell that
asked, or, for the work a widget does on its own thread after its first view (:func:`said_to`),
that widget. Not a warning there: the warnings machinery is the process's, not the thread's
(``catch_warnings`` swaps it for every thread at once), so a warning from that thread would land
in whichever cell happens to run then."""

from __future__ import annotations

import threading
import warnings
from contextlib import contextmanager
from typing import Callable, Iterator

_here = threading.local()


def say(text: str, stacklevel: int = 1) -> None:
    """``text`` to this thread's listener (:func:`said_to`), else warned (UserWarning) with
    ``stacklevel`` counted from the caller, as ``warnings.warn``'s."""
    listener = getattr(_here, "listener", None)
    if listener is None:
        warnings.warn(text, stacklevel=stacklevel + 1)
    else:
        listener(text)


@contextmanager
def said_to(listener: Callable[[str], None]) -> Iterator[None]:
    """What :func:`say` is told on this thread, and on this thread only, goes to ``listener``."""
    before = getattr(_here, "listener", None)
    _here.listener = listener
    try:
        yield
    finally:
        _here.listener = before
