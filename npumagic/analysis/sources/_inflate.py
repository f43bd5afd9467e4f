"""Bounded reading of trace files, gzip or plain: the one place a compressed input is inflated.

A gzip member is inflated incrementally and refused (with a :class:`TraceError` naming the file)
as soon as it passes :data:`MAX_BYTES` or, once past :data:`RATIO_FLOOR`, inflates more than
:data:`MAX_RATIO` times its compressed size (real Kineto traces compress 5-20:1; a whitespace or
zero bomb compresses 1000:1). Both limits are checked before the memory is spent, never after.
Gzip is recognised by its magic bytes, not the file name. ``NPUMAGIC_MAX_TRACE_BYTES`` raises
the size limit for a genuinely huge trace.

:func:`open_trace` gives a stream (for readers that decode incrementally); :func:`read_trace`
the whole text as one ``bytes`` object, built without a second copy.
"""

from __future__ import annotations

import io
import os
import zlib
from pathlib import Path
from typing import BinaryIO

from ...errors import NpumagicError, TraceError
from ..decode_worker import GZIP_MAGIC

MAX_BYTES = 4 * 2**30  # inflated size limit of one trace file
MAX_RATIO = 100  # inflated / compressed, checked once RATIO_FLOOR bytes are inflated
RATIO_FLOOR = 64 * 2**20
CHUNK = 256 * 2**10


def max_bytes() -> int:
    """The inflated size limit: ``NPUMAGIC_MAX_TRACE_BYTES`` when set, else :data:`MAX_BYTES`."""
    text = os.environ.get("NPUMAGIC_MAX_TRACE_BYTES", "").strip()
    if not text:
        return MAX_BYTES
    try:
        value = int(float(text))  # 8e9 reads as 8 GB
    except (ValueError, OverflowError):
        value = 0
    if value <= 0:
        raise NpumagicError(f"NPUMAGIC_MAX_TRACE_BYTES={text!r}: expected a positive number of bytes (e.g. 8e9)")
    return value


class _GzipStream(io.RawIOBase):
    """The inflated bytes of a gzip file (one or more members), refusing a bomb early."""

    def __init__(self, path: Path, fh: BinaryIO, limit: int, ratio: float, floor: int) -> None:
        self.path, self._fh = path, fh
        self.limit, self.ratio, self.floor = limit, ratio, floor
        self._z: zlib._Decompress | None = None
        self._buf = b""  # compressed input not yet handed to the decompressor
        self.read_in = 0  # compressed bytes read from the file
        self.inflated = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        want = len(b)
        while want:
            if not self._buf:
                self._buf = self._fh.read(CHUNK)
                self.read_in += len(self._buf)
                if not self._buf:
                    if self._z is not None:
                        raise TraceError(self.path, f"truncated gzip data: it ends after {self.inflated} inflated "
                                                    "bytes, inside a member; the file may be incomplete")
                    return 0
            if self._z is None:
                if not self._buf.strip(b"\0"):  # zero padding after the last member (as gzip.open allows)
                    self._buf = b""
                    continue
                self._z = zlib.decompressobj(wbits=31)
            try:
                out = self._z.decompress(self._buf, want)
            except zlib.error as exc:
                raise TraceError(self.path, f"corrupt gzip data after {self.inflated:,} inflated bytes ({exc}); "
                                            "expected a gzip-compressed trace") from None
            if self._z.eof:
                self._buf, self._z = self._z.unused_data, None
            else:
                self._buf = self._z.unconsumed_tail
            if out:
                self.inflated += len(out)
                self._check()
                b[:len(out)] = out
                return len(out)
        return 0

    def _check(self) -> None:
        if self.inflated > self.limit:
            raise TraceError(self.path, f"inflates past {self.limit:,} bytes; refused before memory runs out "
                                        "(set NPUMAGIC_MAX_TRACE_BYTES to allow more)")
        used = self.read_in - len(self._buf)
        if self.inflated > self.floor and self.inflated > self.ratio * max(used, 1):
            raise TraceError(self.path, f"inflates more than {self.ratio:g}:1 ({self.inflated:,} bytes from "
                                        f"{used:,}); a profiler trace compresses far less, refused as a gzip bomb")

    def close(self) -> None:
        try:
            self._fh.close()
        finally:
            super().close()


def _open(path: Path, limit: int | None, ratio: float | None, floor: int | None) -> tuple[BinaryIO, bool]:
    limit = max_bytes() if limit is None else limit
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed by the caller's stream
        head = fh.read(2)
        fh.seek(0)
        size = os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise TraceError(path, f"cannot read the file ({exc.strerror or exc})") from None
    if head != GZIP_MAGIC:
        if size > limit:
            fh.close()
            raise TraceError(path, f"is {size:,} bytes, past the {limit:,}-byte limit "
                                   "(set NPUMAGIC_MAX_TRACE_BYTES to allow more)")
        return fh, False
    stream = _GzipStream(path, fh, limit, MAX_RATIO if ratio is None else ratio, RATIO_FLOOR if floor is None else floor)
    return io.BufferedReader(stream, buffer_size=CHUNK), True


def open_trace(path: str | Path, limit: int | None = None, ratio: float | None = None,
               floor: int | None = None) -> BinaryIO:
    """Open a trace file for reading its (inflated) bytes.

    Parameters
    ----------
    path : a plain or gzip-compressed file (recognised by its magic bytes).
    limit, ratio, floor : override :func:`max_bytes`, :data:`MAX_RATIO`, :data:`RATIO_FLOOR`.

    Returns
    -------
    A binary stream. Opening or reading it raises :class:`TraceError` naming ``path`` when the
    file cannot be read, the gzip data is corrupt or truncated, or it passes the limits.
    """
    return _open(Path(path), limit, ratio, floor)[0]


def read_trace(path: str | Path, limit: int | None = None, ratio: float | None = None,
               floor: int | None = None) -> bytes:
    """The whole (inflated) content of a trace file as one ``bytes`` object.

    Plain files are read once; gzip members are inflated into a growing buffer whose final
    ``bytes`` is handed over without a copy. Arguments as :func:`open_trace`.
    """
    path = Path(path)
    fh, gz = _open(path, limit, ratio, floor)
    with fh:
        try:
            if not gz:
                return fh.read()
            out = io.BytesIO()
            while chunk := fh.read1(CHUNK):
                out.write(chunk)
            return out.getvalue()  # CPython hands BytesIO's own buffer over (no copy) when unshared
        except OSError as exc:
            raise TraceError(path, f"cannot read the file ({exc.strerror or exc})") from None
