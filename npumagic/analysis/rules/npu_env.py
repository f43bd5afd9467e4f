"""Ascend environment variables that cost performance, as msprof-analyze's environment checker
reads them: from profiler_metadata.json's ENV_VARIABLES (written by torch_npu) and the run
record's environment snapshot when npumagic captured the run."""

from __future__ import annotations

from ..finding import Finding
from ..run_facts import RunFacts
from .. import thresholds as T
from .registry import rule


def _int(value: str) -> int | None:
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def environment(s, facts: RunFacts) -> dict[str, str]:
    """The run's environment: torch_npu's own record, overlaid by npumagic's snapshot."""
    env = {k: str(v) for k, v in (s.meta.get("environment") or {}).items()}
    env.update({k: str(v) for k, v in facts.environment.items()})
    return env


# variable -> (is it a problem?, what to do, why); conditions are msprof-analyze's
# EnvironmentVariableChecker.ENV_SUGGEST_CONDITION; fixes its environment_variable_info.yaml.
CHECKS = {
    "ACLNN_CACHE_LIMIT": (lambda v: v == "" or (_int(v) or 0) < T.ACLNN_CACHE_MIN,
                          "export ACLNN_CACHE_LIMIT=100000",
                          "the aclnn operator cache holds few entries; host dispatch recompiles evicted ops"),
    "HOST_CACHE_CAPACITY": (lambda v: v == "" or _int(v) == 0, "export HOST_CACHE_CAPACITY=20",
                            "the dynamic-shape execution cache is off (0 is the default)"),
    "PYTORCH_NPU_ALLOC_CONF": (lambda v: "expandable_segments:True" not in v,
                               "export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True",
                               "the caching allocator cannot grow segments, so changing sizes fragment memory"),
    "ASCEND_LAUNCH_BLOCKING": (lambda v: _int(v) == 1, "unset ASCEND_LAUNCH_BLOCKING (or export ASCEND_LAUNCH_BLOCKING=0)",
                               "every operator launch waits for the device: debugging mode, serialises the run"),
    "ASCEND_GLOBAL_LOG_LEVEL": (lambda v: v != "" and _int(v) != 3, "export ASCEND_GLOBAL_LOG_LEVEL=3",
                                "debug/info logging slows every call; 3 (error) is the default"),
    "HCCL_ALGO": (lambda v: v != "", "unset HCCL_ALGO",
                  "a forced collective algorithm overrides HCCL's choice by chip, node count and data size"),
    "HCCL_RDMA_TC": (lambda v: v != "", "check HCCL_RDMA_TC against the switch's DSCP setting (default 132)",
                     "a non-default RDMA traffic class must match the network's QoS configuration"),
    "HCCL_RDMA_SL": (lambda v: v != "", "check HCCL_RDMA_SL against the NIC's PFC priority (default 4)",
                     "an RDMA service level that differs from the PFC priority slows RoCE traffic"),
    "TASK_QUEUE_ENABLE": (lambda v: _int(v) == 0,
                          "export TASK_QUEUE_ENABLE=2 before starting Python (a script; in IPython/Jupyter "
                          "`import torch_npu` sets it to 0 and warns, so profile the step as a script to get the "
                          "pipelined dispatch)",
                          "operators are dispatched without the task queue: the host launches each op in line"),
}


@rule("environment", ("npu",), facts=True)
def environment_variables(s, facts: RunFacts) -> list[Finding]:
    """Environment variables set (or left unset) against performance."""
    env = environment(s, facts)
    bad = []
    for name, (problem, fix, why) in CHECKS.items():
        if name in env and problem(env[name]):
            bad.append({"variable": name, "value": env[name], "fix": fix, "why": why})
    if not bad:
        return []
    listed = ", ".join(f"{b['variable']}={b['value']!r}" if b["value"] else f"{b['variable']} unset" for b in bad)
    return [Finding("host_bound", 0.0, f"{len(bad)} environment variables are not at their fast settings: {listed}",
                    {"variables": bad}, "; ".join(b["fix"] for b in bad), "profiler_metadata.json ENV_VARIABLES")]
