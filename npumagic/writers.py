"""Whether the process that wrote a history row still runs: a 'running' row whose kernel is
gone reads as crashed, and another live kernel's runs are not counted back (-1, -2) from here.
A pid alone may have been reused: the process's start time is kept beside it."""

from __future__ import annotations

import os
import socket
from typing import Any


def process_started(pid: int | None = None) -> float | None:
    """The start time (epoch seconds) of process ``pid`` (default this one), None if unknown."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError, ValueError):
        return None


def writer_alive(pid: Any, host: str | None, started: Any = None) -> bool:
    """Whether the kernel that wrote a 'running' row may still be running (other hosts: assume
    so). A live process with the same pid but another start time is not it: pids are reused."""
    if not isinstance(pid, int) or not 0 < pid < 2**31 or host != socket.gethostname():
        return True
    import psutil

    if not psutil.pid_exists(pid):
        return False
    if isinstance(started, (int, float)) and not isinstance(started, bool):
        now = process_started(pid)
        if now is not None and abs(now - started) > 1.0:
            return False
    return True


def another_live_process(pid: Any, host: str | None, started: Any, here: str, my_start: float | None) -> bool:
    """Whether a row was written by another process of this host (``here``) that is still running
    (the same pid and start time; ``my_start``: this process's). A row of another host, or without
    a pid and start time, counts as ended: a container's hostname changes at each restart, and its
    old runs must stay the latest."""
    if host != here or not isinstance(pid, int) or not _is_number(started):
        return False  # nothing to check the writer by (a row from before start times were kept: ended)
    mine = pid == os.getpid() and abs(started - (my_start or started)) <= 1.0
    return not mine and writer_alive(pid, host, started)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
