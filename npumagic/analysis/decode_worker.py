"""Starting a decode worker: a fresh interpreter (``python -c``) that imports numpy and msgspec
only, never pandas, and decodes Kineto trace text into columns (:mod:`.sources._pool` serves it).

The pool of a large trace sends such workers blocks of text; the read-ahead (:mod:`.read_ahead`)
has one decode a whole small file while the reading process imports pandas. This module imports
neither, so the read-ahead can start before them.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

from ..errors import NpumagicError

POOL_FROM = 32 * 2**20  # bytes of text: a smaller file is decoded in one process (no pool start)
GZIP_MAGIC = b"\x1f\x8b"
GZIP_RATIO = 8  # a gzip trace's text per byte on disk, to guess its size (Kineto traces compress 5-20:1)
PIPE_SIZE = 2**20  # Linux's default most for an unprivileged process (/proc/sys/fs/pipe-max-size)
F_SETPIPE_SZ = 1031  # fcntl's name for it from Python 3.10 on Linux
ANSWER = struct.Struct("<q")  # a worker's answer is its pickle's length, then the pickle
_SOURCES = Path(__file__).resolve().parent / "sources"
# the worker imports the block decoder without the sources package's __init__ (which imports pandas)
_BOOT = """import sys, types
sys.path[:] = [sys.argv[1]] + [p for p in sys.path if p]
package = types.ModuleType("npumagic.analysis.sources")
package.__path__ = [sys.argv[2]]
sys.modules[package.__name__] = package
from npumagic.analysis.sources._pool import serve
serve(sys.argv[3:])
"""


def start(*args: str) -> subprocess.Popen:
    """A worker, its stdin and stdout pipes widened; ``args`` tell it what to serve (none: blocks of
    text from stdin; ``file PATH``: the whole file at PATH)."""
    # a session of its own: a Ctrl-C at the terminal goes to the reading process, which ends the
    # worker, and not to a worker still starting (which would print a traceback)
    process = subprocess.Popen([sys.executable, "-c", _BOOT, str(_SOURCES.parents[2]), str(_SOURCES), *args],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
                               start_new_session=os.name == "posix")
    for pipe in (process.stdin, process.stdout):
        _widen(pipe)
    return process


def cores() -> int:
    """The cores this process may run on, at most ``NPUMAGIC_DECODE_WORKERS`` (1 or less: no worker);
    1 where this Python cannot start itself again (no worker then)."""
    found = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    text = os.environ.get("NPUMAGIC_DECODE_WORKERS", "").strip()
    try:
        most = int(text) if text else found
    except ValueError:
        raise NpumagicError(f"NPUMAGIC_DECODE_WORKERS={text!r}: expected a whole number of decode processes "
                            "(1: the trace is read in the reading process alone)") from None
    return min(found, most) if sys.executable else 1


def text_size(path: str | Path) -> int | None:
    """The size of the text of the trace file at ``path``: its size, or for a gzip file a guess from
    the usual ratio; None where it cannot be opened (said by the reader, naming the file)."""
    try:
        with open(path, "rb") as fh:
            return os.fstat(fh.fileno()).st_size * (GZIP_RATIO if fh.read(2) == GZIP_MAGIC else 1)
    except OSError:
        return None


def read_answer(pipe) -> bytearray | None:
    """A worker's next answer (pickled) from its output ``pipe``, or None where it ends first."""
    head = read_exactly(pipe, ANSWER.size)
    return None if head is None else read_exactly(pipe, ANSWER.unpack(head)[0])


def read_exactly(pipe, size: int) -> bytearray | None:
    """``size`` bytes from ``pipe``, or None where it ends before them."""
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        n = pipe.readinto(view[got:])
        if not n:
            return None
        got += n
    return data


def _widen(pipe) -> None:
    """A pipe that holds :data:`PIPE_SIZE` bytes, where the system lets it (Linux): a block crosses in
    a few writes, not 64 of 64 KiB, each of which hands this process's GIL to the writing thread."""
    try:
        import fcntl  # not on Windows

        fcntl.fcntl(pipe.fileno(), F_SETPIPE_SZ, PIPE_SIZE)
    except (ImportError, OSError):
        pass
