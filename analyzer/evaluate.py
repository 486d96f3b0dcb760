"""`make eval`: the whole labelled scenario suite, scored in every shape of data.

Each scenario is simulated in each shape (the collector's own traces, nvidia-smi
CSV + server log, a date/memory.used loop + server log, server log alone),
analysed, and scored against the labels: one confusion table per shape, with
the (scenario, shape) pairs a shape cannot decide listed with the reason.
"Flagged" means the scenario's expected category, per category. For every
labelled leak, the time to the first flag of each expected category is found
by analysing growing prefixes of the trace (in the shapes of ``detect_shapes``).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from analyzer.bucket import Scope
from analyzer.categories import CATEGORIES, LEAK_CATEGORIES
from analyzer.findings import FindingsDocument
from analyzer.packs import Pack, load_packs
from analyzer.runner import analyze
from simulator.generate import DEFAULT_START, simulate
from simulator.model import exhaustion_s
from simulator.shapes import SHAPES

TARGET_SHARE = 0.20  # flag each leak within the first 20 % of onset -> OOM
MAX_CUTS = 36  # prefixes analysed per host for the time to detection (multi-day traces step wider)


@dataclass
class Detection:
    host: str
    scenario: str
    shape: str
    onset: str
    horizon: str  # the first OOM, else when the leak would exhaust its resource (simulator truth)
    horizon_is_oom: bool
    first_flagged: str | None  # the first expected leak category
    share: float | None  # (first_flagged - onset) / (horizon - onset)
    category: str | None
    minutes_to_flag: dict[str, float | None] = field(default_factory=dict)  # per expected category


@dataclass
class ScenarioRow:
    host: str
    scenario: str
    verdict: str  # right | wrong | undecidable
    expected: list[str]
    found: list[str]
    problems: list[str]
    undecidable: str  # why (the whole pair, or the categories this shape cannot decide)


@dataclass
class ShapeResult:
    shape: str
    confusion: dict[str, dict[str, int]] = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)
    detections: list[Detection] = field(default_factory=list)
    scenarios: list[ScenarioRow] = field(default_factory=list)

    @property
    def leak_false_positives(self) -> int:
        return sum(v["fp"] for k, v in self.confusion.items() if k in LEAK_CATEGORIES)

    @property
    def misses(self) -> int:
        return sum(v["fn"] for v in self.confusion.values())

    @property
    def leak_found(self) -> tuple[int, int]:
        """(labelled leak categories found, labelled leak categories) among decidable pairs."""
        tp = sum(v["tp"] for k, v in self.confusion.items() if k in LEAK_CATEGORIES)
        fn = sum(v["fn"] for k, v in self.confusion.items() if k in LEAK_CATEGORIES)
        return tp, tp + fn


@dataclass
class EvalResult:
    hosts: int
    hours: float
    seed: int
    shapes: dict[str, ShapeResult] = field(default_factory=dict)

    @property
    def leak_false_positives(self) -> int:
        return sum(r.leak_false_positives for r in self.shapes.values())

    @property
    def misses(self) -> int:
        return sum(r.misses for r in self.shapes.values())

    @property
    def mismatches(self) -> list[str]:
        return [f"[{k}] {m}" for k, r in self.shapes.items() for m in r.mismatches]

    @property
    def detections(self) -> list[Detection]:
        return [d for r in self.shapes.values() for d in r.detections]

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
    doc: FindingsDocument, labels: dict[str, Any], rows: list[ScenarioRow] | None = None
) -> tuple[dict[str, dict[str, int]], list[str]]:
    """Confusion per category and the mismatches; hosts whose scenario the shape
    cannot decide are left out (and listed in ``rows`` when given)."""
    confusion = {c: {"tp": 0, "fp": 0, "fn": 0} for c in CATEGORIES}
    mismatches = []
    found = _keyed(doc)
    for host, lab in labels["hosts"].items():
        allow = set(lab["allow"])
        whole = lab.get("undecidable_scenario")
        cats = lab.get("undecidable") or {}
        got_all = sorted({c for (h, _k), cs in found.items() if h == host for c in cs})
        exp_all = sorted({c for cs in lab["expect"].values() for c in cs})
        why = whole or "; ".join(f"{c}: {r}" for c, r in sorted(cats.items()))
        if whole:
            if rows is not None:
                rows.append(
                    ScenarioRow(host, lab["scenario"], "undecidable", exp_all, got_all, [], why)
                )
            continue
        problems = []
        for key in sorted(set(lab["expect"]) | {k for h, k in found if h == host}):
            expected = set(lab["expect"].get(key, []))
            got = found.get((host, key), set())
            for c in expected & got:
                confusion[c]["tp"] += 1
            for c in sorted(expected - got):  # sorted: eval.md the same every run
                confusion[c]["fn"] += 1
                problems.append(f"{host} {key}: missed {c}")
            for c in sorted(got - expected - allow):
                confusion[c]["fp"] += 1
                problems.append(f"{host} {key}: unexpected {c}")
        mismatches += problems
        if rows is not None:
            verdict = "wrong" if problems else "right"
            rows.append(
                ScenarioRow(host, lab["scenario"], verdict, exp_all, got_all, problems, why)
            )
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
    expected: set[str] | None = None,
    shape: str = "native",
) -> Detection:
    """Analyse growing prefixes until every expected category has been flagged
    (or the horizon is reached): minutes to the first flag of each."""
    ooms = sorted(_ts(e.ts) for e in final.events if e.host == host and e.kind == "oom")
    end = start + dt.timedelta(hours=hours)
    truth = start + dt.timedelta(seconds=exhaustion_s) if exhaustion_s else end
    horizon = ooms[0] if ooms else truth
    want = set(expected or LEAK_CATEGORIES)
    first: dict[str, dt.datetime] = {}
    step = dt.timedelta(minutes=max(step_min, hours * 60 / MAX_CUTS))
    cut = start + step
    while cut <= min(horizon, end) + dt.timedelta(seconds=1) and want - set(first):
        doc = analyze(bucket, packs, scope=Scope(hosts=[host], before=cut), with_series=False)
        for f in doc.findings:
            first.setdefault(f.category, cut)
        cut += step
    leaks = sorted((t, c) for c, t in first.items() if c in want & LEAK_CATEGORIES)
    flagged = leaks[0] if leaks else None
    share = round((flagged[0] - start) / (horizon - start), 3) if flagged else None
    return Detection(
        host,
        scenario,
        shape,
        start.isoformat(),
        horizon.isoformat(),
        bool(ooms),
        flagged[0].isoformat() if flagged else None,
        share,
        flagged[1] if flagged else None,
        {
            c: round((first[c] - start).total_seconds() / 60, 1) if c in first else None
            for c in sorted(want)
        },
    )


def run_eval(
    workdir: Path,
    *,
    hosts_per_scenario: int = 1,
    hours: float = 6.0,
    seed: int = 11,
    step_min: int = 10,
    shapes: tuple[str, ...] = SHAPES,
    detect_shapes: tuple[str, ...] = ("native", "nvidia-smi-csv"),
    scenario: str = "all",
    progress: Callable[[str], None] | None = None,
) -> EvalResult:
    from simulator.scenarios import SCENARIOS, resolve

    say = progress or (lambda _m: None)
    packs = load_packs()
    n = len(resolve(scenario)) if scenario != "all" else len(SCENARIOS)
    res = EvalResult(hosts=hosts_per_scenario * n, hours=hours, seed=seed)
    for shape in shapes:
        # the shape's scratch folder, emptied: a bucket of an earlier run would mix in
        shutil.rmtree(workdir / shape, ignore_errors=True)
        bucket = workdir / shape / "bucket"
        labels_path = workdir / shape / "labels.json"
        plans = simulate(
            scenario,
            bucket,
            hosts=hosts_per_scenario * n,
            hours=hours,
            seed=seed,
            labels_path=labels_path,
            shape=shape,
            files_dir=workdir / shape / "files",
            progress=_tagged(say, shape),
        )
        labels = json.loads(labels_path.read_text())
        doc = analyze(bucket, packs)  # with series: the OOM events set the horizon
        sr = ShapeResult(shape)
        sr.confusion, sr.mismatches = score(doc, labels, sr.scenarios)
        res.shapes[shape] = sr
        if shape not in detect_shapes:
            continue
        for p in plans:
            lab = labels["hosts"][p.host]
            expected = {c for cs in lab["expect"].values() for c in cs}
            if lab["undecidable_scenario"] or not expected & LEAK_CATEGORIES:
                continue
            span = max(hours, p.scenario.min_hours)
            truth = exhaustion_s(p.scenario, span, p.seed)
            d = detect(
                bucket,
                packs,
                p.host,
                p.scenario.name,
                DEFAULT_START,
                span,
                step_min,
                doc,
                truth,
                expected,
                shape,
            )
            say(
                f"[{shape}] {p.host}: first flagged {d.first_flagged} ({d.category}), {d.share} of "
                f"onset -> {'OOM' if d.horizon_is_oom else 'exhaustion'} at {d.horizon}"
            )
            sr.detections.append(d)
    return res


def _tagged(say: Callable[[str], None], shape: str) -> Callable[[str], None]:
    return lambda m: say(f"[{shape}] {m}")


def _minutes(d: Detection) -> str:
    if d.first_flagged is None:
        return "-"
    return f"{(_ts(d.first_flagged) - _ts(d.onset)).total_seconds() / 60:.0f}"


def markdown(res: EvalResult) -> str:
    lines = [f"# Scenario suite: {res.hosts} hosts x {res.hours:g} h (seed {res.seed})", ""]
    lines += [
        "| shape | decided right | wrong | undecidable | leak categories found | leak findings on negatives |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for shape, sr in res.shapes.items():
        counts = {
            v: sum(r.verdict == v for r in sr.scenarios) for v in ("right", "wrong", "undecidable")
        }
        tp, total = sr.leak_found
        pct = f"{100 * tp / total:.0f} %" if total else "-"
        lines.append(
            f"| {shape} | {counts['right']} | {counts['wrong']} | {counts['undecidable']} | "
            f"{tp}/{total} ({pct}) | {sr.leak_false_positives} |"
        )
    for shape, sr in res.shapes.items():
        lines += ["", f"## {shape}", "", "| category | true positives | false positives | misses |"]
        lines.append("|---|---:|---:|---:|")
        for c, v in sr.confusion.items():
            if any(v.values()):
                lines.append(f"| {c} | {v['tp']} | {v['fp']} | {v['fn']} |")
        lines += ["", "| scenario | verdict | expected | found | undecidable here (why) |"]
        lines.append("|---|---|---|---|---|")
        for r in sr.scenarios:
            lines.append(
                f"| {r.scenario} | {r.verdict} | {', '.join(r.expected) or '-'} | "
                f"{', '.join(r.found) or '-'} | {r.undecidable or '-'} |"
            )
        if sr.detections:
            lines += [
                "",
                "| scenario | first leak flag (min) | share of onset -> horizon | horizon | minutes to each expected category |",
            ]
            lines.append("|---|---:|---:|---|---|")
            for d in sr.detections:
                per = ", ".join(
                    f"{c} {'never' if m is None else f'{m:g}'}"
                    for c, m in d.minutes_to_flag.items()
                )
                horizon = (
                    "first OOM" if d.horizon_is_oom else "projected exhaustion " + d.horizon[:16]
                )
                lines.append(
                    f"| {d.scenario} | {_minutes(d)} | "
                    f"{d.share if d.share is not None else 'never'} | {horizon} | {per} |"
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
