"""Collective communication of one rank: one row per collective type with its wait, transit
size and bandwidth over the link that carried it."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd


COMM_COLUMNS = ["op", "count", "elapsed_us", "wait_us", "wait_ratio", "sync_ratio", "transit_mb", "bandwidth_gbps", "link"]


BANDWIDTH_COLUMNS = ["rank", "link_type", "transit_mb", "transit_ms", "bandwidth_gbps"]


LINK_COLUMNS = ["rank", "op", "group", "link_type", "transit_mb", "transit_ms", "bandwidth_gbps"]


# Device kernels that communicate, by name: the one rule of every reader (Kineto, torch_npu's text
# and db exports), whatever core or task type the kernel ran on. NCCL/RCCL, DeepEP's dispatch/combine,
# NVSHMEM, all-to-all (MoE token exchange), vLLM/TensorRT-LLM custom all-reduce; on torch_npu HCCL's
# own AIV kernels (aiv_all_reduce_*, aiv_all_gather*, ..., and the hcom_* tasks of an AIV-mode
# collective, all on AI_VECTOR_CORE / MIX_AIV), its superkernel collectives (sk_allreduce_mesh_*),
# LCCL's kernel_aivec (msprof-analyze counts it as LCCL time, apart from computing) and the MC2 MoE
# token exchange (MoeDistributeDispatch / MoeDistributeCombine and their V2/A2/Setup variants).
COMM_KERNEL = re.compile(
    r"nccl|rccl|deep_?ep|nvshmem|all_?to_?all|cross_device_reduce|custom_?all_?reduce|allreduce_?fusion|"
    r"one_?shot_?all_?reduce|two_?shot_?all_?reduce|multimem|moe_?(?:distribute_?)?(?:dispatch|combine)|"
    r"^hcom_|^aiv_(?:all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|reduce|scatter|gather|sync|"
    r"send|recv)|^sk_(?:all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast)|^kernel_aivec$",
    re.IGNORECASE)
# A matmul fused with its collective (MC2 on torch_npu: MatmulAllReduce, AllGatherMatmul,
# MatmulReduceScatter and their V2/AddRmsNorm/Grouped/AlltoAll variants; Flux-style kernels on CUDA)
# counts as computing: msprof-analyze keeps MC2 kernels in Computing and splits them only inside it
# (compare_tools: compare_config.ini MC2_KERNEL, ProfilingInfo.cube_time includes all_mc2_time,
# calculate_other_time subtracts it from compute_time), and HTA calls every non-NCCL kernel computation.
_MATMUL = re.compile(r"mat_?mul|gemm", re.IGNORECASE)
_COLLECTIVE_PART = re.compile(r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all", re.IGNORECASE)


def is_comm_name(name: str) -> bool:
    """Whether a device kernel named ``name`` communicates: :data:`COMM_KERNEL`, and no matmul
    fused with its collective (MC2)."""
    return bool(COMM_KERNEL.search(name)) and not (_MATMUL.search(name) and _COLLECTIVE_PART.search(name))


def is_comm_kernel(names: pd.Series) -> np.ndarray:
    """:func:`is_comm_name` of each of ``names``, judged once per distinct name."""
    codes, distinct = pd.factorize(pd.Series(names, dtype=object).astype(str))
    return np.append(np.fromiter(map(is_comm_name, distinct), bool, len(distinct)), False)[codes]


_NCCL_OP = re.compile(r"(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|AllToAll|SendRecv|Send|Recv)", re.I)


_HCCL_OP = re.compile(r"hcom_([A-Za-z]+)")
_PROCESS_GROUP_OP = re.compile(r"^(?:gloo|nccl|hccl|mpi|ucc|xccl):([a-z_]+)$")  # a c10d record_function: gloo:all_reduce


def collective_name(name: str) -> str:
    """``hcom_allReduce__586_0_1`` -> ``allReduce``; ``ncclDevKernel_AllReduce_Sum_f32`` -> ``AllReduce``;
    ``gloo:all_reduce`` -> ``all_reduce``."""
    m = _PROCESS_GROUP_OP.match(name) or _HCCL_OP.search(name) or _NCCL_OP.search(name)
    return m.group(1) if m else name


def comm_table(comm: pd.DataFrame, ev: pd.DataFrame, links: pd.DataFrame | None = None) -> pd.DataFrame:
    if comm.empty:  # derive from collective kernels (CUDA/NCCL)
        kernels = ev[ev["kind"] == "comm"]
        if kernels.empty:
            return pd.DataFrame(columns=COMM_COLUMNS)
        comm = pd.DataFrame({"op": kernels["name"].astype(str), "elapsed_us": kernels["dur_ns"] / 1000.0})
        for c in ("wait_us", "sync_us", "transit_mb", "bandwidth_gbps"):
            comm[c] = np.nan
        comm["link"] = ""
    frame = comm.assign(op=comm["op"].astype(str).map(collective_name), link=comm["link"].astype(str))
    g = frame.groupby("op", sort=False)
    table = g.agg(count=("elapsed_us", "count"), elapsed_us=("elapsed_us", "sum"), wait_us=("wait_us", "sum"),
                  sync_us=("sync_us", "sum"), transit_mb=("transit_mb", "sum"),
                  link=("link", _most_common)).reset_index()
    table["wait_ratio"] = table["wait_us"] / table["elapsed_us"]
    table["sync_ratio"] = table["sync_us"] / table["elapsed_us"]
    # Bandwidth over each op's main link, from that link's own transit time (the op-level
    # "Transit Time" is a union on the main stream and understates it several-fold).
    table["bandwidth_gbps"] = np.nan
    if links is not None and len(links):
        own = links.assign(op=links["op"].astype(str).map(collective_name), link_type=links["link_type"].astype(str))
        own = own.groupby(["op", "link_type"], observed=True)[["transit_mb", "transit_ms"]].sum()
        key = pd.MultiIndex.from_arrays([table["op"], table["link"].astype(str)])
        mb, ms = own["transit_mb"].reindex(key).to_numpy(), own["transit_ms"].reindex(key).to_numpy()
        table["bandwidth_gbps"] = np.divide(mb, ms, out=np.full(len(table), np.nan), where=ms > 0)
    return table.sort_values("elapsed_us", ascending=False, kind="stable").reset_index(drop=True)[COMM_COLUMNS]


def _most_common(values: pd.Series) -> str:
    """The value most rows hold ("" where none holds one: pandas 3's ``astype(str)`` keeps a
    missing link missing, and ``mode`` leaves it out)."""
    common = values.mode()
    return str(common.iat[0]) if len(common) else ""


def _ratio(mb, ms) -> np.ndarray:
    mb, ms = np.asarray(mb, dtype=float), np.asarray(ms, dtype=float)
    return np.divide(mb, ms, out=np.full(mb.shape, np.nan), where=ms > 0)


def link_bandwidth(links: pd.DataFrame) -> pd.DataFrame:
    """Bandwidth of each rank's links by type over the whole capture: summed transit size over
    summed transit time (GB/s), as msprof-analyze's slow-link analysis computes it.

    Parameters
    ----------
    links : rows of ``Summary.links`` (rank, link_type, transit_mb, transit_ms).

    Returns
    -------
    DataFrame with :data:`BANDWIDTH_COLUMNS`, one row per (rank, link_type).
    """
    if links is None or links.empty:
        return pd.DataFrame(columns=BANDWIDTH_COLUMNS)
    frame = links.assign(link_type=links["link_type"].astype(str))
    table = frame.groupby(["rank", "link_type"], as_index=False, observed=True)[["transit_mb", "transit_ms"]].sum()
    table["bandwidth_gbps"] = _ratio(table["transit_mb"], table["transit_ms"])
    return table[BANDWIDTH_COLUMNS]


def communication_matrix(matrix: pd.DataFrame, local: bool = False) -> pd.DataFrame:
    """Source rank x destination rank bandwidth (GB/s) over every collective of the capture.

    Parameters
    ----------
    matrix : rows of ``Summary.matrix`` (src_rank, dst_rank, link_type, transit_mb, transit_ms).
    local : keep the on-chip copies of a rank to itself (the diagonal, hundreds of GB/s), which
        would otherwise set the colour scale of a heatmap.

    Returns
    -------
    DataFrame indexed by ``src_rank``, one column per ``dst_rank``; NaN where no transfer was
    recorded (each rank's profile records what it sent).
    """
    if matrix is None or matrix.empty:
        return pd.DataFrame(dtype=float)
    rows = matrix if local else matrix[(matrix["link_type"].astype(str) != "LOCAL")
                                       & (matrix["src_rank"] != matrix["dst_rank"])]
    pairs = rows.groupby(["src_rank", "dst_rank"])[["transit_mb", "transit_ms"]].sum()
    pairs["bandwidth_gbps"] = _ratio(pairs["transit_mb"], pairs["transit_ms"])
    table = pairs["bandwidth_gbps"].unstack("dst_rank")
    table.columns.name, table.index.name = "dst_rank", "src_rank"
    return table
