"""The rule test harness, shipped to pack authors.

Test cases are data: ``tests/<RULE>.toml`` in a pack, each ``[[case]]`` with
trace rows (literal ``[[case.rows.<table>]]`` and/or generated ``[[case.gpu]]``
load/idle cycles) and the findings it expects. The same cases run under
pytest (``pytest_generate_tests``) and ``leakreport rules test``.

A case passes only when its rule ran (fired or clean): a rule skipped for a
missing table, or one that errored, fails the case unless the case says
``expect_status = "skipped"`` (or ``"errored"``). ``[[case.expect]]`` keys are
finding fields or evidence columns (exact), ``min``/``max`` tables of evidence
bounds, and ``summary_contains``. ``params`` overrides the rule's parameters.
"""

from __future__ import annotations

import tempfile
import threading
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import duckdb

from analyzer.casegen import GEN_DEFAULTS, generate_gpu  # generate_gpu: tests import it here
from analyzer.findings import REPEATED, Finding, repeated_rows
from analyzer.packs import Pack, Rule
from collector.writer import BucketWriter

# A rule's status in a case: fired (findings), clean (ran, none), skipped, errored.
STATUSES = ("fired", "clean", "skipped", "errored")
_STATUS_WORDS = {"passed": "clean", "failed": "fired"}  # the older names


@dataclass
class Case:
    id: str
    rule_id: str
    path: Path
    data: dict[str, Any]
    expect_count: int | None = None
    expect: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    # None: the rule must run (fired or clean); a case about a rule that cannot
    # run says so with expect_status = "skipped" (or "errored")
    expect_status: str | None = None


# what a [[case]] may hold; a key not here is a typo that would test nothing
CASE_KEYS = (
    "name",
    "description",
    "rows",
    "gpu",
    "params",
    "expect_count",
    "expect",
    "expect_status",
)
EXPECTATIONS = ("expect_count", "expect", "expect_status")


def load_cases(path: Path, pack: str) -> list[Case]:
    """The cases of one tests/<RULE>.toml; ValueError naming the file and case for a file
    that is not TOML, a key a case does not take, or a case that expects nothing."""
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: {e}") from e
    rule_id = str(doc.get("rule", path.stem))
    cases = []
    for i, c in enumerate(doc.get("case", []), 1):
        name = str(c.get("name", f"case{i}"))
        unknown = sorted(set(c) - set(CASE_KEYS))
        if unknown:
            raise ValueError(
                f"{path}: case {name!r}: unknown key {', '.join(map(repr, unknown))} "
                f"(a case takes {', '.join(CASE_KEYS)})"
            )
        if not any(k in c for k in EXPECTATIONS):
            raise ValueError(
                f"{path}: case {name!r} expects nothing: give {', '.join(EXPECTATIONS[:2])} "
                f"or {EXPECTATIONS[2]}"
            )
        for wanted in c.get("expect", []):
            if not isinstance(wanted, dict):
                raise ValueError(f"{path}: case {name!r}: each [[case.expect]] is a table")
            for k, v in wanted.items():
                if k in ("min", "max") and not isinstance(v, dict):
                    raise ValueError(
                        f"{path}: case {name!r}: expect {k} = {v!r}: give a table of evidence "
                        f"bounds, {k} = {{ COLUMN = VALUE }}"
                    )
                if (  # peak_pct = { min = 90, maxx = 100 }: compared as a value, never equal
                    k not in ("min", "max")
                    and isinstance(v, dict)
                    and any(str(b).startswith(("min", "max")) for b in v)
                ):
                    raise ValueError(
                        f"{path}: case {name!r}: expect {k} = {v!r}: bounds go the other way "
                        f"round, min = {{ {k} = ... }} and max = {{ {k} = ... }}"
                    )
        want = c.get("expect_status")
        if want is not None and want not in STATUSES:
            raise ValueError(
                f"{path}: case {name!r}: expect_status {want!r} is not one of {', '.join(STATUSES)}"
            )
        cases.append(
            Case(
                id=f"{pack}/{rule_id}/{name}",
                rule_id=rule_id,
                path=path,
                data=c,
                expect_count=c.get("expect_count"),
                expect=list(c.get("expect", [])),
                params=dict(c.get("params", {})),
                expect_status=want,
            )
        )
    return cases


