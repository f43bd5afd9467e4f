"""What a reader skipped, said once: bad rows are counted per file and reason and reported in
one warning (and ``meta["bad_rows"]``), never dropped silently or turned into wrong numbers;
and :func:`reading`, which turns any unexpected failure while reading one file into a
:class:`TraceError` naming that file."""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

from ...errors import TraceError

log = logging.getLogger(__name__)


class ReadNotes:
    """Bad rows and remarks collected while reading, per file."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[int, str, Counter]] = {}  # file -> (total, unit, reason counts)
        self.remarks: list[str] = []

    def count(self, path: Path | str, total: int, unit: str = "rows", **reasons: np.ndarray) -> np.ndarray:
        """Count the rows flagged by each boolean mask in ``reasons`` (a row counts once, under
        its first reason) and return the mask of good rows."""
        bad = np.zeros(total, dtype=bool)
        counts: Counter = Counter()
        for reason, mask in reasons.items():
            new = np.asarray(mask, dtype=bool) & ~bad
            if new.any():
                counts[reason.replace("_", " ")] += int(new.sum())
                bad |= new
        old_total, _, old = self.rows.get(str(path), (0, unit, Counter()))
        self.rows[str(path)] = (old_total + total, unit, old + counts)
        return ~bad

    def skip(self, path: Path | str, reason: str, n: int) -> None:
        """Count ``n`` rows (already part of a total) skipped for ``reason``."""
        if n:
            total, unit, old = self.rows.get(str(path), (0, "rows", Counter()))
            self.rows[str(path)] = (total, unit, old + Counter({reason: n}))

    def remark(self, path: Path | str, text: str) -> None:
        self.remarks.append(f"{path}: {text}")

    def lines(self) -> list[str]:
        out = [f"{path}: {sum(c.values())} of {total} {unit} skipped ("
               + ", ".join(f"{n} {reason}" for reason, n in c.most_common()) + ")"
               for path, (total, unit, c) in self.rows.items() if c]
        return out + self.remarks

    def as_meta(self) -> dict[str, dict[str, int]]:
        return {path: dict(c) for path, (_, _, c) in self.rows.items() if c}

    def warn(self, stacklevel: int = 4) -> None:
        """One warning for everything skipped, if anything was."""
        lines = self.lines()
        if lines:
            warnings.warn("; ".join(lines), stacklevel=stacklevel)


@contextmanager
def reading(path: Path | str) -> Iterator[None]:
    """Turn an unexpected failure while reading ``path`` into a TraceError naming it."""
    try:
        yield
    except TraceError:
        raise
    except RecursionError:
        raise TraceError(path, "nested too deeply to be profiler output") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, UnicodeError) as exc:
        log.debug("reading %s failed", path, exc_info=True)
        raise TraceError(path, f"unexpected content ({type(exc).__name__}: {exc}); "
                               "expected torch.profiler / torch_npu output") from None
