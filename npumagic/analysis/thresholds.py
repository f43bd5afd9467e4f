"""Every threshold the checklist and the advice rules use, with its reason, in one place."""

# Communication not hidden behind compute above this share of the step: HCCL/NCCL tuning guides
# treat ~30% exposed communication as communication-bound.
COMM_BOUND_SHARE = 0.30
# Below this overlapped/communication ratio (with communication above COMM_MIN_SHARE of the step),
# gradients are synchronised after backward instead of during it.
LOW_OVERLAP_RATIO = 0.30
COMM_MIN_SHARE = 0.10
# Waiting on the DataLoader above this share of the step starves the device.
DATALOADER_SHARE = 0.10
# Device idle above this share means the host cannot keep the device fed (on the CPU: the CPU
# runs no torch operator for this share of the step).
HOST_BOUND_IDLE_SHARE = 0.30
# Device idle caused by host-device synchronisations above this share of the step: the host
# waits for the device, then the device waits for the host (the pipeline drains at every sync).
SYNC_SHARE = 0.10
# A kernel is "tiny" below this mean duration: launch overhead (~5-10 us) rivals its work.
TINY_KERNEL_US = 10.0
# Tiny kernels taking above this share of device compute time, launched at least
# SMALL_OP_MIN_PER_STEP times a step, mark a small-op-bound model.
SMALL_OP_SHARE = 0.40
SMALL_OP_MIN_PER_STEP = 200
# Step-time coefficient of variation above this is jitter worth explaining; a step slower than
# JITTER_OUTLIER x the median is an outlier.
JITTER_CV = 0.10
JITTER_OUTLIER = 1.2
# Fewer steps than this give no usable spread: the first active step often carries the
# profiler's own start-up cost, so 3 steps can show 30% "jitter" that is not the model's.
JITTER_MIN_STEPS = 5
# A device this busy with compute is compute-bound: make the math cheaper, not the pipeline.
COMPUTE_BOUND_SHARE = 0.60
# Ascend: cube (MAC) pipeline utilisation of AI Core kernels below this (time-weighted) is low.
AICORE_UTIL = 0.60
# Ascend: format conversions (TransData) above this share of device compute are worth removing.
TRANSDATA_SHARE = 0.10
# Ascend: a kernel taking at least KERNEL_SHARE of compute with fewer blocks than this leaves
# AI Cores idle (910-class chips have 20-32 AI Cores).
LOW_BLOCK_DIM = 8
KERNEL_SHARE = 0.05
# Ascend: memory-bound kernel: the MTE2 (global memory load) pipe busy above this ratio while
# the compute pipe (MAC / vector) is below MEMORY_BOUND_COMPUTE_RATIO.
MEMORY_BOUND_MTE2_RATIO = 0.70
MEMORY_BOUND_COMPUTE_RATIO = 0.20
# Memory: peak allocated above this share of the device's capacity risks OOM and allocator stalls.
MEMORY_NEAR_CAPACITY = 0.90
# Memory: reserved above allocated by this factor (and by at least FRAGMENTATION_MIN_BYTES) is
# fragmentation in the caching allocator.
FRAGMENTATION_RATIO = 1.5
FRAGMENTATION_MIN_BYTES = 512 * 2**20
# Cluster: ranks whose computing, communication (not overlapped) or free time differ (max - min)
# by more than this share of the mean step are reported as slow ranks (and pipeline stages as
# imbalanced); msprof-analyze's slow-rank analyzer uses the same 5% of the mean step.
SLOW_RANK_RATIO = 0.05
# Cluster: a link type whose per-rank bandwidths spread (max - min) by more than this share of
# their mean has a slow link (msprof-analyze's slow-link analyzer: 5%).
SLOW_LINK_RATIO = 0.05
# Expected floor per link type (GB/s): msprof-analyze's bandwidth-contention rule takes 18 GB/s
# as the SDMA baseline and flags below 80% of it; HCCS carries that SDMA traffic within a node.
# Other link types (PCIE, SIO, RDMA) depend on the machine and have no floor here.
EXPECTED_LINK_GBPS = {"SDMA": 0.8 * 18.0, "HCCS": 0.8 * 18.0}
# Host CPU (npumagic's psutil samples, percent of one core): the thread running the step busy at
# least HOST_PINNED_PCT is the bottleneck itself (it cannot dispatch faster); DataLoader workers
# each busy at least WORKER_BUSY_PCT are CPU-bound decoding; workers below WORKER_IDLE_PCT while
# the step waits for data (with a core idle) are waiting on I/O, not computing.
HOST_PINNED_PCT = 90.0
WORKER_BUSY_PCT = 90.0
WORKER_IDLE_PCT = 50.0
# The verdict names a bottleneck only for a finding with at least this share of the step at stake;
# smaller findings are still listed by the advice, but the step is not bound by them.
VERDICT_MIN_IMPACT = 0.05
# Severity labels by the share of step time at stake.
SEVERITY_HIGH = 0.25
SEVERITY_MEDIUM = 0.10
