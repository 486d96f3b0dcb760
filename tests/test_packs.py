from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from analyzer.packs import PackError, load_pack, load_packs, parse_param_overrides, parse_rule
from analyzer.ruletest import generate_gpu
from analyzer.runner import analyze
from collector.writer import BucketWriter

GOOD = """/*---
id = "{id}"
name = "t.good"
title = "t"
category = "leak.gpu"
severity = "warning"
requires = ["gpu_samples"]
evidence = ["n"]
description = "d"
remediation = "r"
[params]
limit = 1
---*/
SELECT host, count(*) AS n, 'rows: ' || count(*) AS summary FROM gpu_samples GROUP BY host HAVING count(*) >= $limit
"""


def _pack(tmp: Path, rules: dict[str, str]) -> Path:
    (tmp / "rules").mkdir(parents=True)
    (tmp / "pack.toml").write_text('name = "mine"\nversion = "1"\n')
    for name, text in rules.items():
        (tmp / "rules" / f"{name}.sql").write_text(text)
    return tmp


def test_default_pack_loads_clean() -> None:
    (pack,) = load_packs()
    assert not pack.errors
    assert {r.id for r in pack.rules} >= {"GM001", "GM002", "OF001", "KB001"}


@pytest.mark.parametrize(
    "mutate,line,message",
    [
        (lambda s: s.replace('severity = "warning"', 'severity = "huge"'), 6, "unknown severity"),
        (
            lambda s: s.replace('category = "leak.gpu"', 'category = "leak.nope"'),
            5,
            "unknown category",
        ),
        (lambda s: s.replace('id = "X1"', 'id = "X2"'), 2, "must equal the file name"),
        (lambda s: s.replace('title = "t"\n', ""), 2, "lacks required key 'title'"),
        (
            lambda s: s.replace('requires = ["gpu_samples"]', 'requires = ["gpu_sample"]'),
            7,
            "unknown table",
        ),
        (lambda s: s.replace('title = "t"', 'title = "t'), 4, "invalid TOML"),
        (lambda s: s.replace("$limit", "$limt"), 14, "$limt"),
        (lambda s: s.replace("[params]", 'colour = "red"\n[params]'), 11, "unknown metadata key"),
        (lambda s: s.replace("/*---", "/*"), 1, "missing metadata"),
    ],
)
def test_validation_errors_name_file_and_line(tmp_path, mutate, line, message) -> None:
    f = tmp_path / "X1.sql"
    f.write_text(mutate(GOOD.format(id="X1")))
    err = parse_rule(f)
    assert not hasattr(err, "sql"), "expected an error"
    assert str(err).startswith(f"{f}:{line}:"), str(err)
    assert message in str(err)


def test_every_metadata_problem_is_named_at_once(tmp_path) -> None:
    """A pack author fixes all of a file's metadata in one edit, not one problem per run."""
    f = tmp_path / "X1.sql"
    text = GOOD.format(id="X1").replace('id = "X1"', 'id = "X2"')
    text = text.replace('severity = "warning"', 'severity = "huge"').replace('title = "t"\n', "")
    f.write_text(text)
    err = str(parse_rule(f))
    assert err.startswith(f"{f}:2: "), err
    for part in (
        "must equal the file name",
        "lacks required key 'title'",
        "line 5: unknown severity",
    ):
        assert part in err, err
    assert err.count("; ") == 2, err  # three problems, each once


