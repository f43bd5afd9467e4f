"""Ctrl-C held back for the moment a run's status is written, so that no burst of them leaves a
run recorded as 'running' in a kernel that is still alive."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def held_interrupts() -> Iterator[None]:
    """Run the body with SIGINT held back; one that arrives meanwhile is raised again once the
    body is done, for the handler in place to act on as it would have (a KeyboardInterrupt by
    default). Outside the main thread, or where the handler was set outside Python, the body
    runs as is."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield
        return
    held = []
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        signal.raise_signal(signal.SIGINT)
