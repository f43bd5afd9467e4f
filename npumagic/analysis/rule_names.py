"""Every advice rule's id and family, spelled out so that listing the rules (``npumagic rules``)
imports none of them: each family's module imports pandas to register its rules.
``tests/analysis/test_rule_names.py`` checks this list against the registry."""

from __future__ import annotations

# (rule id, family), in the order the registry holds them once :mod:`.rules` is imported
RULES: tuple[tuple[str, str], ...] = (
    *((r, "npu_ops") for r in ("dynamic_shape", "aicpu", "operator_no_bound", "block_dim", "aicore_performance",
                               "op_dispatch")),
    *((r, "core") for r in ("communication", "dataloader", "host_bound", "sync", "small_ops", "npu_compute", "jitter",
                            "frequency")),
    *((r, "memory") for r in ("memory", "memory_growth", "memory_churn")),
    ("cluster", "cluster"),
    *((r, "cuda") for r in ("cuda_dataloader", "cuda_communication", "gpu_utilization", "tensor_cores",
                            "data_parallel", "pageable_memcpy", "sync_memcpy", "sync_apis", "gpu_gaps")),
    *((r, "npu_comm") for r in ("byte_alignment", "small_packets", "bandwidth_contention")),
    ("environment", "npu_env"),
    *((r, "npu_host") for r in ("affinity_api", "fusible_operators", "syncbn", "synchronize_stream", "gc",
                                "conjectured_gc", "memory_operators")),
)