def test_broken_rule_fails_alone(tmp_path) -> None:
    pack = _pack(
        tmp_path / "pack",
        {
            "U1": GOOD.format(id="U1"),
            "U2": GOOD.format(id="U2").replace("FROM gpu_samples", "FROM no_such_table"),
            "U3": GOOD.format(id="U3").replace('category = "leak.gpu"', "category = 3"),
            # a misspelt column on the file's line 15 (DuckDB says LINE 2 of the SQL)
            "U4": GOOD.format(id="U4").replace(
                "SELECT host, count(*) AS n,", "SELECT host,\n  count(nope) AS n,"
            ),
        },
    )
    bucket = tmp_path / "bucket"
    BucketWriter(bucket, "host-a").write("gpu_samples", generate_gpu({"cycles": 1})["gpu_samples"])
    doc = analyze(bucket, load_packs([pack], builtin=False))
    status = {r.rule_id: r for r in doc.run.rules}
    assert status["U1"].status == "fired" and status["U1"].findings == 1
    assert status["U2"].status == "errored" and "U2.sql" in status["U2"].reason
    assert status["U3"].status == "errored" and "U3.sql:5" in status["U3"].reason
    assert status["U4"].status == "errored" and "U4.sql:15: " in status["U4"].reason
    assert "LINE 15:" in status["U4"].reason, status["U4"].reason  # the file's line, not 2


def test_rows_no_finding_can_be_made_of_are_errors(tmp_path) -> None:
    """A NULL host became a finding of host "None", a host with no data in scope went onto
    the fleet page as leaking, and 'yesterday' became a finding's start, all exit 0."""
    base = (
        "SELECT host, count(*) AS n, 'rows: ' || count(*) AS summary FROM gpu_samples GROUP BY host"
    )
    bad = {
        "B1": ("SELECT NULL AS host, 1 AS n, 's' AS summary", "row 1: host is NULL"),
        "B2": (base.replace("SELECT host,", "SELECT 'ghost-host' AS host,").replace(
            "GROUP BY host", ""), "a row names host 'ghost-host', which has no data in scope"),
        "B3": (base.replace("AS summary", "AS summary, 'yesterday' AS start"),
               "row 1: start is 'yesterday', not a timestamp or date"),
        "B4": (base.replace("AS summary", "AS summary, 'urgent' AS severity"),
               "row 1: severity 'urgent', not one of info, warning, critical"),
        "B5": (base.replace("'rows: ' || count(*)", "NULL"), "row 1: summary is NULL"),
    }  # fmt: skip
    head = GOOD.split("---*/")[0] + "---*/\n"
    rules = {k: head.format(id=k) + sql + "\n" for k, (sql, _why) in bad.items()}
    rules["OK1"] = head.format(id="OK1") + base.replace("AS summary", "AS summary, now() AS start")
    rules["OK2"] = head.format(id="OK2") + base.replace(
        "AS summary", "AS summary, current_date AS end"
    )
    pack = _pack(tmp_path / "pack", rules)
    bucket = tmp_path / "bucket"
    BucketWriter(bucket, "host-a").write("gpu_samples", generate_gpu({"cycles": 1})["gpu_samples"])
    doc = analyze(bucket, load_packs([pack], builtin=False))
    status = {r.rule_id: r for r in doc.run.rules}
    for rid, (_sql, why) in bad.items():
        assert status[rid].status == "errored" and why in status[rid].reason, status[rid]
    assert status["OK1"].status == status["OK2"].status == "fired"
    assert [f.host for f in doc.findings] == ["host-a", "host-a"]


def test_missing_table_skips_rule(tmp_path) -> None:
    pack = _pack(tmp_path / "pack", {"U1": GOOD.format(id="U1")})
    bucket = tmp_path / "empty"
    bucket.mkdir()
    doc = analyze(bucket, load_packs([pack], builtin=False))
    (st,) = doc.run.rules
    assert st.status == "skipped" and "gpu_samples" in st.reason


def test_params_are_bound_and_overridable(tmp_path) -> None:
    pack = _pack(tmp_path / "pack", {"U1": GOOD.format(id="U1")})
    bucket = tmp_path / "bucket"
    rows = generate_gpu({"cycles": 1})["gpu_samples"]
    BucketWriter(bucket, "host-a").write("gpu_samples", rows)
    packs = load_packs([pack], builtin=False)
    assert len(analyze(bucket, packs).findings) == 1
    assert analyze(bucket, packs, overrides={"U1": {"limit": len(rows) + 1}}).findings == []
    # a value is bound, never pasted into SQL
    doc = analyze(bucket, packs, overrides={"U1": {"limit": "1; DROP TABLE gpu_samples"}})
    assert doc.run.rules[0].status == "errored"


