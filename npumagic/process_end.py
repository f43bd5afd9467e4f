"""How the ``npumagic`` command ends: as ``sys.exit`` would, less the interpreter's teardown.

Python frees every module's objects one by one at exit and collects garbage several times over
them; with pandas, numpy and pyarrow loaded that took 0.07-0.1 s of a 0.8 s ``npumagic analyze``,
for nothing the command still needs. multiprocessing ends its children the same way (``os._exit``
once the work is done)."""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def exit_now(status: int | None) -> NoReturn:
    """End the process with ``status``: the exit handlers run (the read-ahead's workers stopped,
    logging flushed, temporary folders removed) and the standard streams are flushed, as at a
    normal exit. Where a thread other than the main one is still working (not a daemon), the
    process ends the usual way, which waits for it."""
    run_handlers = getattr(atexit, "_run_exitfuncs", None)  # CPython's; elsewhere the usual exit
    working = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if run_handlers is None or working:
        sys.exit(status)
    run_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a reader that has gone, a stream closed: nothing left to say
            pass
    os._exit(0 if status is None else int(status))
