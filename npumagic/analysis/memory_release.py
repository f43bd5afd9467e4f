"""Give freed heap memory back to the operating system between the phases of a large read.

A reader frees many mid-sized arrays (a chunk's columns, once joined); glibc keeps such memory in
the process heap (its mmap threshold grows after large frees), so the next phase's arrays come on
top of it and the peak RSS counts both. ``malloc_trim`` returns the free pages at once; it is a
no-op cost (~ms) where there is nothing to return, and skipped off glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _trim():
    # find_library runs ldconfig in a subprocess: only where glibc's usual name is not found
    for name in (lambda: "libc.so.6", lambda: ctypes.util.find_library("c")):
        try:
            return ctypes.CDLL(name()).malloc_trim
        except (OSError, AttributeError, TypeError):
            continue
    return None


def release_free_memory() -> None:
    """Return the heap's free pages to the OS (glibc); nothing elsewhere."""
    trim = _trim()
    if trim is not None:
        trim(0)
