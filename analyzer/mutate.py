"""Mutation check of a rule pack: would the rule's test cases catch a plausible bug?

Each rule's SQL is changed one small way at a time (a *mutant*) and the rule's
cases are run against every mutant. A case that fails kills the mutant; a
mutant no case kills is a bug the tests would let through. Operators:

- ``cmp``: each comparison negated (``>=``→``<``, ``=``→``<>`` ...);
- ``bound`` (on request): each comparison at its boundary (``>=``→``>``,
  ``<``→``<=`` ...). Only a case whose measure equals the bound exactly kills
  one; for measured (float) quantities such a tie has no practical weight, so
  they are left out unless asked for (``--boundary``);
- ``param``: each use of a numeric ``$parameter`` shifted across its value
  (×0.5 and ×2; −1 and +1 for a parameter whose value is 0);
- ``drop``: each ``WHERE``/``HAVING`` conjunct replaced by ``TRUE``;
- ``when``: each searched ``CASE WHEN`` condition negated.

A mutant whose SQL errors (or runs past the time limit) on a case is counted as
*killed by an error*: the harness fails any case whose rule errored, and
``leakreport analyze`` reports the rule as errored (exit 3), so that bug cannot
pass unseen. Such kills are counted apart from kills by an expectation.

A mutant's id names the change and the text of the line it is on, e.g.
``>=→> @ AND growth_bytes >= $min_growth_mib * 1048576.0``, so it stays the
same when lines move; a rule lists the mutants that cannot change its result in
its metadata: ``equivalent = [{mutant = "...", reason = "..."}]``. Listed
mutants that no longer exist are reported (stale), as are listed ones a case kills.
"""

from __future__ import annotations

import dataclasses
import re
import time
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import duckdb

from analyzer.packs import _FRONT, Pack, Rule
from analyzer.ruletest import Case, CaseBucket, check_result, collect_cases

_TOKEN = re.compile(
    r"(?P<ws>\s+)|(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<param>\$[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<num>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
    r"|(?P<op>->>|->|::|:=|=>|>=|<=|<>|!=|==|\|\||[<>=])|(?P<quoted>\"(?:[^\"]|\"\")*\")"
    r"|(?P<string>'(?:[^']|'')*')"
    r"|(?P<other>.)",
    re.S,
)
# comparison → (boundary, negation)
_CMP = {
    ">=": (">", "<"),
    ">": (">=", "<="),
    "<=": ("<", ">"),
    "<": ("<=", ">="),
    "=": (None, "<>"),
    "==": (None, "<>"),
    "<>": (None, "="),
    "!=": (None, "="),
}
_CLAUSE_END = {
    "GROUP",
    "ORDER",
    "HAVING",
    "LIMIT",
    "QUALIFY",
    "WINDOW",
    "UNION",
    "EXCEPT",
    "INTERSECT",
}


@dataclass
class Tok:
    kind: str
    text: str
    start: int
    end: int
    depth: int

    @property
    def kw(self) -> str:
        return self.text.upper() if self.kind == "word" else ""


@dataclass
class Mutant:
    rule_id: str
    op: str  # cmp, param, drop, when
    change: str
    line: int  # in the rule file
    id: str
    sql: str
    status: str = "survived"  # killed, killed-by-error, survived, equivalent
    killed_by: str = ""


@dataclass
class RuleResult:
    rule: Rule
    mutants: list[Mutant] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # baseline failures, stale entries
    cases: int = 0
    seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(m.status == status for m in self.mutants)

    @property
    def survivors(self) -> list[Mutant]:
        return [m for m in self.mutants if m.status == "survived"]


def blank_comments(sql: str) -> str:
    """SQL with its comments blanked (strings kept, offsets and lines kept)."""

    def blank(m: re.Match[str]) -> str:
        text = m.group(0)
        return text if text.startswith("'") else re.sub(r"[^\n]", " ", text)

    return re.sub(r"--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'", blank, sql, flags=re.S)


def tokens(sql: str) -> list[Tok]:
    """Tokens of SQL whose comments are already blanked (see blank_comments)."""
    out: list[Tok] = []
    depth = 0
    for m in _TOKEN.finditer(sql):
        kind = m.lastgroup or "other"
        if kind == "ws":
            continue
        text = m.group(0)
        if text == ")":
            depth -= 1
        out.append(Tok(kind, text, m.start(), m.end(), depth))
        if text == "(":
            depth += 1
    return out


def _line_text(sql: str, pos: int) -> str:
    a = sql.rfind("\n", 0, pos) + 1
    b = sql.find("\n", pos)
    return " ".join(sql[a : b if b >= 0 else len(sql)].split())


