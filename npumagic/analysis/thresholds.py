"""Every threshold the checklist and the advice rules use, with its reason, in one place."""

# Step-time changes smaller than this are called noise when the history has no replicates to
# measure run-to-run noise with: drift between runs of the identical cell on a shared machine
# (clocks, caches, neighbours) was measured here at 2-4%. (Here, not in .compare, so that the
# checklist and the alerts import no comparison they do not make.)
MIN_EFFECT = 0.05
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
# A kernel is "tiny" below this duration of its typical (median) call: launch overhead (~5-10 us)
# rivals its work.
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
# Memory churn: allocations of at least this size freed within their step. PyTorch's caching
# allocators serve blocks up to 1 MiB from a small pool (c10/cuda/CUDACachingAllocator.cpp:
# kSmallSize = 1048576; torch_npu's NPUCachingAllocator the same); larger ones come from the large
# pool, whose splitting and freeing fragments reserved memory and, once it runs out, costs a
# cudaMalloc/aclrtMalloc (and a synchronising empty_cache on failure).
CHURN_MIN_BYTES = 2**20
# Memory growth: allocated memory at each step's end rising by at least this much per step (with
# the slope's 95% interval above zero) is a leak. Below it, a GiB takes over 16 000 steps to leak;
# smaller rises are bookkeeping (the profiler's own buffers, Python-side caches).
GROWTH_MIN_BYTES_PER_STEP = 64 * 2**10
# Fewer step ends than this (the first step left out: optimizer states and caches are created in
# it) give no slope worth a verdict.
GROWTH_MIN_STEPS = 3
# Memory comparison: two runs' peaks differ only beyond this share of the reference's peak (and at
# least MEMORY_CHANGE_MIN_BYTES): the caching allocator rounds blocks up (512 B small, 2 MiB large
# segments), so a change below it is the allocator's rounding, not the model's.
MEMORY_CHANGE_SHARE = 0.01
MEMORY_CHANGE_MIN_BYTES = 2 * 2**20
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
# each busy at least WORKER_BUSY_PCT are CPU-bound (decoding, augmenting); workers below WORKER_IDLE_PCT while
# the step waits for data (with a core idle) are waiting on I/O, not computing.
HOST_PINNED_PCT = 90.0
WORKER_BUSY_PCT = 90.0
WORKER_IDLE_PCT = 50.0
# The verdict names a bottleneck only for a finding with at least this share of the step at stake;
# smaller findings are still listed by the advice, but the step is not bound by them.
VERDICT_MIN_IMPACT = 0.05
# Device idle not explained by DataLoader waits must reach this share before host-bound is named.
HOST_BOUND_MIN_UNEXPLAINED = 0.10
# A host operator under a device idle gap that covers more idle time than this per device launch
# it makes is CPU work (preprocessing, decoding), not launch overhead: a kernel launch costs
# ~5-20 us of host time, so 100 us per launch is several times what launching alone can take.
CPU_WORK_PER_LAUNCH_US = 100.0
# Measurement trust: the cell's thread ready to run but waiting for a core (Linux schedstat's run
# delay) for at least this share of the steps means every step time carries that much of other
# processes' load. Where the kernel does not tell, other processes using at least CONTENDED_OTHERS_PCT of one core while the
# whole machine has less than CONTENDED_SPARE_PCT of one core to spare means this process's
# threads waited for a core: its step times carry the neighbours' load (a 1 ms step measured
# 15 ms on a loaded 2-core machine here).
CONTENDED_WAIT_PCT = 10.0
CONTENDED_OTHERS_PCT = 50.0
CONTENDED_SPARE_PCT = 50.0
# Severity labels by the share of step time at stake: msprof-analyze's own bands
# (advisor/analyzer/base_analyzer.py ANALYZER_HIGH_PRIORITY_TIME_RATIO = 0.05,
# ANALYZER_MEDIUM_PRIORITY_TIME_RATIO = 0.03).
SEVERITY_HIGH = 0.05
SEVERITY_MEDIUM = 0.03

