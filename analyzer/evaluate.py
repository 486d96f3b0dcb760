"""`make eval`: the whole labelled scenario suite, scored.

Writes a confusion table per category (true positives, false positives,
misses) and, for every labelled leak, when it was first flagged relative to
its onset and its OOM, by analysing growing prefixes of the trace.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import analyzer.sim  # noqa: F401 - makes ``simulator`` importable before a reinstall
from analyzer.bucket import Scope
from analyzer.categories import CATEGORIES, LEAK_CATEGORIES
from analyzer.findings import FindingsDocument
from analyzer.packs import Pack, load_packs
from analyzer.runner import analyze
from simulator.generate import DEFAULT_START, simulate
from simulator.model import exhaustion_s

TARGET_SHARE = 0.20  # flag each leak within the first 20 % of onset -> OOM


@dataclass
class Detection:
    host: str
    scenario: str
    onset: str
    horizon: str  # the first OOM, else when the leak would exhaust its resource (simulator truth)
    horizon_is_oom: bool
    first_flagged: str | None
    share: float | None  # (first_flagged - onset) / (horizon - onset)
    category: str | None


@dataclass
class EvalResult:
    hosts: int
    hours: float
    seed: int
    confusion: dict[str, dict[str, int]] = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)
    detections: list[Detection] = field(default_factory=list)

    @property
    def leak_false_positives(self) -> int:
        return sum(v["fp"] for k, v in self.confusion.items() if k in LEAK_CATEGORIES)

    @property
    def misses(self) -> int:
        return sum(v["fn"] for v in self.confusion.values())

    @property
    def late(self) -> list[Detection]:
        return [d for d in self.detections if d.share is None or d.share > TARGET_SHARE]

    def targets_met(self) -> bool:
        return self.misses == 0 and self.leak_false_positives == 0 and not self.late

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["targets"] = {
            "misses": self.misses,
            "leak_false_positives": self.leak_false_positives,
            "late_detections": len(self.late),
            "target_share": TARGET_SHARE,
            "met": self.targets_met(),
        }
        return d


def _keyed(doc: FindingsDocument) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for f in doc.findings:
        out.setdefault((f.host, "host" if f.gpu is None else f"gpu:{f.gpu}"), set()).add(f.category)
    return out


def score(
    doc: FindingsDocument, labels: dict[str, Any]
) -> tuple[dict[str, dict[str, int]], list[str]]:
    confusion = {c: {"tp": 0, "fp": 0, "fn": 0} for c in CATEGORIES}
    mismatches = []
    found = _keyed(doc)
    for host, lab in labels["hosts"].items():
        allow = set(lab["allow"])
        for key in sorted(set(lab["expect"]) | {k for h, k in found if h == host}):
            expected = set(lab["expect"].get(key, []))
            got = found.get((host, key), set())
            for c in expected & got:
                confusion[c]["tp"] += 1
            for c in expected - got:
                confusion[c]["fn"] += 1
                mismatches.append(f"{host} {key}: missed {c}")
            for c in got - expected - allow:
                confusion[c]["fp"] += 1
                mismatches.append(f"{host} {key}: unexpected {c}")
    return confusion, mismatches


def _ts(v: str) -> dt.datetime:
    return dt.datetime.fromisoformat(v.replace("Z", "+00:00"))


def detect(
    bucket: Path,
    packs: list[Pack],
    host: str,
    scenario: str,
    start: dt.datetime,
    hours: float,
    step_min: int,
    final: FindingsDocument,
    exhaustion_s: float | None,
) -> Detection:
    ooms = sorted(_ts(e.ts) for e in final.events if e.host == host and e.kind == "oom")
    end = start + dt.timedelta(hours=hours)
    truth = start + dt.timedelta(seconds=exhaustion_s) if exhaustion_s else end
    horizon = ooms[0] if ooms else truth
    flagged: tuple[dt.datetime, str] | None = None
    cut = start + dt.timedelta(minutes=step_min)
    while cut <= min(horizon, end) + dt.timedelta(seconds=1):
        doc = analyze(bucket, packs, scope=Scope(hosts=[host], before=cut), with_series=False)
        leaks = [f for f in doc.findings if f.category in LEAK_CATEGORIES]
        if leaks:
            flagged = (cut, sorted(f.category for f in leaks)[0])
            break
        cut += dt.timedelta(minutes=step_min)
    share = None
    if flagged:
        share = round((flagged[0] - start) / (horizon - start), 3)
    return Detection(
        host,
        scenario,
        start.isoformat(),
        horizon.isoformat(),
        bool(ooms),
        flagged[0].isoformat() if flagged else None,
        share,
        flagged[1] if flagged else None,
    )


def run_eval(
    workdir: Path,
    *,
    hosts_per_scenario: int = 1,
    hours: float = 6.0,
    seed: int = 11,
    step_min: int = 10,
    progress: Callable[[str], None] | None = None,
) -> EvalResult:
    from simulator.scenarios import SCENARIOS

    say = progress or (lambda _m: None)
    bucket = workdir / "bucket"
    labels_path = workdir / "labels.json"
    plans = simulate(
        "all",
        bucket,
        hosts=hosts_per_scenario * len(SCENARIOS),
        hours=hours,
        seed=seed,
        labels_path=labels_path,
        progress=say,
    )
    labels = json.loads(labels_path.read_text())
    packs = load_packs()
    doc = analyze(bucket, packs)
    res = EvalResult(hosts=len(plans), hours=hours, seed=seed)
    res.confusion, res.mismatches = score(doc, labels)
    for p in plans:
        expected = {c for cs in labels["hosts"][p.host]["expect"].values() for c in cs}
        if expected & LEAK_CATEGORIES:
            truth = exhaustion_s(p.scenario, hours, p.seed)
            d = detect(
                bucket, packs, p.host, p.scenario.name, DEFAULT_START, hours, step_min, doc, truth
            )
            say(
                f"{p.host}: first flagged {d.first_flagged} ({d.category}), {d.share} of onset -> "
                f"{'OOM' if d.horizon_is_oom else 'exhaustion'} at {d.horizon}"
            )
            res.detections.append(d)
    return res


def markdown(res: EvalResult) -> str:
    lines = [
        f"# Scenario suite: {res.hosts} hosts x {res.hours:g} h (seed {res.seed})",
        "",
        "| category | true positives | false positives | misses |",
        "|---|---:|---:|---:|",
    ]
    for c, v in res.confusion.items():
        if any(v.values()):
            lines.append(f"| {c} | {v['tp']} | {v['fp']} | {v['fn']} |")
    lines += [
        "",
        "| host | scenario | first flagged (min after onset) | share of onset -> horizon | horizon |",
        "|---|---|---:|---:|---|",
    ]
    for d in res.detections:
        minutes = (
            "-"
            if d.first_flagged is None
            else f"{(_ts(d.first_flagged) - _ts(d.onset)).total_seconds() / 60:.0f}"
        )
        lines.append(
            f"| {d.host} | {d.scenario} | {minutes} | {d.share if d.share is not None else 'never'} | "
            f"{'first OOM' if d.horizon_is_oom else 'projected exhaustion ' + d.horizon[:16]} |"
        )
    t = res.to_dict()["targets"]
    lines += [
        "",
        f"Misses: {t['misses']}; leak findings on negatives: {t['leak_false_positives']}; "
        f"flagged later than {TARGET_SHARE:.0%}: {t['late_detections']}. Targets met: {t['met']}.",
    ]
    if res.mismatches:
        lines += ["", "Mismatches:", *[f"- {m}" for m in res.mismatches]]
    return "\n".join(lines) + "\n"
