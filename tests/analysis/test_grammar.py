"""Finding titles agree with their counts: "1 explicit synchronisation call", never "1 ... calls"."""

from __future__ import annotations

import re

import pytest

import npumagic
from npumagic.analysis.finding import plural

from ..conftest import ASCEND, CUDA, shared_summary

# a count of one followed, within two words, by a plural noun
ONE_MANY = re.compile(r"(?<![\d.,])\b1 (?:[\w:.-]+ ){0,2}(?:calls|APIs|conversions|kernels|copies|operators)\b")


@pytest.mark.parametrize("path", [CUDA / "tracelens" / "h100_qwen", ASCEND / "level1" / "rank0_ascend_pt"],
                         ids=lambda p: p.parts[-1])
def test_a_count_of_one_takes_the_singular(path):
    # GIVEN h100_qwen (one cudaDeviceSynchronize) and level1 (one affinity API)
    titles = [f.title for f in npumagic.advise(shared_summary(path))]
    # THEN no title says "1 ... calls"
    assert titles and not [t for t in titles if ONE_MANY.search(t)]
    assert any(re.search(r"\b1 (explicit synchronisation call|torch_npu affinity API) ", t) for t in titles)


def test_plural():
    assert [plural(n, "call", "calls") for n in (0, 1, 2)] == ["0 calls", "1 call", "2 calls"]


@pytest.mark.parametrize("path", [CUDA / "tracelens" / "h100_qwen", ASCEND / "level1" / "rank0_ascend_pt"],
                         ids=lambda p: p.parts[-1])
def test_findings_say_microseconds_as_the_tables_do(path):
    # the tables' headers say µs: a finding's "14,103 us" read as another unit beside them
    said = [f"{f.title} {f.fix}" for f in npumagic.advise(shared_summary(path))]
    assert said and not [s for s in said if re.search(r"\d us\b", s)]
    assert any(re.search(r"\d µs\b", s) for s in said)
