"""The live timeline's legend: the kinds of work its lanes draw, each with the one colour it has
at overview zoom (:data:`~npumagic.render.colors.KIND_COLORS`), so a DataLoader wait or an idle
gap is recognised without hovering."""

from __future__ import annotations

from ..colors import KIND_COLORS
from .lod import DEVICE_GROUPS

# what each kind reads as, in the order the legend shows them (host first, as the lanes are)
KIND_LABELS = {"host_op": "host operator", "dataloader": "DataLoader wait", "sync": "sync",
               "annotation": "annotation", "module": "nn.Module", "kernel": "kernel", "memcpy": "memcpy", "comm": "collective",
               "idle": "idle gap", "critical": "critical path: waiting"}

COLOR_OF = {"module": "python"}  # a module's span is a python_function event
OWN_COLORS = {"critical": "#e377c2"}  # kinds of the timeline's own, in no static figure


def legend(index) -> list[dict]:
    """``[{kind, label, color}]`` of the kinds a :class:`~.lod.TimelineIndex` draws: those of its
    events, and ``idle`` where a device lane has a hole between its spans."""
    present = set(index.drawn_kinds)
    if any(lane.group in DEVICE_GROUPS and len(lane.union) > 1 for lane in index.lanes):
        present.add("idle")
    return [{"kind": kind, "label": label, "color": OWN_COLORS.get(kind) or KIND_COLORS[COLOR_OF.get(kind, kind)]}
            for kind, label in KIND_LABELS.items() if kind in present]
