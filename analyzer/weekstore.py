"""Stored findings of finished weeks: ``leakreport fleet`` reuses them while provably current.

``leakreport rollup`` (the daily cron step) analyses each finished ISO week that has data
with the default pack and options (the very call ``fleet`` makes) and stores the findings
document in the bucket, under :data:`STORE_DIR`: ``<bucket>/_week_findings/2026-W48.json``.
That folder is NOT a trace table: it holds JSON, not Parquet, and every reader of trace
data (the analysis, ``compact``, ``rollup``'s tier, the collector) lists only the tables
named in ``collector.schema.TABLES`` (``collector.layout.list_entries``), so it is never
read as traces. The leading ``_`` also keeps Hive-style tools from taking it for data.

A stored document is used only when its key matches the key computed now. The key hashes
everything the document depends on (:func:`week_key`): this code (the analyzer's Python and
SQL files, every rule pack file, the trace layout and schema modules, the leakreport,
findings and trace schema versions, DuckDB's version), the options that change results
(extra packs, ``--param`` overrides, executor, host batch size, rule time limit), the scope
(the week's first and last day) and the raw files in scope: per file its table, path
relative to the bucket, size and modification time in ns (on S3: size and LastModified, as
pyarrow's filesystem lists them; the writers never overwrite a key, they write new names).
Only clean analyses are stored: no file left out, no row quarantined, no rule errored.
A document that cannot be read is a warning, never an error: the week is analysed.

What is stored is the fleet page's part of the document (:func:`fleet_part`): the run,
findings, hosts and coverage whole, and of each GPU's chart series only its last point
(where the GPU's data ends, from which a forecast counts); KV and allocator charts are
left out. The page never draws them, and they were 99 % of the bytes (4.1 MB for 25 hosts,
30 ms to parse, against 0.1 s for the plain scan of the week's samples).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analyzer.findings import FINDINGS_SCHEMA_VERSION, QUARANTINED, FindingsDocument, iso_utc
from analyzer.fleet import week_of, week_range
from collector import layout
from collector.schema import SCHEMA_VERSION, TABLES
from collector.store import is_s3, read_small, root_of, s3_filesystem, write_small

STORE_DIR = "_week_findings"  # not a trace table: see the module docstring
STORE_FORMAT = 2  # 2: the fleet part only (fleet_part)
_ANALYZER = Path(__file__).resolve().parent
_CODE = (
    _ANALYZER.parent / "collector" / "schema.py",
    _ANALYZER.parent / "collector" / "layout.py",
    _ANALYZER.parent / "collector" / "layoutscan.py",
    _ANALYZER.parent / "collector" / "filecheck.py",
)

Analyse = Callable[[dt.date, dt.date], FindingsDocument]
Say = Callable[[str], None]


@dataclass(frozen=True)
class RawFile:
    """One raw trace file, as the key sees it."""

    table: str
    rel: str  # path relative to the bucket
    size: int
    mtime_ns: int
    day: dt.date


def settings(opts: Any) -> dict[str, Any]:
    """The analysis options that can change a findings document (``opts``: the commands'
    AnalysisOptions; scope options aside, which the key takes from the week)."""
    return {
        "packs": [str(p) for p in opts.packs],
        "params": list(opts.params),  # in order: a later --param of a key wins
        "executor": opts.executor,
        "batch_hosts": int(opts.batch_hosts),
        "rule_timeout": float(opts.rule_timeout),
    }


def _root(bucket: str | os.PathLike[str]) -> tuple[str, Any]:
    fs = s3_filesystem() if is_s3(bucket) else None
    return root_of(bucket, fs), fs


def raw_files(
    bucket: str | os.PathLike[str], date_ok: layout.DateOk, fs: Any = None
) -> list[RawFile]:
    """Every raw trace file dated ``date_ok`` (the files an analysis of it may read)."""
    root = root_of(bucket, fs)
    out: list[RawFile] = []
    for table in TABLES:
        for e in layout.list_entries(root, table, fs, date_ok):
            try:  # S3's listing gave size and mtime; a local file (or an S3 object without) asks
                size, mtime = layout.stamp_of(e, fs)
            except OSError:
                continue  # gone since the listing (compaction): the analysis will not see it
            rel = e.path[len(root) :].lstrip("/").replace(os.sep, "/")  # listed under root
            out.append(RawFile(table, rel, size, mtime, e.day))
    return out


def _pack_files(pack: Path) -> list[Path]:
    return [pack / "pack.toml", *sorted((pack / "rules").glob("*.sql"))]


def _duckdb_release() -> str:
    """DuckDB's installed release, from its dist-info folder's name (importlib.metadata
    would cost 30 ms, importing duckdb 50 ms, on every fleet page)."""
    from importlib.util import find_spec

    spec = find_spec("duckdb")
    if spec is None or spec.origin is None:
        return "?"
    site = Path(spec.origin).parent.parent
    return ",".join(sorted(p.name for p in site.glob("duckdb-*info"))) or spec.origin


def code_hash(extra_packs: Iterable[str] = ()) -> str:
    """The analyzer's code and SQL (rollups, built-in packs), the given packs' files and the
    versions a findings document depends on."""
    from analyzer import __version__

    duck = _duckdb_release()
    h = hashlib.sha256(
        f"{STORE_FORMAT}/{__version__}/{FINDINGS_SCHEMA_VERSION}/{SCHEMA_VERSION}/{duck}\n".encode()
    )
    mine = [_ANALYZER.rglob(pattern) for pattern in ("*.py", "*.sql", "pack.toml")]
    files = [
        (f"analyzer/{p.relative_to(_ANALYZER).as_posix()}", p) for g in mine for p in sorted(g)
    ]
    files += [(f"collector/{p.name}", p) for p in _CODE]
    for name, p in files:
        h.update(f"{name}\0".encode())
        h.update(hashlib.sha256(p.read_bytes()).digest())
    for i, extra in enumerate(extra_packs):  # where it is read from is part of the document
        h.update(f"pack {i} {extra}\0".encode())
        for p in _pack_files(Path(extra)):
            h.update(f"{p.name}\0".encode())
            try:
                h.update(hashlib.sha256(p.read_bytes()).digest())
            except OSError as e:  # the analysis will refuse it; the key just differs
                h.update(f"unreadable: {e}".encode())
    return h.hexdigest()


def week_key(
    files: Iterable[RawFile], since: dt.date, until: dt.date, opts: dict[str, Any], code: str
) -> str:
    """What a week's findings document depends on (see the module docstring), as three
    hashes joined by dots, one per :data:`STALE` reason: the code, the options, the week's
    files (so a stale document can say which changed)."""
    h = hashlib.sha256(f"{since}..{until}\n".encode())
    for f in sorted(files, key=lambda f: (f.table, f.rel)):
        if since <= f.day <= until:
            h.update(f"{f.table}\t{f.rel}\t{f.size}\t{f.mtime_ns}\n".encode())
    o = hashlib.sha256(json.dumps(opts, sort_keys=True).encode())
    return ".".join((code, o.hexdigest(), h.hexdigest()))


# why a stored document is not current, by the part of its key that differs
STALE = (
    "leakreport, DuckDB or a rule pack's files changed since they were stored",
    "other options than when they were stored (--pack, --param, --executor, "
    "--batch-hosts, --rule-timeout)",
    "the week's trace files changed since they were stored (a late, rewritten or compacted file)",
)


def stale_reason(stored: str, key: str) -> str:
    """Why a document stored under key ``stored`` is not current for ``key``."""
    old, new = stored.split("."), key.split(".")
    if len(old) != len(new):
        return "stored by another release of leakreport"
    return "; ".join(why for a, b, why in zip(old, new, STALE, strict=True) if a != b)


def _within(since: dt.date, until: dt.date) -> layout.DateOk:
    return lambda d: since <= d <= until


def store_path(root: str, week: str) -> str:
    return f"{root}/{STORE_DIR}/{week}.json"


def clean(doc: FindingsDocument) -> str | None:
    """Why ``doc`` must not be stored (None: it may)."""
    if not doc.hosts:
        return "no host in scope"
    reasons = doc.incomplete_reasons()
    if reasons:
        return reasons[0]
    quarantined = [g for g in doc.run.gaps if QUARANTINED in g]
    if quarantined:
        return quarantined[0]
    return None


def load(
    bucket: str | os.PathLike[str],
    week: str,
    key: str,
    warn: Say,
    stale: list[str] | None = None,
) -> FindingsDocument | None:
    """The stored document of ``week`` when its key is ``key``; None when there is none, it
    is stale (then why goes into ``stale``), or it cannot be read (``warn`` says why)."""
    stale = [] if stale is None else stale
    root, fs = _root(bucket)
    path = store_path(root, week)
    try:
        raw = read_small(path, fs)
    except OSError as e:
        warn(f"leakreport: warning: {path}: cannot read the stored findings ({e}); analysing")
        return None
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or not isinstance(data.get("format"), int):
            raise ValueError(f"not a stored week (format {STORE_FORMAT} expected)")
        if data["format"] != STORE_FORMAT or not isinstance(data.get("key"), str):
            stale.append("stored by another release of leakreport")
            return None  # the next rollup rewrites it
        if data["key"] != key:
            stale.append(stale_reason(data["key"], key))
            return None
        doc = FindingsDocument.from_dict(data["document"])
    except Exception as e:  # noqa: BLE001 - any damage: warn and analyse, never crash
        warn(f"leakreport: warning: {path}: stored findings unreadable ({e}); analysing")
        return None
    doc.run.bucket = str(bucket)  # as given now, like an analysis would say
    return doc


def fleet_part(doc: FindingsDocument) -> dict[str, Any]:
    """``doc`` as stored: what the fleet page reads (see the module docstring)."""
    d = doc.to_dict()
    for g in d["series"]:
        for k in ("t", "used_max", "used_min"):
            g[k] = g[k][-1:]
        g["idle_windows"], g["trend"] = [], []
    d["kv"], d["alloc"] = [], []
    return d


def save(bucket: str | os.PathLike[str], week: str, key: str, doc: FindingsDocument) -> str:
    """Store ``doc`` as the findings of ``week`` under ``key``, atomically: a temporary file
    renamed over the old one (S3: one put). Returns where."""
    root, fs = _root(bucket)
    path = store_path(root, week)
    body = json.dumps(
        {
            "format": STORE_FORMAT,
            "week": week,
            "key": key,
            "stored_at": iso_utc(dt.datetime.now(dt.UTC)),
            "document": fleet_part(doc),
        },
        separators=(",", ":"),
    ).encode()
    write_small(path, body, fs)
    return path


@dataclass
class Stored:
    stored: int = 0  # weeks analysed and stored now
    current: int = 0  # weeks whose stored findings were already current
    unclean: list[str] = field(default_factory=list)  # "week: why not stored"
    # of those, weeks not done: an incomplete analysis (analyze: exit 3), or trace files
    # that changed while it ran; both for the next rollup to do (rollup: exit 3)
    incomplete: int = 0


def finished_weeks(files: Iterable[RawFile], before: dt.date) -> list[str]:
    """ISO weeks with a raw file whose seven days all lie before ``before``."""
    weeks = {week_of(f.day) for f in files}
    return sorted(w for w in weeks if week_range(w)[1] < before)


def store_finished(
    bucket: str | os.PathLike[str],
    before: dt.date,
    analyse: Analyse,
    opts: dict[str, Any],
    say: Say,
    progress: Say | None = None,
) -> Stored:
    """Analyse and store every finished week (all days before ``before``, and before today
    UTC: the current week is never stored) whose stored findings are missing or stale.
    ``say``: warnings (a stored file that cannot be read); ``progress``: each week stored."""
    before = min(before, dt.datetime.now(dt.UTC).date())
    _root_s, fs = _root(bucket)
    files = raw_files(bucket, lambda d: d < before, fs)
    code = code_hash(opts["packs"])
    res = Stored()
    for week in finished_weeks(files, before):
        since, until = week_range(week)
        key = week_key(files, since, until, opts, code)
        if load(bucket, week, key, say) is not None:
            res.current += 1
            continue
        doc = analyse(since, until)
        why = clean(doc)
        if why is not None:
            res.unclean.append(f"{week}: {why}")
            res.incomplete += bool(doc.incomplete_reasons())
            continue
        # files that arrived during the analysis may or may not be in it: store nothing
        now_files = raw_files(bucket, _within(since, until), fs)
        if week_key(now_files, since, until, opts, code) != key:
            res.unclean.append(f"{week}: trace files changed during the analysis")
            res.incomplete += 1
            continue
        save(bucket, week, key, doc)
        res.stored += 1
        if progress:
            progress(f"week {week}: findings stored")
    return res


def findings_for(
    bucket: str | os.PathLike[str],
    week: str,
    analyse: Analyse,
    opts: dict[str, Any],
    say: Say,
    *,
    skip_empty: bool = False,
) -> tuple[FindingsDocument | None, str]:
    """A week's findings document and where it came from ("stored findings", "analysed",
    "analysed; stored findings not current: why", or "no data": ``skip_empty`` and no raw
    file dated in the week, then no document).
    Never writes."""
    since, until = week_range(week)
    root, fs = _root(bucket)
    exists = True
    if fs is None:
        exists = os.path.isfile(store_path(root, week))
    if exists or skip_empty:
        files = raw_files(bucket, _within(since, until), fs)
        if skip_empty and not files:
            return None, "no data"
        if exists:
            key = week_key(files, since, until, opts, code_hash(opts["packs"]))
            stale: list[str] = []
            doc = load(bucket, week, key, say, stale)
            if doc is not None:
                return doc, "stored findings"
            if stale:
                return analyse(since, until), f"analysed; stored findings not current: {stale[0]}"
    return analyse(since, until), "analysed"
