"""The rules of a job of two or more ranks: slow ranks, stage imbalance, slow links
(:mod:`npumagic.analysis.cluster`)."""

from __future__ import annotations

from .. import cluster
from ..finding import Finding
from ..summary import Summary
from .registry import rule


@rule("cluster")
def cluster_findings(s: Summary) -> list[Finding]:
    return cluster.findings(s)