def _sites(sql: str, params: dict[str, Any]) -> list[tuple[str, int, int, str, str]]:
    """(operator, start, end, replacement, change) for every mutation of the SQL."""
    sql = blank_comments(sql)
    toks = tokens(sql)
    sites: list[tuple[str, int, int, str, str]] = []
    for t in toks:
        if t.kind == "op" and t.text in _CMP:
            for op, new in zip(("bound", "cmp"), _CMP[t.text], strict=True):
                if new:
                    sites.append((op, t.start, t.end, new, f"{t.text}→{new}"))
        elif t.kind == "param":
            name = t.text[1:]
            v = params.get(name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if v == 0:
                shifts = [("-1", f"({t.text} - 1)"), ("+1", f"({t.text} + 1)")]
            elif isinstance(v, int):
                shifts = [("÷2", f"({t.text} // 2)"), ("×2", f"({t.text} * 2)")]
            else:
                shifts = [("×0.5", f"({t.text} * 0.5)"), ("×2", f"({t.text} * 2)")]
            for label, new in shifts:
                sites.append(("param", t.start, t.end, new, f"{t.text}{label}"))
    sites += _conjunct_sites(sql, toks)
    sites += _when_sites(sql, toks)
    return sites


def _conjunct_sites(sql: str, toks: list[Tok]) -> list[tuple[str, int, int, str, str]]:
    out = []
    for i, t in enumerate(toks):
        if t.kw not in ("WHERE", "HAVING"):
            continue
        d, parts, first, between, has_or = t.depth, [], i + 1, False, False
        j = i + 1
        while j < len(toks):
            u = toks[j]
            if u.depth < d or (u.depth == d and (u.kw in _CLAUSE_END or u.text == ";")):
                break
            if u.depth == d and u.kw == "BETWEEN":
                between = True
            elif u.depth == d and u.kw == "AND":
                if between:
                    between = False
                else:
                    parts.append((first, j - 1))
                    first = j + 1
            elif u.depth == d and u.kw == "OR":
                has_or = True
            j += 1
        parts.append((first, j - 1))
        if has_or:  # OR binds looser than AND: the clause is one condition
            parts = [(i + 1, j - 1)]
        for a, b in parts:
            if a > b:
                continue
            start, end = toks[a].start, toks[b].end
            text = " ".join(sql[start:end].split())
            short = text if len(text) <= 60 else text[:57] + "..."
            keep_lines = "\n" * sql[start:end].count("\n")
            out.append(("drop", start, end, "TRUE" + keep_lines, f"drop {t.kw} `{short}`"))
    return out


def _when_sites(sql: str, toks: list[Tok]) -> list[tuple[str, int, int, str, str]]:
    out = []
    stack: list[tuple[int, bool]] = []  # (depth, searched) of each open CASE
    for i, t in enumerate(toks):
        if t.kw == "CASE":
            stack.append((t.depth, i + 1 < len(toks) and toks[i + 1].kw == "WHEN"))
        elif t.kw == "END" and stack and stack[-1][0] == t.depth:
            stack.pop()
        elif t.kw == "WHEN" and stack and stack[-1][1] and stack[-1][0] == t.depth:
            nest, j = 0, i + 1
            while j < len(toks):
                u = toks[j]
                if u.kw == "CASE":
                    nest += 1
                elif u.kw == "END":
                    nest -= 1
                elif u.kw == "THEN" and nest == 0 and u.depth == t.depth:
                    break
                j += 1
            if j >= len(toks) or j == i + 1:
                continue
            start, end = toks[i + 1].start, toks[j - 1].end
            text = " ".join(sql[start:end].split())
            short = text if len(text) <= 60 else text[:57] + "..."
            out.append(("when", start, end, f"NOT ({sql[start:end]})", f"WHEN NOT `{short}`"))
    return out


def body_first_line(rule: Rule) -> int:
    """Line number in the rule file of the SQL's first character."""
    return rule.body_line


OPERATORS = ("cmp", "param", "drop", "when", "bound")
DEFAULT_OPERATORS = ("cmp", "param", "drop", "when")


def mutants(rule: Rule, ops: tuple[str, ...] = DEFAULT_OPERATORS) -> list[Mutant]:
    first = body_first_line(rule)
    out: list[Mutant] = []
    seen: Counter[str] = Counter()
    for op, start, end, new, change in _sites(rule.sql, rule.params):
        if op not in ops:
            continue
        base = f"{change} @ {_line_text(blank_comments(rule.sql), start)}"
        seen[base] += 1
        mid = base if seen[base] == 1 else f"{base} #{seen[base]}"
        sql = rule.sql[:start] + new + rule.sql[end:]
        line = first + rule.sql[:start].count("\n")
        out.append(Mutant(rule.id, op, change, line, mid, sql))
    return out


def equivalents(rule: Rule) -> dict[str, str]:
    """The rule's ``equivalent`` metadata: mutant id → reason."""
    m = _FRONT.match(rule.path.read_text(encoding="utf-8-sig"))
    meta = tomllib.loads(m.group(2)) if m else {}
    out: dict[str, str] = {}
    for e in meta.get("equivalent", []):
        if not isinstance(e, dict) or not e.get("mutant") or not str(e.get("reason", "")).strip():
            raise ValueError(f"{rule.path}: each equivalent entry needs a mutant and a reason")
        out[str(e["mutant"])] = str(e["reason"])
    return out


def check_rule(
    rule: Rule,
    cases: list[Case],
    timeout_s: float = 20.0,
    ops: tuple[str, ...] = DEFAULT_OPERATORS,
) -> RuleResult:
    """Run the rule's cases against each of its mutants."""
    t0 = time.perf_counter()
    res = RuleResult(rule, mutants(rule, ops), cases=len(cases))
    if not cases:
        res.problems.append("no test cases: every mutant survives")
    for case in cases:
        alive = [m for m in res.mutants if m.status == "survived"]
        try:
            cb = CaseBucket(case).__enter__()
        except (ValueError, TypeError, KeyError, RuntimeError, duckdb.Error) as e:
            res.problems.append(f"case {case.id}: its data cannot be loaded: {e}")
            continue
        try:
            base = check_result(case, *cb.run(rule, timeout_s))
            if base:
                res.problems.append(f"case {case.id} fails on the rule as written: {base[0]}")
                continue
            for m in alive:
                status, reason, found = cb.run(dataclasses.replace(rule, sql=m.sql), timeout_s)
                problems = check_result(case, status, reason, found)
                if problems:
                    m.status = "killed-by-error" if status == "errored" else "killed"
                    m.killed_by = f"{case.id}: {problems[0]}"
        finally:
            cb.__exit__(None, None, None)
    try:
        listed = equivalents(rule)
    except (ValueError, tomllib.TOMLDecodeError) as e:
        res.problems.append(str(e))
        listed = {}
    ids = {m.id: m for m in res.mutants}
    every = {m.id for m in mutants(rule, OPERATORS)}
    for mid, reason in listed.items():
        hit = ids.get(mid)
        if hit is None and mid in every:
            continue  # an operator not asked for this time
        if hit is None:
            res.problems.append(f"equivalent entry matches no mutant (stale): {mid!r}")
        elif hit.status == "survived":
            hit.status, hit.killed_by = "equivalent", reason
        else:
            res.problems.append(f"listed as equivalent but a case kills it: {mid!r}")
    res.seconds = time.perf_counter() - t0
    return res


def check_packs(
    packs: list[Pack],
    only: set[str] | None = None,
    timeout_s: float = 20.0,
    ops: tuple[str, ...] = DEFAULT_OPERATORS,
) -> list[RuleResult]:
    cases = collect_cases(packs)
    out = []
    for rule in (r for p in packs for r in p.rules):
        if only is None or rule.id in only:
            mine = [c for c in cases if c.rule_id == rule.id]
            out.append(check_rule(rule, mine, timeout_s, ops))
    return out


def report(results: list[RuleResult], verbose: bool = False) -> str:
    lines = []
    for r in results:
        n = len(r.mutants)
        lines.append(
            f"{r.rule.id:8} {n:3} mutants: {r.count('killed'):3} killed, "
            f"{r.count('killed-by-error'):2} by an error, {r.count('equivalent'):2} equivalent, "
            f"{len(r.survivors):2} survived  ({r.cases} cases, {r.seconds:.1f}s)"
        )
        for p in r.problems:
            lines.append(f"  ! {p}")
        for m in r.survivors:
            lines.append(f"  {r.rule.path}:{m.line}: survived: {m.id}")
        if verbose:
            for m in r.mutants:
                if m.status != "survived":
                    lines.append(f"  {r.rule.path}:{m.line}: {m.status}: {m.id} ({m.killed_by})")
    total = sum(len(r.mutants) for r in results)
    surv = sum(len(r.survivors) for r in results)
    probs = sum(len(r.problems) for r in results)
    secs = sum(r.seconds for r in results)
    lines.append(
        f"{len(results)} rules, {total} mutants, {surv} survived unexplained, "
        f"{probs} problems, {secs:.1f}s"
    )
    return "\n".join(lines)


def passed(results: list[RuleResult]) -> bool:
    return bool(results) and not any(r.survivors or r.problems for r in results)
