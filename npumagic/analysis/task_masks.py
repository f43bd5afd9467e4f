"""Masks over the kernel metrics (:data:`~npumagic.analysis.schema.KERNEL_METRIC_COLUMNS`) that a
rule flags and a finding's place weighs alike (:mod:`.rules.core`, :mod:`.where`)."""

from __future__ import annotations

import pandas as pd

from . import thresholds as T


def memory_bound(d: pd.DataFrame) -> pd.Series:
    """The rows whose MTE2 load pipe is busy and compute pipe idle (memory-bound kernels)."""
    cube = ((d["core"] == "AI_CORE") & (d["aic_mte2_ratio"] > T.MEMORY_BOUND_MTE2_RATIO)
            & (d["aic_mac_ratio"] < T.MEMORY_BOUND_COMPUTE_RATIO))
    vector = ((d["core"] == "AI_VECTOR_CORE") & (d["aiv_mte2_ratio"] > T.MEMORY_BOUND_MTE2_RATIO)
              & (d["aiv_vec_ratio"] < T.MEMORY_BOUND_COMPUTE_RATIO))
    return cube | vector