def collect_cases(packs: list[Pack], errors: list[str] | None = None) -> list[Case]:
    """Every pack's cases. A file that cannot be read, or a case naming a parameter its
    rule does not have, raises ValueError; with ``errors``, it is said there instead and
    the other files' cases still come back."""
    params = {r.id: set(r.params) for p in packs for r in p.rules}
    out: list[Case] = []
    for p in packs:
        for f in sorted((p.path / "tests").glob("*.toml")):
            try:
                cases = load_cases(f, p.name)
                for c in cases:
                    wrong = sorted(set(c.params) - params.get(c.rule_id, set(c.params)))
                    if wrong:
                        have = ", ".join(sorted(params[c.rule_id])) or "none"
                        raise ValueError(
                            f"{f}: case {c.id.rsplit('/', 1)[-1]!r}: {c.rule_id} has no "
                            f"parameter {', '.join(map(repr, wrong))} (it has: {have})"
                        )
            except ValueError as e:
                if errors is None:
                    raise
                errors.append(str(e))
                continue
            out.extend(cases)
    return out


def write_case_bucket(case: Case, bucket: Path) -> None:
    tables: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for spec in case.data.get("gpu", []):
        for table, rows in generate_gpu(spec).items():
            for r in rows:
                tables[(table, r["host"])].append(r)
    for table, rows in case.data.get("rows", {}).items():
        for n, r in enumerate(rows, 1):
            r = dict(r)
            r.setdefault("host", GEN_DEFAULTS["host"])
            _check_row(table, n, r)
            tables[(table, r["host"])].append(r)
    for (table, host), rows in sorted(tables.items()):
        BucketWriter(bucket, host).write(table, rows)


