"""Drop the two lines torch's Kineto writes straight to file descriptor 2 at every profiler start
and stop (``USDT:... profiler_start`` / ``profiler_stop``), which Jupyter shows as red stderr
output under the cell. Only while the profiler starts, steps or stops, only those lines: anything
else written to stderr meanwhile is passed on unchanged."""

from __future__ import annotations

import os
import re
import sys
import tempfile
from contextlib import contextmanager
from typing import Iterator

CHATTER = re.compile(rb"^USDT:.*\] ?profiler_(start|stop)\s*$")


def keep(data: bytes) -> bytes:
    """``data`` without Kineto's profiler start/stop lines."""
    return b"".join(line for line in data.splitlines(keepends=True) if not CHATTER.match(line.rstrip(b"\r\n")))


@contextmanager
def without_profiler_chatter() -> Iterator[None]:
    """Send fd 2 to a temporary file for the duration, then write back what is not chatter."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no usable fd 2 (embedded interpreters)
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            rest = keep(sink.read())
            if rest:
                os.write(2, rest)