def test_duplicate_rule_id_is_an_error(tmp_path) -> None:
    pack = _pack(tmp_path / "pack", {"GM001": GOOD.format(id="GM001")})
    packs = load_packs([pack])
    assert any("already defined" in str(e) for p in packs for e in p.errors)


def test_pack_errors(tmp_path) -> None:
    with pytest.raises(PackError, match="no such pack"):
        load_pack(tmp_path / "nope")
    (tmp_path / "x").mkdir()
    with pytest.raises(PackError, match="pack.toml"):
        load_pack(tmp_path / "x")


def test_rules_a_pack_would_pass_over_are_named(tmp_path) -> None:
    """A misnamed rules/ folder, a rule named .SQL or one in a sub-folder: the pack loaded
    with no rules, and every command went on, exit 0. The same pack given twice (./p and
    p/) was read twice, its rules "already defined" by themselves. A byte-order mark (a
    Windows editor's) read as a missing front-matter block."""
    pack = _pack(tmp_path / "p", {"MY001": GOOD.format(id="MY001")})
    (pack / "rules").rename(pack / "rule")
    with pytest.raises(PackError, match=r"no rules/ folder: .* \(it has rule/\)"):
        load_pack(pack)
    (pack / "rule").rename(pack / "rules")
    (pack / "rules" / "MY001.sql").rename(pack / "rules" / "MY002.SQL")
    (pack / "rules" / "sub").mkdir()
    (pack / "rules" / "sub" / "MY003.sql").write_text(GOOD.format(id="MY003"))
    errors = sorted(str(e) for e in load_pack(pack).errors)
    assert errors == [
        f"{pack}/rules/MY002.SQL:1: not read: its name must end in .sql",
        f"{pack}/rules/sub/MY003.sql:1: not read: not in rules/ itself",
    ]
    for f in [pack / "rules" / "MY002.SQL", pack / "rules" / "sub" / "MY003.sql"]:
        f.unlink()
    with pytest.raises(PackError, match="no rules"):
        load_pack(pack)
    (pack / "rules" / "MY001.sql").write_bytes(b"\xef\xbb\xbf" + GOOD.format(id="MY001").encode())
    (pack / "pack.toml").write_bytes(b"\xef\xbb\xbf" + (pack / "pack.toml").read_bytes())
    got = load_packs([pack, f"{tmp_path}/./p/"])
    assert len(got) == 2 and [r.id for r in got[1].rules] == ["MY001"] and not got[1].errors


def test_param_override_parsing() -> None:
    assert parse_param_overrides(
        ["GM001.min_growth_mib=128", "KB001.max_affected_version=0.5.0", "A.b=true"]
    ) == {
        "GM001": {"min_growth_mib": 128},
        "KB001": {"max_affected_version": "0.5.0"},
        "A": {"b": True},
    }
    with pytest.raises(ValueError, match="RULE.key=value"):
        parse_param_overrides(["nodot=1"])


def test_the_rollups_a_rule_may_read_are_the_ones_an_analysis_makes() -> None:
    """The README's list for rule authors names tables the rollup SQL creates, and
    ``rollup.ROLLUP_TABLES`` is every one it creates (a renamed table breaks user packs)."""
    import re

    from analyzer import rollup

    made: dict[str, set[str]] = {"TABLE": set(), "VIEW": set()}
    for f in rollup.rollup_files():
        for m in re.finditer(r"CREATE OR REPLACE (TABLE|VIEW) (\w+) AS", f.read_text()):
            made[m.group(1)].add(m.group(2))
    # every table made is listed; a listed name may be a view (computed where it is read)
    assert made["TABLE"] <= set(rollup.ROLLUP_TABLES) <= made["TABLE"] | made["VIEW"]
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    listed = re.search(r"and the rollups \((.*?); SQL in `analyzer/rollups/`\)", readme, re.S)
    assert listed, "the README's paragraph for rule authors has moved"
    names = set(re.findall(r"`(\w+)`", listed.group(1)))
    assert len(names) >= 10 and names - {"log_events"} <= set(rollup.ROLLUP_TABLES)


