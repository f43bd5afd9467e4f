"""Stable colours: the same kernel gets the same colour in every run and every figure."""

from __future__ import annotations

import zlib

from matplotlib import colormaps

# tab20 without its two greys: grey means "not a top kernel"
_PALETTE = [colormaps["tab20"](i) for i in range(20) if i not in (14, 15)]
OTHER = (0.75, 0.75, 0.75, 1.0)
KIND_COLORS = {"kernel": "#1f77b4", "comm": "#d62728", "memcpy": "#9467bd", "host_op": "#2ca02c",
               "dataloader": "#ff7f0e", "sync": "#8c564b", "runtime": "#7f7f7f", "python": "#bcbd22",
               "annotation": "#17becf"}
BREAKDOWN_COLORS = {"computing_us": "#1f77b4", "comm_not_overlapped_us": "#d62728", "idle_us": "#c7c7c7",
                    "dataloader_us": "#ff7f0e"}


def kernel_color(name: str):
    """A colour chosen by a stable hash of the kernel name (not by its rank in this run)."""
    return _PALETTE[zlib.crc32(name.encode("utf-8", "replace")) % len(_PALETTE)]
