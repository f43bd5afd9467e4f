"""Ctrl-C held back for the moment a run's status is written, so that no burst of them leaves a
run recorded as 'running' in a kernel that is still alive."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def held_interrupts() -> Iterator[None]:
    """Run the body with SIGINT held back: one that arrives meanwhile is delivered (as the handler
    in place would, a KeyboardInterrupt by default) once the body is done. Outside the main
    thread, where no handler can be set, the body runs as is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        if callable(previous):
            previous(signal.SIGINT, held[-1])
        elif previous == signal.SIG_DFL:
            raise KeyboardInterrupt
