"""Every rule's test cases (data next to the rule), one pytest item each."""

from __future__ import annotations

import pytest

from analyzer.packs import load_packs
from analyzer.ruletest import Case, collect_cases, run_case

PACKS = load_packs()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        cases = collect_cases(PACKS)
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_rule_case(case: Case) -> None:
    problems = run_case(case, PACKS)
    assert not problems, "\n".join(problems)


def test_every_rule_has_cases_that_fire_and_cases_that_do_not() -> None:
    cases = collect_cases(PACKS)
    for rule in (r for p in PACKS for r in p.rules):
        mine = [c for c in cases if c.rule_id == rule.id]
        assert any(c.expect_count == 0 for c in mine), f"{rule.id} has no must-not-fire case"
        assert any((c.expect_count or 0) > 0 for c in mine), f"{rule.id} has no must-fire case"


def test_harness_reports_a_wrong_expectation() -> None:
    # the harness itself must be able to fail
    good = next(c for c in collect_cases(PACKS) if c.id == "default/GM001/linear_growth_fires")
    wrong = Case(good.id + "-inverted", good.rule_id, good.path, good.data, expect_count=0)
    assert run_case(wrong, PACKS)
