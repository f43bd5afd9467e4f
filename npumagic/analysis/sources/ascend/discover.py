"""Where each rank of a torch_npu capture lies and what it says of itself.

The ``*_ascend_pt`` rank directories at or below a path (those torch_npu parsed, and those
holding only its raw ``PROF_*`` data, with the command that parses them), each rank's id and
settings (``profiler_info*.json``), the export type it asked for, and the chip's core counts
from the raw data kept beside it.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any, Callable, TypeVar

from ....errors import TraceError
from .._columns import small_int
from .._separate import separate_runs
from .files import read_json


OUTPUT = "ASCEND_PROFILER_OUTPUT"
T = TypeVar("T")


# torch_npu's raw data of a rank it never parsed: PROF_<id>_<time>_<tag>/ (CANN) beside FRAMEWORK/
# (torch_npu 2.14.0 profiler/analysis/prof_common_func/_path_manager.py:21-30, get_cann_path)
RAW_DIR = re.compile(r"^PROF_\d+_\d+_[0-9a-zA-Z]+")


def raw_only(path: Path) -> list[Path]:
    """The ``*_ascend_pt`` directories at or directly below ``path`` that hold torch_npu's raw
    data (``PROF_*``) but no ``ASCEND_PROFILER_OUTPUT``: captures whose export failed or was skipped."""
    path = Path(path)
    if not path.is_dir():
        return []
    candidates = [path] if path.name.endswith("_ascend_pt") else sorted(
        (p for p in path.iterdir() if p.is_dir() and p.name.endswith("_ascend_pt")), key=_natural)
    return [p for p in candidates if not (p / OUTPUT).is_dir()
            and any(c.is_dir() and RAW_DIR.match(c.name) for c in p.iterdir())]


def offline_parse_command(path: Path) -> str:
    """The command that parses ``path``'s raw torch_npu data where torch_npu is installed: its
    offline analysis, ``analyse(profiler_path, max_process_number, export_type)``, which takes
    one ``*_ascend_pt`` or a folder of them (torch_npu 2.14.0 profiler/profiler.py:389)."""
    return f"python -c \"from torch_npu.profiler.profiler import analyse; analyse({str(path)!r})\""


def never_parsed(paths: list[Path], where: Path) -> str:
    """What to say of ranks that hold only raw data, with the command that parses them."""
    import importlib.util

    names = ", ".join(p.name for p in paths[:5]) + (" ..." if len(paths) > 5 else "")
    how = (" (torch_npu imports here: npumagic.parse_raw runs it)"
           if importlib.util.find_spec("torch_npu") is not None else " on a machine with torch_npu and CANN")
    return (f"{names} {'holds' if len(paths) == 1 else 'hold'} only torch_npu's raw data (PROF_*), never parsed "
            f"(the export failed or was skipped): parse it with torch_npu's offline analysis{how}, "
            f"{offline_parse_command(where)}, then read {where} again")


def rank_dirs(path: Path) -> list[Path]:
    """The torch_npu rank directories at or directly below ``path`` (empty when none), in natural
    order (rank2 before rank10: the order unlabelled ranks are numbered in)."""
    if (path / OUTPUT).is_dir():
        return [path]
    found = [p for p in sorted(path.iterdir(), key=_natural) if p.is_dir() and (p / OUTPUT).is_dir()]
    empty = [p.name for p in sorted(path.iterdir(), key=_natural)
             if p.is_dir() and p.name.endswith("_ascend_pt") and not (p / OUTPUT).is_dir()]
    raw = raw_only(path) if found else []
    if raw:
        warnings.warn(f"{path}: {never_parsed(raw, path)}; until then they are left out")
        empty = [name for name in empty if name not in {p.name for p in raw}]
    if found and empty:  # torch_npu writes ASCEND_PROFILER_OUTPUT when it parses a rank: not done there
        warnings.warn(f"{path}: {', '.join(empty[:5])}{' ...' if len(empty) > 5 else ''} "
                      f"{'has' if len(empty) == 1 else 'have'} no {OUTPUT} (not parsed by torch_npu?) and "
                      f"{'is' if len(empty) == 1 else 'are'} left out")
    if not found:
        found = [p.parent for p in sorted(path.glob(f"*/*/{OUTPUT}"), key=lambda p: _natural(p.parent)) if p.is_dir()]
    return found


def _natural(path: Path) -> list:
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", str(path))]


def read_each_rank(paths: list[Path], read_rank: Callable[[Path], T], progress=None) -> tuple[list[T], dict[str, str]]:
    """``read_rank`` of each rank directory, in order, and the ranks it could not read (TraceError),
    left out with a warning: ``{directory: error}``. A job with no readable rank raises TraceError
    naming it (a single rank: its own error)."""
    read, unreadable = [], {}
    for rank_dir in paths:
        try:
            read.append(read_rank(rank_dir))
        except TraceError as exc:
            if len(paths) == 1:
                raise
            unreadable[str(rank_dir)] = str(exc)
            warnings.warn(f"{exc} (this rank is left out; the others are analysed)", stacklevel=4)
        if progress is not None:
            progress.update(1)
    if not read:
        raise no_rank_read(paths, unreadable)
    return read, unreadable


def no_rank_read(paths: list[Path], unreadable: dict[str, str]) -> TraceError:
    return TraceError(paths[0].parent, "no rank could be read: " + "; ".join(unreadable.values()))


def rank_numbers(paths: list[Path], ids: list[int]) -> list[int]:
    """The ranks' own ids; where ids repeat (unlabelled ranks), their directories' places
    instead (0 to N-1, in the natural name order of ``paths``), said in a warning."""
    if len(set(ids)) == len(ids):
        return list(ids)
    _one_run(paths, ids)
    repeated = sorted({r for r in ids if ids.count(r) > 1})
    warnings.warn(f"{paths[0].parent}: rank ids {repeated} appear in more than one rank's profiler_info: every rank is "
                  f"numbered by its directory's place instead (0 to {len(ids) - 1}, in natural name order)",
                  stacklevel=4)
    return list(range(len(ids)))


def _one_run(paths: list[Path], ids: list[int]) -> None:
    """TraceError where one rank id is recorded by ranks in different folders (level0/rank0 and
    level1/rank0: separate runs, or one job exported twice): put together they would be a job of
    neither. Repeated ids within one folder are unlabelled ranks of one job, numbered by place."""
    seen: dict[int, Path] = {}
    for path, rank in zip(paths, ids):
        other = seen.setdefault(rank, path)
        if other.parent != path.parent:
            raise separate_runs(other, path, "rank directories", rank, "", "a directory per rank")


def profiler_info(rank_dir: Path) -> tuple[Path, dict[str, Any]]:
    for path in sorted(rank_dir.glob("profiler_info*.json")):
        return path, read_json(path)
    return rank_dir / "profiler_info.json", {}


def rank_id(path: Path, value: Any, rank_dir: Path) -> int:
    """profiler_info's rank_id; -1 (torch_npu's "not distributed") or absent: from the folder name."""
    if value is None or value in (-1, "-1"):
        return _rank_from_name(rank_dir)
    return small_int(value, path, "rank_id")


def _rank_from_name(rank_dir: Path) -> int:
    m = re.search(r"rank(\d+)", rank_dir.name)
    return int(m.group(1)) if m else 0


def export_type(info: dict[str, Any]) -> str:
    config = info.get("config", {})
    experimental = config.get("experimental_config", {}) if isinstance(config, dict) else {}
    kind = experimental.get("export_type", "") if isinstance(experimental, dict) else ""
    kind = kind[0] if isinstance(kind, list) and kind else kind
    return str(kind).lower()


def device_info(rank_dir: Path) -> dict[str, Any]:
    """The chip's core counts and rated AI Core clock from CANN's ``PROF_*/device_*/info.json.N``
    (``DeviceInfo``: ai_core_num, aiv_num, aic_frequency), where the raw data was kept."""
    for path in sorted(rank_dir.glob("PROF_*/device_*/info.json.*")):
        if path.name.endswith(".done"):
            continue
        for info in read_json(path).get("DeviceInfo") or []:
            if isinstance(info, dict) and info.get("ai_core_num"):
                return {k: info[k] for k in ("ai_core_num", "aiv_num", "aic_frequency") if k in info}
    return {}
