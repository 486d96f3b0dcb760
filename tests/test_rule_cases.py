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


def _case(name: str) -> Case:
    return next(c for c in collect_cases(PACKS) if c.id == name)


def test_a_skipped_rule_fails_a_case_unless_it_expects_that() -> None:
    skipped = _case("default/AP003/no_nvml_process_rows_is_skipped")
    assert not run_case(skipped, PACKS)
    silent = Case(skipped.id + "-no-status", skipped.rule_id, skipped.path, skipped.data, 0)
    problems = run_case(silent, PACKS)
    assert problems and "rule skipped: no data in table(s) gpu_processes" in problems[0]
    # a case that expects the rule to run fails when it is skipped, and vice versa
    wrong = Case(skipped.id + "-clean", skipped.rule_id, skipped.path, skipped.data, 0)
    wrong.expect_status = "clean"
    assert run_case(wrong, PACKS)
    ran = _case("default/AP003/nvml_rows_of_another_pid_do_not_fire")
    ran_wrong = Case(ran.id + "-skipped", ran.rule_id, ran.path, ran.data, 0)
    ran_wrong.expect_status = "skipped"
    assert any("want skipped" in p for p in run_case(ran_wrong, PACKS))


def test_an_unknown_expect_status_names_the_file(tmp_path) -> None:
    from analyzer.ruletest import load_cases

    f = tmp_path / "X001.toml"
    f.write_text('[[case]]\nname = "a"\nexpect_status = "passed"\n')
    with pytest.raises(ValueError, match=r"X001.toml: case 'a': expect_status 'passed'"):
        load_cases(f, "p")