# ---- msprof-analyze advisor rules (msprof-analyze 26.2.0, advisor/rules/en/*.yaml and the
# checkers under advisor/analyzer/); each value is the peer's, so findings agree with its report.
# Byte alignment (byte_alignment.yaml min_size, ByteAlignmentChecker._BASE_SIZE): SDMA transfers
# off-chip larger than 512 B whose size is not a multiple of 512 B move at a lower rate.
HCCL_ALIGN_BYTES = 512
HCCL_ALIGN_MIN_BYTES = 512
# Small packets (packet.yaml): more than 20% of SDMA collectives moving under 16 MB, or of RDMA
# collectives under 1 MB, are dominated by per-transfer overhead.
SMALL_SDMA_MB = 16.0
SMALL_RDMA_MB = 1.0
SMALL_PACKET_RATIO = 0.20
# Bandwidth contention (bandwidth_contention.yaml): SDMA below 0.8 x the 18 GB/s baseline while a
# matmul runs at the same time is slowed by the computation competing for HBM.
SDMA_BASELINE_GBPS = 18.0
SDMA_CONTENTION_RATIO = 0.8
# AI_CPU operators (AicpuChecker._MIN_TASK_DURATION): reported when one task takes over 20 us.
AICPU_MIN_US = 20.0
# Operator no-bound (OperatorBoundChecker, config.ini operator_bound_ratio): a task over 20 us
# with no pipe (vec, mac, scalar, mte1-3) above 0.8 uses none of the hardware well.
NO_BOUND_MIN_US = 20.0
NO_BOUND_PIPE_RATIO = 0.8
# AI Core performance (aicore_performance.yaml and AICorePerformanceChecker): cube ops moving at
# least 100 MB, vector op types taking at least 1% of device time; bound thresholds per group.
CUBE_MIN_MB = 100.0
VECTOR_TYPE_SHARE = 0.01
CUBE_MAC_BOUND = 0.8
CUBE_MTE2_BOUND = 0.95
CUBE_INNER_AXIS = 256
VECTOR_TOTAL_BOUND = 0.9
VECTOR_PIPE_BOUND = 0.7
# FlashAttention (aicore_performance.yaml fa_operators): forward bound when MTE2 >= 0.8 or vec >=
# 0.75, backward when MTE2 >= 0.8 or fixpipe >= 0.75; head dim and sequence aligned to 128.
FA_MTE2_BOUND = 0.8
FA_VEC_BOUND = 0.75
FA_FIXPIPE_BOUND = 0.75
FA_INNER_AXIS = 128
# Operator dispatch (constant.py MAX_OP_COMPILE_NUM): 20 or more aclopCompileAndExecute calls mean
# operators are compiled online during training.
OP_COMPILE_MIN = 20
# Fusible sequences (fusible_operator.yaml): 2..10 operators, together over 1% of the step,
# repeated more than 5 times.
FUSIBLE_MIN_LEN = 2
FUSIBLE_MAX_LEN = 10
FUSIBLE_MIN_SHARE = 0.01
FUSIBLE_MIN_COUNT = 5
# SyncBatchNorm (sync_batchnorm.yaml max_syncbn_num): 20 or more slow dispatch and communicate.
SYNCBN_MAX = 20
# Synchronize stream (synchronize.yaml): more than half of node launches directly followed by a
# stream synchronisation means every launch blocks (ASCEND_LAUNCH_BLOCKING=1).
SYNC_CO_OCCURRENCE = 0.5
# GC (gc.yaml gc_threshold): a Python collection of 1 ms or more stalls the step.
GC_MIN_US = 1000.0
# Conjectured GC (conjectured_gc.yaml): a device-free gap over 200 ms with under 1 acl call per
# 10 ms (max_acl_event_num_ratio 0.0001 per us) and acl call time under 1% of the gap.
CONJECTURED_GC_FREE_US = 200_000.0
CONJECTURED_GC_EVENTS_PER_US = 0.0001
CONJECTURED_GC_EVENT_TIME_RATIO = 0.01
# Memory operators (memory.yaml max_total_duration): aclMallocMemInner / aclrtFree(Physical)
# together 10 ms or more leave the device idle while the allocator talks to the driver.
MEMORY_OP_MAX_US = 10_000.0
# Environment (EnvironmentVariableChecker.ENV_SUGGEST_CONDITION): ACLNN_CACHE_LIMIT below 10000.
ACLNN_CACHE_MIN = 10_000

# ---- CUDA expert rules: torch-tb-profiler 0.4's recommendations (torch_tb_profiler/profiler/
# data.py RunProfileData.analyze) and Nsight Systems' expert-system rules.
# DataLoader above 5% of the step (tb-profiler: "high time cost on input data loading").
CUDA_DATALOADER_SHARE = 0.05
# Communication above 10% of the step (tb-profiler: "high time cost on communication").
CUDA_COMM_SHARE = 0.10
# GPU utilisation below 50% (tb-profiler: "GPU ... has low utilization"); also the busy share
# under which a window counts as low-utilisation (Nsight Systems' gpu_time_util rule).
CUDA_GPU_UTIL = 0.50
# Idle GPU gaps: Nsight Systems' gpu_gaps rule reports gaps above a threshold meant for whole
# application captures (hundreds of ms); inside profiled training steps a 500 us gap is already
# dozens of kernel launches, so npumagic reports gaps from 500 us.
CUDA_GAP_US = 500.0
# The profiled span is cut into this many equal windows for the low-utilisation count.
CUDA_UTIL_WINDOWS = 100
# Fusible sequences, continued (fusible_operator.yaml): host-bound when the device works under
# 40% of a sequence's span, MTE-bound when data movement exceeds 80% of its AI Core time.
FUSIBLE_HOST_RATIO = 0.4
FUSIBLE_MTE_RATIO = 0.8

# ---- Impacts of findings whose cost the trace cannot measure (share of the step at stake).
# Small ops: the impact is their device share; launches add only a tie-breaker (5 ns each per step
# over the median step), so at equal device time more launches rank higher. Host dispatch cost is
# the host_bound rule's to measure, not estimated here.
LAUNCH_TIEBREAK_US = 0.005
# Low block dim: a kernel on fewer cores than the chip has could run up to cores/block-dim times
# faster; half its time is taken as recoverable (tiling rarely scales perfectly).
LOW_BLOCK_DIM_RECOVERABLE = 0.5
# Memory near capacity costs no time now but blocks a larger batch and risks OOM: ranked as a
# medium-to-high concern (15%) so it is listed above small findings, below real bottlenecks.
MEMORY_CAPACITY_IMPACT = 0.15
# Fragmentation costs allocator calls and risks OOM; it is listed at the high band's floor.
FRAGMENTATION_IMPACT = 0.05
# Memory growing across steps (a leak) costs no time now but ends in an OOM after a number of
# steps the capacity sets: ranked as memory near capacity is.
MEMORY_GROWTH_IMPACT = MEMORY_CAPACITY_IMPACT

# A finding names the deepest module or region holding at least half of the time it rests on
# (analysis/where.py): below that no single place explains it, and naming the largest leaf (5% of
# a transformer's launch gaps in one of its 60 layers) would send the user to the wrong code.
PLACE_MIN_SHARE = 0.5
