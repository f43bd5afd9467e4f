"""Search in the live timeline, answered in the kernel: the events whose name holds a text (or
matches a regular expression), in time order across every lane, so "next" and "previous" can
move the view from one to the next. The browser sends the query and gets the count back, never
the events."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .nested import CRITICAL, REGIONS

QUERY_LIMIT = 500  # characters: a longer query is refused (the browser's text box is untrusted)
NAMES_SHOWN = 5  # matching names listed beside the count


@dataclass(frozen=True)
class Matches:
    """The events matching a query, by start: ns from the index's origin, their lane (an index into
    ``TimelineIndex.lanes``) and row (into ``TimelineIndex.events``); ``names``: the matching names,
    most matches first."""

    query: str
    regex: bool
    starts: np.ndarray
    ends: np.ndarray
    lanes: np.ndarray
    rows: np.ndarray
    names: list[str]

    def __len__(self) -> int:
        return int(self.starts.size)

    def after(self, t_ns: float) -> int:
        """The position of the first match starting at or after ``t_ns`` (the first one if none does)."""
        k = int(np.searchsorted(self.starts, t_ns, side="left"))
        return k if k < len(self) else 0


def matcher(query: str, regex: bool = False):
    """A name -> bool test: a case-insensitive substring, or ``re.search`` of a regex (ValueError
    naming what is wrong with it)."""
    if not isinstance(query, str) or not query:
        raise ValueError(f"a search is a non-empty text, not {query!r:.40}")
    if len(query) > QUERY_LIMIT:
        raise ValueError(f"a search of {len(query)} characters: at most {QUERY_LIMIT}")
    if not regex:
        folded = query.casefold()
        return lambda name: folded in name.casefold()
    try:
        pattern = re.compile(query, re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"{query!r:.60} is no regular expression: {exc}") from None
    return lambda name: pattern.search(name) is not None


def search(index, query: str, regex: bool = False) -> Matches:
    """Every indexed event (host operators, DataLoader waits, syncs, annotations, device work)
    whose name matches ``query`` (:func:`matcher`), sorted by start."""
    test = matcher(query, regex)
    codes = np.flatnonzero([test(str(name)) for name in index.names])
    parts = []
    for k, lane in enumerate(index.lanes):
        if lane.group in (REGIONS, CRITICAL):  # its spans are the host's or device's too: found there, once
            continue
        mine = np.flatnonzero(np.isin(lane.codes, codes)) if codes.size else np.empty(0, np.int64)
        parts.append((lane.starts[mine], lane.ends[mine], np.full(mine.size, k), lane.rows[mine], lane.codes[mine]))
    starts, ends, lanes, rows, found = (np.concatenate(col) if col else np.empty(0, np.int64) for col in zip(*parts))
    order = np.argsort(starts, kind="stable")
    counts = np.bincount(found, minlength=len(index.names)) if found.size else np.zeros(0, np.int64)
    top = [str(index.names[c]) for c in np.argsort(-counts, kind="stable")[:NAMES_SHOWN] if counts[c] > 0]
    return Matches(query, regex, starts[order], ends[order], lanes[order], rows[order], top)
