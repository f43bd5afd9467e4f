"""The rule names `npumagic rules` lists without importing the rules are the registry's."""

from npumagic.analysis.rule_names import RULES
from npumagic.analysis.rules import REGISTRY


def test_the_list_of_rule_names_is_the_registrys():
    # GIVEN every rule registered WHEN listed without importing them THEN each id and family is there once
    assert sorted(RULES) == sorted((r.id, r.family) for r in REGISTRY)
    assert len(set(RULES)) == len(RULES)
