"""torch_npu's offline analysis (``torch_npu.profiler.profiler.analyse``): it parses a capture
whose export failed or was skipped into its ASCEND_PROFILER_OUTPUT. torch_npu is imported here
only, and only when called."""

from __future__ import annotations

from pathlib import Path

from ..errors import NpumagicError


def torch_npu_analyse(path: Path, command: str) -> None:
    """Run ``analyse(path)`` (one ``*_ascend_pt`` or a folder of them; torch_npu 2.14.0
    profiler/profiler.py:389, ``analyse(profiler_path, max_process_number, export_type)``).
    Where torch_npu does not import, NpumagicError says to run ``command`` where it does."""
    try:
        from torch_npu.profiler.profiler import analyse
    except Exception as exc:  # ImportError, or torch_npu failing to find CANN as it imports
        raise NpumagicError(f"{path}: torch_npu does not import here ({type(exc).__name__}: {exc}); on a machine "
                            f"with torch_npu and CANN run {command}") from None
    analyse(str(path))
