"""The mutation check of rule SQL (analyzer/mutate.py), on a fixture pack and on
the default pack's named gaps."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from analyzer import mutate
from analyzer.packs import load_pack, load_packs
from analyzer.ruletest import CaseBucket, check_result, collect_cases

FIXTURE = Path(__file__).resolve().parent / "mutate_pack"


@pytest.fixture(scope="module")
def fixture_rule():
    pack = load_pack(FIXTURE)
    assert not pack.errors, pack.errors
    return pack, pack.rules[0]


def test_operators_and_what_is_left_alone(fixture_rule) -> None:
    _, rule = fixture_rule
    ms = mutate.mutants(rule, mutate.OPERATORS)
    by_op: dict[str, list[str]] = {}
    for m in ms:
        by_op.setdefault(m.op, []).append(m.change)
    # each comparison negated, and (on request) at its boundary; `<>` has no boundary
    assert sorted(by_op["cmp"]) == sorted([">→<=", "<→>=", ">=→<", "<>→=", ">=→<"])
    assert sorted(by_op["bound"]) == sorted([">→>=", "<→<=", ">=→>", ">=→>"])
    assert {m.op for m in mutate.mutants(rule)} == {"cmp", "param", "drop", "when"}
    # integer parameters halved (integer division) and doubled; the boolean is left alone
    assert sorted(by_op["param"]) == sorted(
        ["$min_mib÷2", "$min_mib×2", "$min_mib÷2", "$min_mib×2"]
        + ["$min_samples÷2", "$min_samples×2"]
    )
    # BETWEEN's AND does not split a conjunct; the string is part of its conjunct
    assert sorted(by_op["drop"]) == sorted(
        [
            "drop WHERE `memory_used_bytes >= $min_mib * 1048576`",
            "drop WHERE `utilization_gpu_pct BETWEEN 0 AND 100`",
            "drop WHERE `host <> 'a>=b'`",
            "drop HAVING `count(*) >= $min_samples`",
        ]
    )
    assert len(by_op["when"]) == 2
    # nothing in comments or strings: one `>=` is in a comment, one in a string
    comment_line = next(
        i for i, t in enumerate(rule.path.read_text().splitlines(), 1) if "x >= y" in t
    )
    assert all(m.line != comment_line for m in ms)
    assert not [m for m in ms if m.change in (">=→>", ">=→<") and "'a>=b'" in m.id]
    # every mutant is valid SQL text that differs from the rule
    assert all(m.sql != rule.sql for m in ms)
    assert len({m.id for m in ms}) == len(ms)


def test_ids_do_not_move_with_lines(fixture_rule, tmp_path) -> None:
    _, rule = fixture_rule
    copy = tmp_path / "pack"
    shutil.copytree(FIXTURE, copy)
    f = copy / "rules" / "T001.sql"
    text = f.read_text()
    f.write_text(text.replace("[params]", "\n\n[params]").replace("SELECT host", "\n\nSELECT host"))
    moved = load_pack(copy).rules[0]
    before = {m.id: m.line for m in mutate.mutants(rule, mutate.OPERATORS)}
    after = {m.id: m.line for m in mutate.mutants(moved, mutate.OPERATORS)}
    assert before.keys() == after.keys()
    assert all(after[k] == before[k] + 4 for k in before)


def test_report_names_survivors_equivalents_stale_entries_and_errors(fixture_rule) -> None:
    pack, rule = fixture_rule
    (res,) = mutate.check_packs([pack])
    assert res.count("equivalent") == 1
    assert res.count("killed-by-error") == 2  # the error() guard flipped or negated
    assert [p for p in res.problems if "stale" in p] == [
        "equivalent entry matches no mutant (stale): '<→<= @ WHERE no_such_line < 1'"
    ]
    survivors = {m.id.split(" @ ")[0] for m in res.survivors}
    # the cases have no sample at exactly the bound, none with 1 sample, none between
    # 1x and 2x the bound: these bugs would pass them
    assert "drop HAVING `count(*) >= $min_samples`" in survivors
    assert "$min_samples÷2" in survivors
    assert ">=→<" not in survivors and "$min_samples×2" not in survivors
    text = mutate.report([res])
    assert f"{rule.path}:" in text and "survived: drop HAVING" in text
    assert not mutate.passed([res])


def test_a_case_that_fails_on_the_rule_itself_is_reported(tmp_path) -> None:
    copy = tmp_path / "pack"
    shutil.copytree(FIXTURE, copy)
    cases = copy / "tests" / "T001.toml"
    cases.write_text(cases.read_text().replace("samples = 3", "samples = 4"))
    (res,) = mutate.check_packs([load_pack(copy)])
    assert any("fails on the rule as written" in p for p in res.problems)
    (cases).unlink()
    (res,) = mutate.check_packs([load_pack(copy)])
    assert "no test cases: every mutant survives" in res.problems
    assert len(res.survivors) == len(res.mutants) - 1  # all but the listed one


def test_passes_once_every_survivor_is_listed_with_a_reason(fixture_rule, tmp_path) -> None:
    pack, _ = fixture_rule
    (res,) = mutate.check_packs([pack])
    copy = tmp_path / "pack"
    shutil.copytree(FIXTURE, copy)
    f = copy / "rules" / "T001.sql"
    entries = "".join(
        f'  {{mutant = {json.dumps(m.id)}, reason = "fixture"}},\n'
        for m in res.survivors + [m for m in res.mutants if m.status == "equivalent"]
    )
    text = f.read_text()
    start, end = text.index("equivalent  = ["), text.index("]\n[params]")
    f.write_text(text[:start] + "equivalent  = [\n" + entries + text[end:])
    (again,) = mutate.check_packs([load_pack(copy)])
    assert again.problems == [] and again.survivors == []
    assert mutate.passed([again])
    # an entry without a reason is an error, not a silent pass
    f.write_text(f.read_text().replace('reason = "fixture"', 'reason = ""', 1))
    (bad,) = mutate.check_packs([load_pack(copy)])
    assert any("needs a mutant and a reason" in p for p in bad.problems)


DEFAULT = load_packs()


def _mutant_cases_fail(rule_id: str, old: str, new: str) -> list[str]:
    """Problems the rule's cases find in the rule with `old` replaced by `new`."""
    rule = next(r for p in DEFAULT for r in p.rules if r.id == rule_id)
    assert old in rule.sql, f"{rule_id} no longer contains {old!r}"
    bad = dataclasses.replace(rule, sql=rule.sql.replace(old, new))
    problems = []
    for case in (c for c in collect_cases(DEFAULT) if c.rule_id == rule_id):
        with CaseBucket(case) as cb:
            assert not check_result(case, *cb.run(rule)), case.id
            problems += check_result(case, *cb.run(bad))
    return problems