def test_the_readme_rule_and_a_pack_built_on_it_pass_their_cases(tmp_path) -> None:
    """The README's example rule, as written there, in a pack with cases where it must fire
    and where it must not: `rules test` passes it (it once failed on DuckDB 2's GROUP BY
    ALL). Then the harness's own errors: a test file that is not TOML, a misspelled case
    key and an unknown parameter each fail alone, named, and the good cases still run."""
    import re
    import subprocess
    import sys

    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Rule packs") :]
    sql = re.search(r"```sql\n(.*?)```", section, re.S).group(1)
    pack = tmp_path / "mine"
    (pack / "rules").mkdir(parents=True)
    (pack / "tests").mkdir()
    (pack / "pack.toml").write_text('name = "mine"\nversion = "1"\n')
    (pack / "rules" / "MY001.sql").write_text(sql)
    gpu = "[[case.gpu]]\nbase_mib = {b}\ntotal_mib = 16000\ncycles = 4\n"
    (pack / "tests" / "MY001.toml").write_text(
        '[[case]]\nname = "full"\nexpect_count = 1\n' + gpu.format(b=15600)
        + '[[case]]\nname = "roomy"\nexpect_count = 0\n' + gpu.format(b=8000)
    )  # fmt: skip

    def rules_test() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "leakreport", "rules", "test", "--no-builtin", "--pack", str(pack)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    r = rules_test()
    assert r.returncode == 0 and "2 passed, 0 failed" in r.stdout, r.stdout + r.stderr
    (pack / "tests" / "MY002.toml").write_text("[[case]]\nexpect_count = \n")
    (pack / "tests" / "MY003.toml").write_text('[[case]]\nname = "t"\nexpect_cout = 1\n')
    (pack / "tests" / "MY004.toml").write_text(
        'rule = "MY001"\n[[case]]\nname = "p"\nexpect_count = 0\nparams = { limt_pct = 1 }\n'
    )
    r = rules_test()
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "2 passed, 0 failed, 3 test files not read" in r.stdout
    assert "MY002.toml: Invalid value (at line 2" in r.stdout
    assert "MY003.toml: case 't': unknown key 'expect_cout'" in r.stdout
    assert "MY004.toml: case 'p': MY001 has no parameter 'limt_pct' (it has: limit_pct)" in r.stdout
    # bounds written the wrong way round failed as "no finding matches", never as the typo
    (pack / "tests" / "MY004.toml").write_text(
        '[[case]]\nname = "b"\nexpect_count = 1\n[[case.expect]]\n'
        "peak_pct = { min = 90, maxx = 100 }\n" + gpu.format(b=15600)
    )
    r = rules_test()
    assert (
        "MY004.toml: case 'b': expect peak_pct = {'min': 90, 'maxx': 100}: bounds go the other "
        "way round, min = { peak_pct = ... } and max = { peak_pct = ... }" in r.stdout
    ), r.stdout
    # a rule no case runs passed in silence
    for f in (pack / "tests").glob("MY00[234].toml"):
        f.unlink()
    (pack / "rules" / "MY005.sql").write_text(sql.replace("MY001", "MY005"))
    r = rules_test()
    assert r.returncode == 2, r.stdout + r.stderr
    assert "2 passed, 0 failed, 1 rules without a case" in r.stdout
    assert f"FAIL MY005: no test case ({pack / 'tests' / 'MY005.toml'}: one where" in r.stdout


