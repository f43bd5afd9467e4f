"""The DataLoader settings a captured cell actually used: while a capture runs, iterating any
``torch.utils.data.DataLoader`` records its settings, so a comparison can say "num_workers
0 -> 4" rather than only that the cell's text changed."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

SETTINGS = ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "drop_last")


def describe(loader) -> dict[str, object]:
    """The performance-relevant settings of one DataLoader, plus its dataset's class."""
    out = {name: getattr(loader, name, None) for name in SETTINGS}
    out["dataset"] = type(getattr(loader, "dataset", None)).__name__
    return out


@contextmanager
def recording(DataLoader=None) -> Iterator[list[dict[str, object]]]:
    """Record the settings of each distinct DataLoader iterated inside the block (``DataLoader``:
    the class to watch, for a caller that has it while torch.utils.data is still importing)."""
    if DataLoader is None:
        from torch.utils.data import DataLoader

    seen: list[dict[str, object]] = []
    original = DataLoader.__iter__

    def __iter__(self):
        settings = describe(self)
        if settings not in seen:
            seen.append(settings)
        return original(self)

    DataLoader.__iter__ = __iter__
    try:
        yield seen
    finally:
        DataLoader.__iter__ = original
