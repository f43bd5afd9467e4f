"""Advice rules, one module per family, all registered in :mod:`.registry` (one registry): the
core rules for every backend (:mod:`.core`), the cluster rules of a many-rank job
(:mod:`.cluster`), and the CUDA and NPU families. Thresholds live in :mod:`..thresholds`, each
with its source."""

from __future__ import annotations

from importlib import import_module

from .registry import FAMILIES
from .registry import (REGISTRY, Rule, kernel_metrics, kernel_metrics_once, rule, run_rules,  # noqa: F401
                       share_of_steps, step_wall_us)

for _family in FAMILIES:  # each family's rules register as its module is imported
    import_module(f"{__name__}.{_family}")
