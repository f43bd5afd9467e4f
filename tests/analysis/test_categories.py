"""Finding categories are one enum with a class name each, and rule families register once."""

from __future__ import annotations

import json

import pytest

from npumagic.analysis import rules
from npumagic.analysis.advice import CLASS_NAMES, Lead, class_name
from npumagic.analysis.finding import Category, Finding
from npumagic.analysis.rules import registry


def test_every_category_has_its_class_name_and_reads_as_its_value():
    assert set(CLASS_NAMES) == set(Category)
    assert class_name("memory", "npu") == "memory-bound" and class_name(Category.COMPUTE_BOUND, "cpu").startswith("compute")
    finding = Finding("sync", 0.1, "t", {}, "f")
    assert finding.category is Category.SYNC and finding.category == "sync" and f"{finding.category}" == "sync"
    assert json.loads(json.dumps(finding.as_dict()))["category"] == "sync"
    assert repr((finding.category, 0.5)) == "('sync', 0.5)"  # as a notebook echoes r.verdict.bottleneck


def test_an_unknown_category_is_refused_where_the_finding_is_made():
    with pytest.raises(ValueError, match="'cache_bound' is not a valid Category"):
        Finding("cache_bound", 0.1, "t", {}, "f")
    with pytest.raises(ValueError):
        Lead("fast", "t", "f")


def test_every_family_is_imported_from_its_one_registration_and_orders_the_rules():
    assert {r.family for r in rules.REGISTRY} == set(registry.FAMILIES)
    order = [registry.FAMILIES.index(r.family) for r in sorted(rules.REGISTRY, key=lambda r: registry.FAMILIES.index(r.family))]
    assert order == sorted(order)


def test_a_rule_outside_every_family_is_refused_when_it_registers():
    def stray(summary):
        return []

    stray.__module__ = "npumagic.analysis.rules.made_up"
    with pytest.raises(ValueError, match=r"add 'made_up' to rules.registry.FAMILIES"):
        registry.rule("stray")(stray)
    assert all(r.id != "stray" for r in rules.REGISTRY)
