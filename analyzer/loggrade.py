"""Grade the log parser against hand-labelled lines: found / fields right / false events.

A labels file is JSON Lines, one expected event per row::

    {"line": 12, "event": "oom", "fields": {"gpu": 0, "tried_bytes": 39845888}}

optionally with ``"ts"`` (the expected UTC timestamp) and ``"text"`` (the start of
the line, checked so a label that drifted from its line is reported, not graded).
Lines without a row must yield no event. The log file a labels file describes is
``"file"`` in its first row (relative to the labels file), else the file of the
same name next to the labels folder (``labels/x.jsonl`` -> ``x.txt`` or ``x.log``).
The family (sglang, vllm, torch, other) is ``"family"`` in the first row, else the
start of the log file's name.

A label is *found* when the parser emits its event on its line, and *right* when
the event's fields equal the labelled fields exactly (floats to 1e-9; no field
missing, none extra) and its ``ts`` matches where one is labelled. A *false event*
is one the parser emits where no label says so.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.importers import zone

FAMILIES = ("sglang", "vllm", "torch")


class LabelError(ValueError):
    """A labels file that cannot be read; the message names the file and line."""


@dataclass
class FileGrade:
    labels: str
    log: str
    family: str
    labelled: int = 0
    found: int = 0
    right: int = 0
    false_events: int = 0
    crashed: str | None = None  # the parser's error, when it raised
    problems: list[str] = field(default_factory=list)  # one line per miss / wrong / false


@dataclass
class Grade:
    files: list[FileGrade] = field(default_factory=list)

    def families(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for f in self.files:
            t = out.setdefault(
                f.family,
                {
                    "files": 0,
                    "labelled": 0,
                    "found": 0,
                    "right": 0,
                    "false_events": 0,
                    "crashes": 0,
                },
            )
            t["files"] += 1
            t["labelled"] += f.labelled
            t["found"] += f.found
            t["right"] += f.right
            t["false_events"] += f.false_events
            t["crashes"] += f.crashed is not None
        return dict(sorted(out.items()))

    @property
    def perfect(self) -> bool:
        return all(
            f.crashed is None and f.right == f.labelled and not f.false_events for f in self.files
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "families": self.families(),
            "files": [vars(f) for f in self.files],
        }

    def table(self) -> str:
        """Per file, then per family: labelled, found, fields right, false events, crashes."""
        head = f"{'':34} {'labelled':>8} {'found':>7} {'right':>7} {'false':>6} {'crash':>6}"
        rows = [head]
        for f in self.files:
            rows.append(
                f"{Path(f.log).name[:34]:34} {f.labelled:8} {f.found:7} {f.right:7} "
                f"{f.false_events:6} {('yes' if f.crashed else '-'):>6}"
            )
        rows.append("")
        for fam, t in self.families().items():
            pct = 100.0 * t["right"] / t["labelled"] if t["labelled"] else 100.0
            rows.append(
                f"{'family ' + fam:34} {t['labelled']:8} {t['found']:7} {t['right']:7} "
                f"{t['false_events']:6} {t['crashes']:6}   {pct:5.1f} % right"
            )
        return "\n".join(rows) + "\n"


def read_labels(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise LabelError(f"{path}: cannot read: {e}") from None
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as e:
            raise LabelError(f"{path}:{n}: not JSON: {e.msg}") from None
        if not isinstance(row, dict):
            raise LabelError(f"{path}:{n}: a label is a JSON object")
        if not isinstance(row.get("line"), int) or row["line"] < 1:
            raise LabelError(f"{path}:{n}: 'line' must be a line number (1 or more)")
        if not isinstance(row.get("event"), str):
            raise LabelError(f"{path}:{n}: 'event' must be an event name")
        if not isinstance(row.get("fields", {}), dict):
            raise LabelError(f"{path}:{n}: 'fields' must be an object")
        rows.append(row)
    return rows


def log_file_for(labels: Path, rows: list[dict[str, Any]]) -> Path:
    if rows and isinstance(rows[0].get("file"), str):
        return (labels.parent / rows[0]["file"]).resolve()
    for ext in (".txt", ".log"):
        cand = labels.parent.parent / (labels.stem + ext)
        if cand.is_file():
            return cand
    raise LabelError(
        f'{labels}: no log file found for these labels: name it with "file" in the first '
        f"row, or put {labels.stem}.txt / {labels.stem}.log next to the labels folder"
    )


def family_of(log: Path, rows: list[dict[str, Any]]) -> str:
    if rows and isinstance(rows[0].get("family"), str):
        return str(rows[0]["family"])
    name = log.name.lower()
    return next((f for f in FAMILIES if name.startswith(f)), "other")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return bool(a == b)


def _fields_equal(want: dict[str, Any], got: dict[str, Any]) -> bool:
    return want.keys() == got.keys() and all(_same(want[k], got[k]) for k in want)


def grade_file(labels: Path, *, year: int | None = None, tz: str = "UTC") -> FileGrade:
    from analyzer import logparse

    rows = read_labels(labels)
    log = log_file_for(labels, rows)
    g = FileGrade(str(labels), str(log), family_of(log, rows), labelled=len(rows))
    try:
        lines = logparse.read_lines(log)
    except OSError as e:
        raise LabelError(f"{log}: cannot read the log file: {e}") from None
    text = lines.to_list()
    for r in rows:
        if "text" in r and (
            r["line"] > len(text) or not str(text[r["line"] - 1]).startswith(r["text"])
        ):
            raise LabelError(
                f"{labels}: the label for line {r['line']} expects a line starting "
                f"{r['text']!r}; the log file has something else there"
            )
    try:
        got = {
            (e["line"], e["event"]): e
            for e in logparse.events(logparse.parse_frame(lines, year=year, tz=tz))
        }
    except Exception as exc:  # noqa: BLE001 - a crash is a result to report, not to raise
        g.crashed = f"{type(exc).__name__}: {exc}"
        g.problems.append(f"parser raised {g.crashed}")
        return g
    wanted = {(r["line"], r["event"]): r for r in rows}
    for key, r in sorted(wanted.items()):
        ev = got.get(key)
        if ev is None:
            g.problems.append(f"line {key[0]}: {key[1]} not found")
            continue
        g.found += 1
        want = r.get("fields", {})
        if not _fields_equal(want, ev["fields"]):
            g.problems.append(f"line {key[0]}: {key[1]} fields {ev['fields']} (want {want})")
        elif "ts" in r and r["ts"] != ev["ts"]:
            g.problems.append(f"line {key[0]}: {key[1]} ts {ev['ts']} (want {r['ts']})")
        else:
            g.right += 1
    for key in sorted(set(got) - set(wanted)):
        g.false_events += 1
        g.problems.append(f"line {key[0]}: false {key[1]} {got[key]['fields']}")
    return g


def grade(paths: list[Path], *, year: int | None = None, tz: str = "UTC") -> Grade:
    """Grade every labels file in ``paths`` (files, or folders of ``*.jsonl``)."""
    zone(tz)  # an unknown zone fails here, naming it
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            files += sorted(p.glob("*.jsonl"))
        elif p.is_file():
            files.append(p)
        else:
            raise LabelError(f"{p}: no such labels file or folder")
    if not files:
        raise LabelError(f"no labels files (*.jsonl) in {', '.join(map(str, paths))}")
    return Grade([grade_file(f, year=year, tz=tz) for f in files])