def test_rules_test_takes_a_rule_timeout_and_runs_only_the_rules_asked(tmp_path) -> None:
    """A runaway rule in a pack's case is stopped at --rule-timeout (it took the fixed 60 s
    a case), and --rule runs that rule's cases alone (it ran every built-in case first)."""
    import subprocess
    import sys
    import time

    runaway = GOOD.format(id="RW1").replace(
        "FROM gpu_samples GROUP BY host", "FROM gpu_samples, range(1000000000000) GROUP BY host"
    )
    pack = _pack(tmp_path / "pack", {"RW1": runaway, "U1": GOOD.format(id="U1")})
    (pack / "tests").mkdir()
    case = '[[case]]\nname = "c"\nexpect_count = 1\n[[case.gpu]]\ncycles = 1\n'
    for rid in ("RW1", "U1"):
        (pack / "tests" / f"{rid}.toml").write_text(case)

    def rules_test(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
        t0 = time.monotonic()
        r = subprocess.run(
            [sys.executable, "-m", "leakreport", "rules", "test", "--pack", str(pack), *args],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        return r, time.monotonic() - t0

    from analyzer.ruleexec import DEFAULT_RULE_TIMEOUT_S
    from leakreport.options import RULE_TIMEOUT_S

    assert RULE_TIMEOUT_S == DEFAULT_RULE_TIMEOUT_S  # the CLI's copy, kept free of DuckDB
    r, took = rules_test("--no-builtin", "--rule-timeout", "1")
    assert r.returncode == 2 and "time limit of 1 s" in r.stdout, r.stdout + r.stderr
    assert "1 passed, 1 failed" in r.stdout and took < 30
    r, _ = rules_test("--rule", "U1")  # the built-in pack is loaded, its cases not run
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "1 passed, 0 failed", r.stdout


def test_rows_a_rule_repeats_are_one_finding_and_said(tmp_path) -> None:
    """A join that fans out gave the same finding two, three times on the page. The
    analysis gives it once and says so with the rule; a pack's case fails on it."""
    from analyzer.ruletest import Case, check_result

    fans_out = (
        GOOD.format(id="U1")
        .replace("FROM gpu_samples GROUP BY host", "FROM gpu_samples GROUP BY host, gpu_index")
        .replace("SELECT host, count(*) AS n, 'rows: ' || count(*)", "SELECT host, 1 AS n, 'full'")
    )
    pack = _pack(tmp_path / "pack", {"U1": fans_out})
    bucket = tmp_path / "bucket"
    rows = [r for g in range(3) for r in generate_gpu({"cycles": 1, "gpu": g})["gpu_samples"]]
    assert len({r["gpu_index"] for r in rows}) == 3
    BucketWriter(bucket, "host-a").write("gpu_samples", rows)
    doc = analyze(bucket, load_packs([pack], builtin=False))
    (st,) = doc.run.rules
    assert len(doc.findings) == 1 and st.findings == 1, doc.findings
    assert st.status == "fired" and st.reason == "2 rows repeating another row exactly, given once"
    case = Case(id="c", rule_id="U1", path=tmp_path / "t.toml", data={})
    problems = check_result(case, st.status, st.reason or "", doc.findings)
    assert problems == ["the rule's output has 2 rows repeating another row exactly"], problems


def test_a_case_row_of_the_wrong_shape_names_its_column(tmp_path) -> None:
    """pyarrow said only "object of type <class 'str'> cannot be converted to int"."""
    from analyzer.ruletest import Case, write_case_bucket

    def bad(row: dict) -> str:
        case = Case("p/MY001/x", "MY001", tmp_path / "MY001.toml", {"rows": {"gpu_samples": [row]}})
        with pytest.raises(ValueError) as e:
            write_case_bucket(case, tmp_path / "b")
        return str(e.value)

    ok = {"ts": dt.datetime(2026, 1, 1), "gpu_index": 0}
    assert bad({**ok, "memory_used_bytes": "lots"}) == (
        "rows.gpu_samples[1].memory_used_bytes: 'lots' is not a int64 value"
    )
    assert bad({**ok, "memory_usd_bytes": 1}) == (
        "rows.gpu_samples[1]: gpu_samples has no column 'memory_usd_bytes'"
    )
