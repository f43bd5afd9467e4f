"""Other processes on the accelerator while a run is captured, as the driver's tool tells them
(``nvidia-smi`` for CUDA, ``npu-smi`` for Ascend): a second job on the same device shares its
compute and memory bandwidth, so the run's step times carry its load. Nothing is said where the
tool is absent or does not answer in time (a CPU run, a container without it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

TIMEOUT_S = 5.0
# npu-smi info's process table: "| NPU Chip | Process id | Process name | Process memory(MB) |"
_NPU_ROW = re.compile(r"^\|\s*\d+\s+\d+\s*\|\s*(\d+)\s*\|\s*(\S+)\s*\|\s*(\d+)\s*\|")


def _run(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        return ""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def other_device_processes(backend: str) -> list[dict]:
    """The processes other than this one using the run's accelerator: ``pid``, ``name`` and
    ``memory_mib``; [] on the CPU or where the driver's tool is not at hand."""
    rows: list[tuple[str, str, str]] = []
    if backend in ("cuda", "rocm"):
        text = _run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits"])
        rows = [tuple(part.strip() for part in line.split(",")[:3]) for line in text.splitlines() if line.count(",") >= 2]
    elif backend == "npu":
        rows = [m.groups() for m in map(_NPU_ROW.match, _run(["npu-smi", "info"]).splitlines()) if m]
    own = os.getpid()
    out = []
    for pid, name, memory in rows:
        if pid.isdigit() and int(pid) != own:
            out.append({"pid": int(pid), "name": os.path.basename(name), "memory_mib": float(memory) if
                        memory.replace(".", "", 1).isdigit() else float("nan")})
    return out
