"""Captures torch_npu never parsed (``*_ascend_pt`` holding only the raw ``PROF_*`` data):
found by the reader, parsed by torch_npu's own offline analysis where torch_npu imports."""

from __future__ import annotations

from pathlib import Path

from .analysis.sources.ascend.discover import never_parsed, offline_parse_command, raw_only
from .capture.offline import torch_npu_analyse
from .errors import NpumagicError


def parse_raw(path: str | Path) -> list[Path]:
    """Parse the never-parsed torch_npu ranks at or directly below ``path`` with torch_npu's
    offline analysis, so ``npumagic.analyze(path)`` reads them; return them (empty: none).

    Raises
    ------
    NpumagicError : torch_npu does not import here (naming the command to run where it does),
        or its analysis left a rank unparsed.
    """
    path = Path(path)
    ranks = raw_only(path)
    if ranks:
        torch_npu_analyse(path, offline_parse_command(path))
        left = raw_only(path)
        if left:
            raise NpumagicError(f"{path}: torch_npu's offline analysis ran, but {never_parsed(left, path)}")
    return ranks
