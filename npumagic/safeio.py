"""Writing output files so that nothing already there is lost and no planted link is followed.

A file is written to a new temporary file beside it and renamed over the old one: an interrupt
or a full disk leaves the old file whole, and a symbolic link planted at the file's name (in a
shared or unpacked output directory) is replaced, never written through."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Iterable


def write_atomic(path: str | Path, data: bytes | str, encoding: str = "utf-8", mode: int = 0o666) -> None:
    """Write ``data`` to ``path`` whole or not at all (OSError when it cannot be written).

    The temporary file is created new (``O_CREAT | O_EXCL | O_NOFOLLOW``) under a random name:
    a link or file planted at any name beside it is never opened, and a name already taken
    is passed over for another. ``mode`` is narrowed by the umask, as ``open()`` does, so a
    group-shared output folder (umask 002) stays group-writable."""
    write_atomic_chunks(path, [data.encode(encoding) if isinstance(data, str) else data], mode)


def write_atomic_chunks(path: str | Path, chunks: Iterable[bytes], mode: int = 0o666) -> None:
    """:func:`write_atomic` of the bytes ``chunks`` yields, one after the other: a large file
    (a trace export) is written as it is made, never held whole."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(21, "Is a directory", str(path))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for attempt in range(_TRIES):
        tmp = path.with_name(f".{path.name[:200]}.{secrets.token_hex(8)}.tmp")
        try:
            fd = os.open(tmp, flags, mode)
            break
        except FileExistsError:
            if attempt == _TRIES - 1:
                raise
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


_TRIES = 5  # random names: a taken one is a planted file, and five in a row something else


def linked(path: str | Path, root: str | Path) -> bool:
    """Whether ``path`` (inside ``root``) leaves ``root`` through a symbolic link: any of its
    components below ``root``, the last one included, is a link, or it resolves elsewhere."""
    path, root = Path(os.path.abspath(path)), Path(os.path.abspath(root))
    if path != root and root not in path.parents:
        return False  # not under root: the user chose it
    for part in (path, *path.parents):
        if part == root:
            break
        if part.is_symlink():
            return True
    real_root = Path(os.path.realpath(root))
    real = Path(os.path.realpath(path))
    return real != real_root and real_root not in real.parents