def test_hr001_request_rate_guard_removed_is_caught() -> None:
    guard = "WHERE r.early IS NULL OR r.late IS NULL OR r.late <= $max_rate_rise * r.early"
    assert _mutant_cases_fail("HR001", guard, "")


def test_mutation_runs_through_the_same_rule_runner_as_the_analysis() -> None:
    # every default case gives the same verdict through CaseBucket as through analyze()
    from analyzer.ruletest import run_case

    rules = {r.id: r for p in DEFAULT for r in p.rules}
    for case in collect_cases(DEFAULT)[::7]:
        with CaseBucket(case) as cb:
            assert check_result(case, *cb.run(rules[case.rule_id])) == run_case(case, DEFAULT)


@pytest.mark.parametrize("cutoff", [50.0, 2.0])
def test_idle_utilisation_cutoff_moved_is_caught(cutoff: float) -> None:
    # the rollup's idle cut-off (5 %) raised to 50 % or lowered to 2 %: GM001's cases fail
    problems = []
    for case in (c for c in collect_cases(DEFAULT) if c.rule_id == "GM001"):
        rule = next(r for p in DEFAULT for r in p.rules if r.id == "GM001")
        with CaseBucket(case, {"idle_util_pct": cutoff}) as cb:
            problems += check_result(case, *cb.run(rule))
    assert problems


def test_cli_rules_test_mutate_on_a_pack(tmp_path) -> None:
    import subprocess
    import sys

    base = [sys.executable, "-m", "leakreport", "rules", "test", "--no-builtin"]
    r = subprocess.run(
        [*base, "--pack", str(FIXTURE), "--mutate"], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 1, r.stdout + r.stderr  # survivors: exit 1
    assert "2 passed, 0 failed" in r.stdout
    assert "T001.sql:31: survived: drop HAVING `count(*) >= $min_samples`" in r.stdout
    assert "stale" in r.stdout and "1 rules, 17 mutants, 9 survived unexplained" in r.stdout
    r = subprocess.run(
        [*base, "--pack", str(FIXTURE), "--mutate", "--rule", "NOPE"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and "--rule: no rule NOPE is loaded" in r.stderr


def test_a_case_with_bad_data_is_a_problem_not_a_crash(tmp_path) -> None:
    copy = tmp_path / "pack"
    shutil.copytree(FIXTURE, copy)
    cases = copy / "tests" / "T001.toml"
    cases.write_text(
        cases.read_text()
        + '\n[[case]]\nname = "bad"\nexpect_count = 0\n[[case.gpu]]\nbogus_key = 1\n'
    )
    (res,) = mutate.check_packs([load_pack(copy)])
    assert any("mutate-fixture/T001/bad: its data cannot be loaded" in p for p in res.problems)
    assert not mutate.passed([res])
