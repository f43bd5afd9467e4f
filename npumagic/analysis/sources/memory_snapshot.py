"""Reading a caching allocator's memory snapshot: the pickle ``torch.cuda.memory._dump_snapshot`` (and
torch_npu's ``torch_npu.npu.memory._dump_snapshot``) write, read as plain data only.

The snapshot is a dict of ``segments`` (each one cudaMalloc / aclrtMalloc: total_size, its
``blocks`` with size, state and the stack that allocated them) and ``device_traces`` (the
allocator's actions, ``oom`` among them), as torch/cuda/memory.py's ``_snapshot`` documents. The
unpickler builds dicts, lists, tuples, strings and numbers and nothing else: a pickle naming any
class or function is refused, naming the file, before anything in it runs.
"""

from __future__ import annotations

import pickle
from pathlib import Path

from ...errors import TraceError

SNAPSHOT_SUFFIXES = (".pickle", ".pkl")
SIZE_LIMIT = 8 * 2**30  # a snapshot of a busy 80 GB device with deep stacks is a few hundred MB


class _PlainUnpickler(pickle.Unpickler):
    def __init__(self, fh, path: Path) -> None:
        super().__init__(fh)
        self.path = path

    def find_class(self, module: str, name: str):
        raise TraceError(self.path, f"holds a {module}.{name} object; a memory snapshot is plain data (dicts, lists, "
                                    "numbers, strings), so it is refused without being run")

    def persistent_load(self, pid):
        raise TraceError(self.path, "holds a persistent reference; a memory snapshot is plain data, refused")


def load_snapshot(path: str | Path) -> dict:
    path = Path(path)
    try:
        if path.stat().st_size > SIZE_LIMIT:
            raise TraceError(path, f"larger than {SIZE_LIMIT // 2**30} GiB: not read as a memory snapshot")
        with path.open("rb") as fh:
            snapshot = _PlainUnpickler(fh, path).load()
    except TraceError:
        raise
    except OSError as exc:
        raise TraceError(path, f"cannot be read ({exc})") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, MemoryError,
            RecursionError) as exc:
        raise TraceError(path, f"not a readable pickle ({type(exc).__name__}: {exc})") from None
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("segments"), list):
        raise TraceError(path, "not a memory snapshot: expected a dict with a 'segments' list "
                               "(torch.cuda.memory._dump_snapshot's pickle)")
    return snapshot
