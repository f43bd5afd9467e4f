"""The notebook's own memory ledger: what the kernel's namespace keeps alive on each device.

Each user variable that is a tensor, a module (its parameters, their gradients, its buffers), an
optimizer (its states) or a list, tuple or dict of those (one level down, as a list of losses or
a dict of batches is kept), with the bytes of the storages it holds on each device. A storage held
by two variables (a model and its optimizer share the parameters) counts once, under the first.
A tensor that carries an autograd graph keeps the tensors the graph saved alive until a backward
frees them (never, with retain_graph=True), which no storage here shows: it is flagged. Each variable is named with the last input cell that assigns
it (``In[n]``), found in the kernel's input history.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterator

LEDGER_COLUMNS = ["variable", "kind", "device", "bytes", "tensors", "graph", "cell", "run"]
PROFILE_CELL = re.compile(r"^\s*(?:\w+\s*=\s*)?%%npuprofile\b[^\n]*\n", re.MULTILINE)


@dataclass
class _Held:
    kind: str
    by_device: dict[str, int] = field(default_factory=dict)
    tensors: int = 0
    graph: bool = False


def ledger(namespace: dict[str, Any], hidden: set[str] | frozenset = frozenset(), inputs: list[str] | None = None,
           runs: dict[str, str] | None = None):
    """The ledger of ``namespace`` as a DataFrame (:data:`LEDGER_COLUMNS`, one row per variable and
    device, largest first); ``hidden``: names the shell put there; ``inputs``: the kernel's raw
    input cells; ``runs``: the profiled runs' cell bodies -> run name (a variable assigned in a
    profiled cell is named with its run)."""
    import pandas as pd

    torch = _torch()
    seen: set[tuple[str, int]] = set()
    rows = []
    for name, value in list(namespace.items()):
        if name.startswith("_") or name in hidden or torch is None:
            continue
        held = _holdings(torch, value, seen)
        if held is None:
            continue
        cell = _cell(name, inputs or [])
        run = _run(inputs[cell], runs or {}) if cell is not None else None
        for device, size in held.by_device.items():
            rows.append((name, held.kind, device, size, held.tensors, held.graph, cell, run))
        if not held.by_device:  # all its storages counted under an earlier variable
            rows.append((name, held.kind, "", 0, held.tensors, held.graph, cell, run))
    frame = pd.DataFrame(rows, columns=LEDGER_COLUMNS).astype({"cell": "Int64"})  # a cell number, or <NA>
    return frame.sort_values("bytes", ascending=False, kind="stable").reset_index(drop=True)


def _torch():
    import sys

    return sys.modules.get("torch")  # a kernel that never imported torch keeps no tensors


def _holdings(torch, value: Any, seen: set) -> _Held | None:
    kind, tensors = _kind_and_tensors(torch, value)
    if kind is None:
        return None
    held = _Held(kind)
    for t in tensors:
        held.tensors += 1
        held.graph |= bool(getattr(t, "grad_fn", None) is not None)
        try:
            storage = t.untyped_storage()
            key = (str(t.device), storage.data_ptr())
            size = storage.nbytes()
        except (RuntimeError, NotImplementedError):  # meta, sparse or other storage-less tensors
            continue
        if key in seen or size == 0:
            continue
        seen.add(key)
        held.by_device[str(t.device)] = held.by_device.get(str(t.device), 0) + size
    return held


def _kind_and_tensors(torch, value: Any) -> tuple[str | None, list]:
    if isinstance(value, torch.Tensor):
        return "tensor", [value]
    if isinstance(value, torch.nn.Module):
        params = list(value.parameters())
        return "module", params + [p.grad for p in params if p.grad is not None] + list(value.buffers())
    if isinstance(value, torch.optim.Optimizer):  # its parameters too: they outlive a deleted model through it
        params = [p for group in value.param_groups for p in group.get("params", ())]
        states = [v for state in value.state.values() for v in _tensors_in(torch, state)]
        return "optimizer", params + [p.grad for p in params if p.grad is not None] + states
    if isinstance(value, (list, tuple, dict)):
        items = value.values() if isinstance(value, dict) else value
        found = [t for item in list(items)[:100_000] for t in _tensors_in(torch, item)]
        return (f"{type(value).__name__} of tensors", found) if found else (None, [])
    return None, []


def _tensors_in(torch, value: Any) -> Iterator:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        yield from (v for v in value.values() if isinstance(v, torch.Tensor))
    elif isinstance(value, (list, tuple)):
        yield from (v for v in value if isinstance(v, torch.Tensor))


def _cell(name: str, inputs: list[str]) -> int | None:
    """The last input cell that assigns ``name`` (``name = ...``, ``a, name = ...``, ``name +=``)."""
    pattern = re.compile(rf"^[ \t]*(?:[\w.\[\]]+[ \t]*,[ \t]*)*{re.escape(name)}[ \t]*(?:,[^=\n]*)?(?:[-+*/]?=)(?!=)",
                         re.MULTILINE)
    for number in range(len(inputs) - 1, 0, -1):
        if isinstance(inputs[number], str) and pattern.search(inputs[number]):
            return number
    return None


def _run(cell: str, runs: dict[str, str]) -> str | None:
    """The run profiled by ``cell`` (a ``%%npuprofile`` cell whose body a run of the history keeps)."""
    head = PROFILE_CELL.match(cell)
    return runs.get(cell[head.end():].strip()) if head else None
