"""Advice rules, one module per family, all registered in :mod:`.registry` (one registry): the
core rules for every backend (:mod:`.core`), the cluster rules of a many-rank job
(:mod:`.cluster`), and the CUDA and NPU families. Thresholds live in :mod:`..thresholds`, each
with its source."""

from __future__ import annotations

from . import cluster, core, cuda, npu_comm, npu_env, npu_host, npu_ops  # noqa: F401  (registration)
from .registry import (REGISTRY, Rule, kernel_metrics, kernel_metrics_once, rule, run_rules,  # noqa: F401
                       share_of_steps, step_wall_us)
