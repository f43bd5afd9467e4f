"""Stable colours: the same kernel gets the same colour in every run and every figure, and no two
entries of one legend look alike."""

from __future__ import annotations

import zlib

from matplotlib import colormaps
from matplotlib.colors import to_rgb

# tab20, tab20b and tab20c without their greys: grey means "not a top kernel"
_PALETTE = ([colormaps["tab20"](i) for i in range(20) if i not in (14, 15)]
            + [colormaps["tab20b"](i) for i in range(20)] + [colormaps["tab20c"](i) for i in range(16)])
OTHER = (0.75, 0.75, 0.75, 1.0)
KIND_COLORS = {"kernel": "#1f77b4", "comm": "#d62728", "memcpy": "#9467bd", "host_op": "#2ca02c",
               "dataloader": "#ff7f0e", "sync": "#8c564b", "runtime": "#7f7f7f", "python": "#bcbd22",
               "annotation": "#17becf", "idle": "#ffd92f"}  # idle: device gaps, yellow so they stand out
BREAKDOWN_COLORS = {"computing_us": "#1f77b4", "comm_not_overlapped_us": "#d62728", "idle_us": "#c7c7c7",
                    "dataloader_us": "#ff7f0e"}
# Two colours closer than this (RGB distance, 0..1.73) read as the same one in a legend.
MIN_DISTANCE = 0.2


def kernel_color(name: str):
    """A kernel's preferred colour, chosen by a stable hash of its name (not by its rank in this run)."""
    return _PALETTE[_index(name)]


def _index(name: str) -> int:
    return zlib.crc32(name.encode("utf-8", "replace")) % len(_PALETTE)


def color_distance(a, b) -> float:
    return sum((x - y) ** 2 for x, y in zip(to_rgb(a), to_rgb(b))) ** 0.5


def kernel_colors(names, avoid=tuple(KIND_COLORS.values()) + (OTHER,)) -> dict[str, tuple]:
    """Colours for ``names`` (most important first): each its preferred colour unless that is
    too close to a colour already used (``avoid``: the lane kinds, grey), then the next one in
    the palette that is not. The same list of names always gets the same colours."""
    used = list(avoid)
    out = {}
    for name in names:
        start = _index(name)
        order = [_PALETTE[(start + step) % len(_PALETTE)] for step in range(len(_PALETTE))]
        spread = [min(color_distance(c, u) for u in used) for c in order]
        # the first far enough from every colour in use, else the farthest
        color = next((c for c, d in zip(order, spread) if d >= MIN_DISTANCE), order[spread.index(max(spread))])
        out[name] = color
        used.append(color)
    return out
