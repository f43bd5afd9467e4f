"""Cluster views and findings on folders of ranks, checked against msprof-analyze's cluster
analysis of the same jobs (``msprof-analyze cluster -m all`` / ``advisor all``, run by hand on the
shared samples; its figures are quoted below) and the vendor's own matrix files."""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings

import pandas as pd
import pytest

import npumagic
from npumagic.analysis import cluster, collectives
from npumagic.analysis.ranks import parallel_indices

from ..conftest import ASCEND, need, sampled, shared_summary


def _job(path):
    """A shared job's Summary (read once per test process), or a changed copy's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return shared_summary(path) if path.is_relative_to(ASCEND) else npumagic.analyze(need(path))


def _cluster_findings(summary, rule):
    return [f for f in npumagic.advise(summary) if f.evidence.get("rule") == rule]


def test_level0_names_the_communication_gap_between_the_ranks():
    # msprof-analyze cluster_step_trace_time.csv: Communication(Not Overlapped) 81515.607 vs 64616.114 us
    found = _cluster_findings(_job(ASCEND / "level0"), "slow_rank")
    assert len(found) == 1
    f = found[0]
    assert f.evidence["high_rank"] == 0 and f.evidence["low_rank"] == 1
    assert f.evidence["gap_ms"] == pytest.approx(81.515607 - 64.616114, rel=0.01)
    assert f.title.startswith("slow rank: rank 0 spends 16.90 ms more per step in communication than rank 1")
    # the step it is measured against is msprof-analyze's, and the title says what that is
    assert "of the 108.43 ms mean step of computing, communication not overlapped and free time)" in f.title
    assert f.category == "communication"


@pytest.mark.parametrize("level", sampled(["level1", "db/level1", "level2"], keep=2))
def test_ranks_that_agree_within_5_percent_name_no_slow_rank(level):
    # msprof-analyze advisor on level1/level2: "There is no slow rank issues"
    summary = _job(ASCEND / level)
    assert len(summary.ranks) == 2
    assert _cluster_findings(summary, "slow_rank") == []
    assert not any("slowest rank" in f.where for f in npumagic.advise(summary))


def test_a_single_rank_has_no_cluster_findings():
    summary = _job(ASCEND / "level0" / "rank0_ascend_pt")
    assert cluster.findings(summary) == []


def _ranks(**columns):
    frame = pd.DataFrame(columns)
    for c in ("computing_us", "comm_not_overlapped_us", "free_us"):
        frame[c] = frame.get(c, 100_000.0)
    frame["stage"] = frame.get("stage", -1)
    return frame


@pytest.mark.parametrize("gap, found", [(15_300.0, 0), (15_500.0, 1)])
def test_the_slow_rank_threshold_is_5_percent_of_the_mean_step(gap, found):
    # mean step = 300 ms + gap / 2; 5% of it is crossed at a gap of 15.38 ms (msprof-analyze's rule)
    ranks = _ranks(rank=[0, 1], computing_us=[100_000.0, 100_000.0 + gap])
    assert len(cluster.slow_ranks(ranks)) == found


def test_stage_imbalance_names_the_heavy_stage():
    ranks = _ranks(rank=[0, 1, 2, 3], stage=[0, 0, 1, 1], computing_us=[100_000.0, 100_500.0, 130_000.0, 130_200.0])
    found = cluster.stage_imbalance(ranks)
    assert len(found) == 1
    assert found[0].evidence["high_stage"] == 1 and found[0].evidence["low_stage"] == 0
    assert found[0].title.startswith("stage imbalance: pipeline stage 1 spends 29.85 ms more per step in computing")
    assert cluster.stage_imbalance(ranks.assign(stage=-1)) == []


def test_link_bandwidth_per_rank_matches_msprof_analyze_slow_link():
    # msprof-analyze advisor "slow link" on level1: SDMA average 15.578, max 15.654, min 15.502 GB/s
    table = collectives.link_bandwidth(_job(ASCEND / "level1").links).set_index(["rank", "link_type"])
    assert table.loc[(0, "SDMA"), "bandwidth_gbps"] == pytest.approx(15.654, rel=1e-3)
    assert table.loc[(1, "SDMA"), "bandwidth_gbps"] == pytest.approx(15.502, rel=1e-3)
    assert table.xs("HCCS", level="link_type")["bandwidth_gbps"].median() == pytest.approx(15.58, rel=0.05)


def test_level1_links_agree_within_5_percent_so_no_slow_link():
    assert _cluster_findings(_job(ASCEND / "level1"), "slow_link") == []


def test_a_slower_link_on_one_rank_is_named():
    summary = _job(ASCEND / "level1")
    links = summary.links.copy()
    slow = (links["rank"] == 1) & links["link_type"].isin(["HCCS", "SDMA"])
    links.loc[slow, "transit_ms"] *= 1.2  # rank 1's transfers take 20% longer: 12.9 GB/s
    found = cluster.slow_links(dataclasses.replace(summary, links=links))
    assert {f.evidence["link_type"] for f in found} == {"HCCS", "SDMA"}
    hccs = next(f for f in found if f.evidence["link_type"] == "HCCS")
    assert hccs.evidence["rank"] == 1
    assert hccs.evidence["bandwidth_gbps"] == pytest.approx(15.502 / 1.2, rel=1e-3)
    assert "under the 14.4 GB/s expected of HCCS" in hccs.title
    assert hccs.impact > 0


def test_a_link_below_its_expected_rate_is_named_even_when_ranks_agree():
    summary = _job(ASCEND / "level1")
    links = summary.links.assign(transit_ms=summary.links["transit_ms"] * 2)  # every rank at ~7.8 GB/s
    found = cluster.slow_links(dataclasses.replace(summary, links=links))
    assert found and all("expected" in f.title and "spread" not in f.title for f in found)


def test_matrix_of_the_text_export_is_the_total_of_each_pair():
    summary = _job(ASCEND / "level1")
    table = summary.comm_matrix
    assert list(table.index) == [0, 1] and list(table.columns) == list(range(8))
    raw = json.loads((ASCEND / "level1" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" /
                      "communication_matrix.json").read_text())
    total = raw["step50"]["collective"]["allreduce-total@17522688603477080586"]  # every op of the pair
    assert len(total) == 8
    for pair, info in total.items():
        src, dst = map(int, pair.split("-"))
        if src != dst:
            assert table.loc[src, dst] == pytest.approx(info["Bandwidth(GB/s)"], rel=1e-3)


def test_matrix_of_the_db_export_sums_every_op_of_a_pair():
    import sqlite3

    summary = _job(ASCEND / "db" / "level1")
    path = ASCEND / "db" / "level1" / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "analysis.db"
    with sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True) as conn:
        total = pd.read_sql_query("SELECT src_rank, dst_rank, bandwidth FROM CommAnalyzerMatrix "
                                  "WHERE hccl_op_name LIKE '%-total' AND transport_type != 'LOCAL'", conn)
    for row in total.itertuples():
        assert summary.comm_matrix.loc[int(row.src_rank), int(row.dst_rank)] == pytest.approx(row.bandwidth, rel=0.01)


GROUPS = {  # torch_npu's parallel_group_info, as profiler_interface._add_group_info_to_metadata writes it
    0: {"hccl_world_group": {"group_name": "default_group", "group_rank": 0, "global_ranks": [0, 1, 2, 3]},
        "g_dp": {"group_name": "dp", "group_rank": 0, "global_ranks": [0, 2]},
        "g_tp": {"group_name": "tp", "group_rank": 0, "global_ranks": [0]},
        "g_pp": {"group_name": "pp", "group_rank": 0, "global_ranks": [0, 1]}},
    1: {"hccl_world_group": {"group_name": "default_group", "group_rank": 1, "global_ranks": [0, 1, 2, 3]},
        "g_dp": {"group_name": "dp", "group_rank": 0, "global_ranks": [1, 3]},
        "g_tp": {"group_name": "tp", "group_rank": 0, "global_ranks": [1]},
        "g_pp": {"group_name": "pp", "group_rank": 1, "global_ranks": [0, 1]}},
}


def test_parallel_indices_from_the_group_info():
    assert parallel_indices(GROUPS[1], 1) == {"dp": 0, "tp": 0, "pp": 1, "stage": 1}
    assert parallel_indices({"x": {"group_name": "dp_cp", "global_ranks": [4, 6]}}, 6) == {"dp": 1}
    assert parallel_indices({}, 0) == {}


def test_ranks_carry_dp_pp_tp_and_pipeline_stages_are_compared(tmp_path):
    job = tmp_path / "job"
    for r in (0, 1):
        dst = job / f"rank{r}_ascend_pt"
        shutil.copytree(need(ASCEND / "level0" / dst.name), dst)
        meta = dst / "profiler_metadata.json"
        meta.chmod(0o644)
        data = json.loads(meta.read_text())
        meta.write_text(json.dumps({**data, "parallel_group_info": GROUPS[r]}))
    summary = _job(job)
    ranks = summary.ranks.set_index("rank")
    assert ranks[["dp", "pp", "tp", "stage"]].to_dict("index") == {
        0: {"dp": 0, "pp": 0, "tp": 0, "stage": 0}, 1: {"dp": 0, "pp": 1, "tp": 0, "stage": 1}}
    # two pipeline stages of one rank each: the communication gap is a stage imbalance now
    found = _cluster_findings(summary, "stage_imbalance")
    assert len(found) == 1 and found[0].evidence["high_stage"] == 0
    assert _cluster_findings(summary, "slow_rank") == []


def test_a_matrix_file_without_totals_uses_the_median_op_of_each_pair(tmp_path):
    from npumagic.analysis.sources.ascend.communication import matrix_rows

    raw = json.loads((need(ASCEND / "level1" / "rank0_ascend_pt") / "ASCEND_PROFILER_OUTPUT" /
                      "communication_matrix.json").read_text())
    ops = raw["step50"]["collective"]
    middle = ops["allreduce-middle@17522688603477080586"]
    del ops["allreduce-total@17522688603477080586"]  # older torch_npu writes no totals
    path = tmp_path / "communication_matrix.json"
    path.write_text(json.dumps(raw))
    table = collectives.communication_matrix(pd.DataFrame(matrix_rows(path, 0)))
    assert table.loc[0, 1] == pytest.approx(middle["0-1"]["Bandwidth(GB/s)"], rel=1e-3)
    assert table.loc[0, 7] == pytest.approx(middle["0-7"]["Bandwidth(GB/s)"], rel=1e-3)
