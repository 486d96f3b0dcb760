"""Rule packs: one SQL file per rule, TOML metadata in a leading comment.

A pack is a folder with ``pack.toml`` and ``rules/*.sql`` (and ``tests/``).
Loading never stops at a broken rule: it becomes a :class:`RuleError` naming
its file and line, and the other rules load.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analyzer.categories import CATEGORIES, SEVERITIES
from collector.schema import TABLES

BUILTIN_PACKS = Path(__file__).parent / "packs"
DEFAULT_PACK = BUILTIN_PACKS / "default"

_FRONT = re.compile(r"\A(\s*)/\*---[ \t]*\n(.*?)\n---\*/", re.S)
_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_PARAM_REF = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")

REQUIRED_KEYS = {
    "id": str,
    "name": str,
    "title": str,
    "category": str,
    "severity": str,
    "requires": list,
    "evidence": list,
    "description": str,
    "remediation": str,
}
OPTIONAL_KEYS = {
    "references": list,
    "params": dict,
    "enabled": bool,
    "equivalent": list,
    "missing_hint": str,  # how to collect the input the rule lacked (shown when skipped)
}
STANDARD_COLUMNS = ("host", "gpu", "pid", "start", "end", "summary", "severity")


class PackError(Exception):
    """A pack folder that cannot be used at all (missing, no pack.toml)."""


@dataclass
class RuleError:
    path: Path
    line: int
    message: str
    rule_id: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


_SQL_LINE = re.compile(r"\bLINE (\d+):")


@dataclass
class Rule:
    id: str
    name: str
    title: str
    category: str
    severity: str
    requires: list[str]
    evidence: list[str]
    description: str
    remediation: str
    sql: str
    path: Path
    pack: str
    references: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    enabled: bool = True
    missing_hint: str = ""
    body_line: int = 1  # the rule file's line of the SQL's first character

    def located(self, e: BaseException) -> str:
        """``path:line: error`` for an error of its SQL: DuckDB counts ``LINE n`` from the
        SQL's first line, after the front-matter; made the file's line here."""
        text = str(e)
        m = _SQL_LINE.search(text)
        if m is None:
            return f"{self.path}: {text}"
        at = self.body_line + int(m.group(1)) - 1
        return f"{self.path}:{at}: {_SQL_LINE.sub(f'LINE {at}:', text, count=1)}"

    def bound_params(self, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """The parameters the SQL refers to, with overrides applied."""
        values = {**self.params, **(overrides or {})}
        return {k: values[k] for k in referenced_params(self.sql)}


@dataclass
class Pack:
    name: str
    version: str
    path: Path
    description: str = ""
    rules: list[Rule] = field(default_factory=list)
    errors: list[RuleError] = field(default_factory=list)


def strip_sql_comments_and_strings(sql: str) -> str:
    """SQL with comments and string literals blanked (line numbers kept)."""

    def blank(m: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    return re.sub(r"--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'", blank, sql, flags=re.S)


def referenced_params(sql: str) -> list[str]:
    return sorted(set(_PARAM_REF.findall(strip_sql_comments_and_strings(sql))))


def _toml_line(err: tomllib.TOMLDecodeError) -> int:
    m = re.search(r"line (\d+)", str(err))
    return int(m.group(1)) if m else 1


def _key_line(front: str, key: str) -> int:
    for i, line in enumerate(front.splitlines(), 1):
        if re.match(rf"\s*{re.escape(key)}\s*=", line):
            return i
    return 1


def parse_rule(path: Path, pack: str = "") -> Rule | RuleError:
    """Parse and validate one rule file."""
    rule_id = path.stem
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        return RuleError(path, 1, f"cannot read rule: {e}", rule_id)
    m = _FRONT.match(text)
    if not m:
        return RuleError(
            path,
            1,
            "missing metadata: the file must start with a /*--- ... ---*/ TOML block",
            rule_id,
        )
    first = m.group(1).count("\n") + 2  # line number of the first metadata line
    front = m.group(2)
    try:
        meta = tomllib.loads(front)
    except tomllib.TOMLDecodeError as e:
        return RuleError(path, first - 1 + _toml_line(e), f"invalid TOML metadata: {e}", rule_id)

    problems: list[tuple[int, str]] = []  # every metadata problem, so one edit fixes them all

    def err(key: str, msg: str) -> None:
        problems.append((first - 1 + _key_line(front, key), msg))

    for key, typ in REQUIRED_KEYS.items():
        if key not in meta:
            problems.append((first, f"metadata lacks required key {key!r}"))
        elif not isinstance(meta[key], typ):
            err(key, f"{key!r} must be a {typ.__name__}")
    for key, value in meta.items():
        if key in OPTIONAL_KEYS:
            if not isinstance(value, OPTIONAL_KEYS[key]):
                err(key, f"{key!r} must be a {OPTIONAL_KEYS[key].__name__}")
        elif key not in REQUIRED_KEYS:
            err(key, f"unknown metadata key {key!r}")

    def valid(key: str) -> bool:
        return isinstance(meta.get(key), REQUIRED_KEYS[key])

    if valid("id") and meta["id"] != rule_id:
        err("id", f"id {meta['id']!r} must equal the file name {rule_id!r}")
    if not _ID.match(rule_id):
        err("id", f"id {rule_id!r} must be letters, digits and underscores")
    if valid("category") and meta["category"] not in CATEGORIES:
        err(
            "category",
            f"unknown category {meta['category']!r} (use one of {', '.join(CATEGORIES)})",
        )
    if valid("severity") and meta["severity"] not in SEVERITIES:
        err(
            "severity",
            f"unknown severity {meta['severity']!r} (use one of {', '.join(SEVERITIES)})",
        )
    for entry in meta["requires"] if valid("requires") else []:  # "a|b" = either table will do
        for t in str(entry).split("|"):
            if t not in TABLES:
                err("requires", f"requires unknown table {t!r} (known: {', '.join(TABLES)})")
    if valid("evidence") and not all(isinstance(c, str) for c in meta["evidence"]):
        err("evidence", "evidence must list column names")
    params = meta.get("params", {}) if isinstance(meta.get("params", {}), dict) else {}
    for k, v in params.items():
        if not isinstance(v, (int, float, str, bool)):
            err(k, f"parameter {k!r} must be a number, string or boolean")
    if problems:
        problems.sort()
        (line, msg), rest = problems[0], problems[1:]
        if rest:
            msg += "; also " + "; ".join(f"line {n}: {m}" for n, m in rest)
        return RuleError(path, line, msg, rule_id)
    sql = text[m.end() :]
    if not sql.strip():
        return RuleError(
            path, text[: m.end()].count("\n") + 1, "rule has no SQL after its metadata", rule_id
        )
    body_start = text[: m.end()].count("\n")
    stripped = strip_sql_comments_and_strings(sql)
    for pm in _PARAM_REF.finditer(stripped):
        if pm.group(1) not in params:
            line = body_start + stripped[: pm.start()].count("\n") + 1
            return RuleError(
                path, line, f"SQL uses ${pm.group(1)} but [params] does not define it", rule_id
            )
    return Rule(
        id=rule_id,
        name=meta["name"],
        title=meta["title"],
        category=meta["category"],
        severity=meta["severity"],
        requires=list(meta["requires"]),
        evidence=list(meta["evidence"]),
        description=meta["description"].strip(),
        remediation=meta["remediation"].strip(),
        sql=sql,
        path=path,
        pack=pack,
        references=list(meta.get("references", [])),
        params=dict(params),
        enabled=meta.get("enabled", True),
        missing_hint=meta.get("missing_hint", "").strip(),
        body_line=body_start + 1,
    )


def load_pack(folder: str | Path) -> Pack:
    path = Path(folder)
    manifest = path / "pack.toml"
    if not path.is_dir():
        raise PackError(f"{path}: no such pack folder")
    if not manifest.is_file():
        raise PackError(f"{path}: not a rule pack (no pack.toml)")
    try:
        meta = tomllib.loads(manifest.read_text(encoding="utf-8-sig"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise PackError(f"{manifest}: {e}") from e
    name = str(meta.get("name") or path.name)
    pack = Pack(name, str(meta.get("version", "0")), path, str(meta.get("description", "")))
    rules = path / "rules"
    if not rules.is_dir():
        near = sorted(d.name + "/" for d in path.iterdir() if d.is_dir() and d.name != "tests")
        raise PackError(
            f"{path}: no rules/ folder: a pack's rules are rules/<ID>.sql"
            + (f" (it has {', '.join(near)})" if near else "")
        )
    for f in sorted(rules.glob("*.sql")):
        r = parse_rule(f, name)
        (pack.errors if isinstance(r, RuleError) else pack.rules).append(r)  # type: ignore[arg-type]
    # files that look like rules but would be passed over: said, not skipped in silence
    for f in sorted(rules.rglob("*")):
        if f.suffix.lower() == ".sql" and (f.suffix != ".sql" or f.parent != rules):
            why = "not in rules/ itself" if f.parent != rules else "its name must end in .sql"
            pack.errors.append(RuleError(f, 1, f"not read: {why}", f.stem))
    if not pack.rules and not pack.errors:
        raise PackError(f"{rules}: no rules (rules/<ID>.sql files)")
    return pack


def load_packs(extra: list[str | Path] | None = None, *, builtin: bool = True) -> list[Pack]:
    packs = [load_pack(DEFAULT_PACK)] if builtin else []
    if builtin and not packs[0].rules and not packs[0].errors:
        raise PackError(
            f"{DEFAULT_PACK / 'rules'}: the built-in pack has no rules - this installation is incomplete; reinstall leakreport"
        )
    given: set[Path] = {DEFAULT_PACK.resolve()} if builtin else set()
    for folder in extra or []:  # a pack given twice (./p and p/) is read once
        if Path(folder).resolve() not in given:
            given.add(Path(folder).resolve())
            packs.append(load_pack(folder))
    seen: dict[str, Path] = {}
    for p in packs:
        for r in list(p.rules):
            if r.id in seen:
                p.rules.remove(r)
                p.errors.append(
                    RuleError(r.path, 1, f"rule id {r.id!r} already defined by {seen[r.id]}", r.id)
                )
            else:
                seen[r.id] = r.path
    return packs


def param_type_error(name: str, default: Any, value: Any) -> str | None:
    """Why ``value`` cannot stand in for a parameter whose default is ``default`` (a number
    for a number, true/false for a flag, a list for a list); None when it can. A rule
    given a string where it compares numbers would fail and its findings go missing."""

    def kind(v: Any) -> str:
        if isinstance(v, bool):
            return "true or false"
        if isinstance(v, int | float):
            return "a number"
        return "a list" if isinstance(v, list) else "text"

    want, got = kind(default), kind(value)
    if want == got or want == "text":
        return None
    return f"{name}={value!r}: expected {want} (the default is {default!r})"


def parse_param_overrides(items: list[str]) -> dict[str, dict[str, Any]]:
    """``RULE.key=value`` items into {rule: {key: value}}; values read as TOML."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        target, eq, raw = item.partition("=")
        rule, dot, key = target.partition(".")
        if not eq or not dot or not rule or not key:
            raise ValueError(f"--param {item!r}: expected RULE.key=value")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        out.setdefault(rule, {})[key] = value
    return out