def _check_row(table: str, n: int, row: dict[str, Any]) -> None:
    """A case's literal row, against its table's schema: the table, each column and each
    value's type named where wrong (pyarrow said only "cannot be converted to int")."""
    import pyarrow as pa

    from collector.schema import TABLES

    where = f"rows.{table}[{n}]"
    if table not in TABLES:
        raise ValueError(f"{where}: no table {table!r} (tables: {', '.join(TABLES)})")
    schema = TABLES[table].schema
    for col, value in row.items():
        if schema.get_field_index(col) < 0:
            raise ValueError(f"{where}: {table} has no column {col!r}")
        try:
            pa.array([value], type=schema.field(col).type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            raise ValueError(
                f"{where}.{col}: {value!r} is not a {schema.field(col).type} value"
            ) from None


def status_word(status: str) -> str:
    return _STATUS_WORDS.get(status, status)


def _matches(f: Finding, want: dict[str, Any]) -> list[str]:
    bad = []
    for k, v in want.items():
        if k in ("min", "max"):
            for ek, ev in v.items():
                got = f.evidence.get(ek)
                if got is None or (got < ev if k == "min" else got > ev):
                    bad.append(f"evidence {ek}={got} not {'>=' if k == 'min' else '<='} {ev}")
        elif k == "summary_contains":
            if str(v) not in f.summary:
                bad.append(f"summary {f.summary!r} lacks {v!r}")
        elif getattr(f, k, f.evidence.get(k)) != v:
            bad.append(f"{k}={getattr(f, k, f.evidence.get(k))!r}, want {v!r}")
    return bad


def check_result(case: Case, status: str, reason: str, found: list[Finding]) -> list[str]:
    """Problems with one rule run against a case's expectations (empty = passed)."""
    status = status_word(status)
    problems = []
    if case.expect_status is None:
        if status in ("skipped", "errored"):
            problems.append(
                f"rule {status}: {reason} (a case whose rule did not run proves nothing; "
                f'write expect_status = "{status}" if that is what it tests)'
            )
    elif status != case.expect_status:
        problems.append(f"rule {status} ({reason or 'no reason given'}), want {case.expect_status}")
    if REPEATED in reason:  # a join that fans out: the analysis hides it, a case must not
        problems.append(f"the rule's output has {reason.removesuffix(', given once')}")
    if case.expect_count is not None and len(found) != case.expect_count:
        problems.append(
            f"expected {case.expect_count} findings, got {len(found)}: "
            + "; ".join(f.summary for f in found)
        )
    for want in case.expect:
        if not any(not _matches(f, want) for f in found):
            detail = "; ".join(", ".join(_matches(f, want)) for f in found) or "no findings"
            problems.append(f"no finding matches {want}: {detail}")
    return problems


def run_case(case: Case, packs: list[Pack], rule_timeout: float | None = None) -> list[str]:
    """Problems found (empty list = the case passed), through the full analysis
    (``rule_timeout``: the analysis's own limit when None)."""
    from analyzer.ruleexec import DEFAULT_RULE_TIMEOUT_S
    from analyzer.runner import analyze

    rules = {r.id: r for p in packs for r in p.rules}
    if case.rule_id not in rules:
        errors = [str(e) for p in packs for e in p.errors if e.rule_id == case.rule_id]
        return errors or [f"{case.path}: no rule {case.rule_id!r} is loaded"]
    with tempfile.TemporaryDirectory(prefix="leakreport-case-") as tmp:
        try:
            write_case_bucket(case, Path(tmp))
        except (ValueError, TypeError, KeyError) as e:
            return [f"{case.path}: bad case data: {e}"]
        doc = analyze(
            tmp,
            packs,
            only_rules={case.rule_id},
            overrides={case.rule_id: case.params},
            with_series=False,
            rule_timeout=DEFAULT_RULE_TIMEOUT_S if rule_timeout is None else rule_timeout,
        )
    mine = [s for s in doc.run.rules if s.rule_id == case.rule_id]
    if not mine:
        return [f"{case.path}: the analysis reported no status for {case.rule_id}"]
    return check_result(case, mine[0].status, mine[0].reason or "", doc.findings)


class CaseBucket:
    """One case's bucket, opened once with its rollups built, to run many
    versions of a rule against (the mutation check). A context manager."""

    def __init__(self, case: Case, rollup_params: dict[str, Any] | None = None) -> None:
        self.case = case
        self.rollup_params = rollup_params  # rollup.DEFAULTS overrides (tests of the rollups)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.con: duckdb.DuckDBPyConnection | None = None
        self.files: dict[str, int] = {}

    def __enter__(self) -> CaseBucket:
        from analyzer import logevents, rollup
        from analyzer.bucket import open_bucket

        self._tmp = tempfile.TemporaryDirectory(prefix="leakreport-case-")
        try:
            write_case_bucket(self.case, Path(self._tmp.name))
            self.con, self.files = open_bucket(self._tmp.name)
            logevents.build(self.con)
            rollup.build(self.con, self.rollup_params)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def run(self, rule: Rule, timeout_s: float = 20.0) -> tuple[str, str, list[Finding]]:
        """(status, reason, findings) of one rule, as the analysis would report them;
        a rule still running after timeout_s is interrupted and counts as errored."""
        from analyzer.ruleexec import RuleOutputError, run_rule

        assert self.con is not None, "CaseBucket.run outside its with-block"
        if not rule.enabled:
            return "skipped", "disabled in its metadata", []
        absent = [t for t in rule.requires if not any(self.files.get(x) for x in t.split("|"))]
        if absent:
            return "skipped", f"no data in table(s) {', '.join(absent)}", []
        timer = threading.Timer(timeout_s, self.con.interrupt)
        timer.start()
        try:
            found, repeated = run_rule(self.con, rule, self.case.params)
        except (duckdb.Error, RuleOutputError, ValueError, TypeError) as e:
            return "errored", rule.located(e), []
        finally:
            timer.cancel()
        said = repeated_rows(repeated) if repeated else ""
        return ("fired" if found else "clean"), said, found
