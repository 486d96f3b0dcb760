"""An analysis that runs while `leakreport rollup` or `compact` replaces files (both
write the new file first, then delete the old): the analysis lists the bucket again
and gives the findings of a bucket left alone; files replaced twice fail it, naming one."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from analyzer import compact, runner, tier
from analyzer.bucket import BucketError
from analyzer.packs import load_packs
from collector import filecheck

START = dt.datetime(2026, 11, 29, 12, tzinfo=dt.UTC)
NOW = dt.datetime(2026, 12, 1, 12, tzinfo=dt.UTC)
BEFORE = NOW.date()


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    from simulator.generate import simulate

    out = tmp_path_factory.mktemp("replaced") / "bucket"
    simulate("fast-image-processor-leak", out, hosts=1, hours=40, seed=5, start=START)
    return out


@pytest.fixture(scope="module")
def reference(base: Path, tmp_path_factory) -> str:
    """The findings of the bucket with nothing running beside the analysis."""
    return _doc(Path(shutil.copytree(base, tmp_path_factory.mktemp("ref") / "b")))


@pytest.fixture
def bucket(base: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(base, tmp_path / "bucket"))


def _doc(bucket: Path, said: list[str] | None = None) -> str:
    d = runner.analyze(
        bucket, load_packs(), now=NOW, progress=said.append if said is not None else None
    ).to_dict()
    for r in d["run"]["rules"]:
        assert r["status"] != "errored", r
        r.pop("duration_s")
    d["run"].pop("bucket")
    d["run"].pop("tables")  # how many files: compacting changes it, not the findings
    return json.dumps(d, sort_keys=True)


def _meanwhile(
    monkeypatch, target: Any, name: str, job: Callable[[], None], times: int = 1
) -> list[int]:
    """Run ``job`` (a rollup, a compact) just before the first ``times`` calls of
    ``target.name``: between the analysis listing the bucket and reading it."""
    real = getattr(target, name)
    calls = [0]

    def wrapped(*a: Any, **k: Any) -> Any:
        calls[0] += 1
        if calls[0] <= times:
            job()
        return real(*a, **k)

    monkeypatch.setattr(target, name, wrapped)
    return calls


def test_a_rollup_packing_weeks_during_the_analysis(bucket, reference, monkeypatch) -> None:
    tier.build(bucket, before=BEFORE, weeks=False)  # day files, which the next rollup packs
    day_files = sorted(bucket.glob("tier_gpu_buckets/*/*/*.parquet"))
    assert day_files
    calls = _meanwhile(
        monkeypatch, runner.logevents, "build", lambda: tier.build(bucket, before=BEFORE)
    )
    said: list[str] = []
    assert _doc(bucket, said) == reference
    assert calls[0] == 2  # opened twice
    again = [s for s in said if "reading the bucket again" in s]
    assert len(again) == 1 and "tier_" in again[0], said
    assert not any(f.exists() for f in day_files)  # the rollup did delete them
    assert "rollup tier: 2 host-days stored" in "\n".join(said)  # the second pass read the weeks


def test_a_compact_between_listing_and_footers(bucket, reference, monkeypatch) -> None:
    small = sorted(bucket.glob("gpu_samples/*/*/*.parquet"))
    assert len(small) > 3  # one file per collector batch: compact merges them
    _meanwhile(monkeypatch, filecheck, "check_file", lambda: compact.compact(bucket, before=BEFORE))
    said: list[str] = []
    assert _doc(bucket, said) == reference
    again = [s for s in said if "reading the bucket again" in s]
    assert len(again) == 1 and again[0].startswith(str(bucket)), said
    assert len(sorted(bucket.glob("gpu_samples/*/*/*.parquet"))) < len(small)


def test_a_compact_while_rules_run(bucket, reference, monkeypatch) -> None:
    calls = _meanwhile(
        monkeypatch, runner, "run_rule", lambda: compact.compact(bucket, before=BEFORE)
    )
    said: list[str] = []
    assert _doc(bucket, said) == reference
    assert sum("reading the bucket again" in s for s in said) == 1, said
    assert calls[0] > 1


def test_files_replaced_at_every_read_fail_naming_one(bucket, monkeypatch) -> None:
    tier.build(bucket, before=BEFORE, weeks=False)

    def drop_one() -> None:  # a tier file of a finished day, renamed after the listing
        f = sorted(bucket.glob("tier_gpu_buckets/*/*/*.parquet"))[0]
        f.rename(f.with_name(f"x{f.name}"))

    waits: list[float] = []
    monkeypatch.setattr(runner.time, "sleep", waits.append)
    _meanwhile(monkeypatch, runner.logevents, "build", drop_one, times=runner.READS)
    said: list[str] = []
    with pytest.raises(
        BucketError, match=r"tier_gpu_buckets/.*\.parquet: bucket files were replaced .* 5 times"
    ):
        runner.analyze(bucket, load_packs(), now=NOW, progress=said.append)
    assert sum("reading the bucket again" in s for s in said) == runner.READS - 1
    assert waits == [1.0, 2.0, 4.0, 8.0]  # a compact of a day has time to finish


def test_a_bucket_replaced_under_every_read_exits_3_not_2(bucket, monkeypatch) -> None:
    """Found by a user's pass: an analysis overlapping a compact exited 2 (a usage error
    to cron) in 6 of 8 runs, after two reads; it now reads up to five times, waiting
    longer each time, and then says the run is incomplete."""
    from leakreport.common import run_analysis
    from leakreport.options import AnalysisOptions

    tier.build(bucket, before=BEFORE, weeks=False)
    monkeypatch.setattr(runner.time, "sleep", lambda _s: None)

    def drop_one() -> None:
        f = sorted(bucket.glob("tier_gpu_buckets/*/*/*.parquet"))[0]
        f.rename(f.with_name(f"x{f.name}"))

    _meanwhile(monkeypatch, runner.logevents, "build", drop_one, times=runner.READS)
    with pytest.raises(SystemExit) as e:
        run_analysis(str(bucket), AnalysisOptions())
    assert e.value.code == 3
