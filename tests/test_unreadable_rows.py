"""Files whose footer reads but whose rows do not (damaged pages): the analysis and the
rollup name each one, leave it out, and go on (exit 3); what they find is what they find
with the file gone. A damaged file of the stored tier is named with what to do."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest
from test_faults_analyzer import SCENARIO, _analyze, _cli, _findings, damage_pages
from test_tier_week import BEFORE, START

from analyzer import rowcheck, tier
from simulator.generate import simulate


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rows") / "bucket"
    simulate(SCENARIO, out, hosts=1, hours=6, seed=3)
    return out


def _two(base: Path, tmp_path: Path, table: str) -> tuple[Path, Path, Path]:
    """Two copies of the bucket: one with a file of ``table`` damaged, one without it."""
    damaged = Path(shutil.copytree(base, tmp_path / "damaged"))
    gone = Path(shutil.copytree(base, tmp_path / "gone"))
    files = sorted((damaged / table).rglob("*.parquet"), key=lambda p: p.stat().st_size)
    victim = files[-1]  # the largest: pages that a query reads, whatever it filters
    damage_pages(victim)
    (gone / victim.relative_to(damaged)).unlink()
    return damaged, gone, victim


@pytest.mark.parametrize("table", ["gpu_samples", "metric_samples", "log_lines"])
def test_a_file_whose_rows_cannot_be_read_is_left_out_named(base, tmp_path, table) -> None:
    damaged, gone, victim = _two(base, tmp_path, table)
    r, doc = _analyze(damaged)
    assert r.returncode == 3, r.stderr  # incomplete: a file was left out
    (line,) = doc["run"]["incomplete"]
    assert line.startswith(f"file left out: {victim}: rows cannot be read")
    r_gone, doc_gone = _analyze(gone)
    assert r_gone.returncode == 0, r_gone.stderr
    assert _findings(doc) == _findings(doc_gone)  # the same as without the file
    assert doc["findings"], "the scenario must find something for the comparison to mean much"


def test_the_rollup_names_the_file_stores_the_rest_and_the_analysis_agrees(base, tmp_path) -> None:
    damaged, gone, victim = _two(base, tmp_path, "gpu_samples")
    r = _cli("rollup", str(damaged), "--before", "2030-01-01")
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr
    assert f"{victim}: rows cannot be read" in r.stderr and "not stored" in r.stderr
    # the host-day's other sources were stored
    assert list((damaged / "tier_metric_norm_week").rglob("*.parquet"))
    assert not list((damaged / "tier_gpu_buckets_week").rglob("*.parquet"))
    r, doc = _analyze(damaged)
    assert r.returncode == 3, r.stderr
    _r, doc_gone = _analyze(gone)
    assert _findings(doc) == _findings(doc_gone)


def test_a_damaged_file_of_the_stored_tier_is_named_with_what_to_do(base, tmp_path) -> None:
    bucket = Path(shutil.copytree(base, tmp_path / "bucket"))
    assert _cli("rollup", str(bucket), "--before", "2030-01-01").returncode == 0
    r, before = _analyze(bucket)
    assert r.returncode == 0, r.stderr
    (week,) = (bucket / "tier_gpu_info_week").rglob("*.parquet")  # read by every analysis
    damage_pages(week)
    r, _doc = _analyze(bucket)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"{week}: rows cannot be read" in r.stderr
    assert "delete it, and `leakreport rollup` stores its host-days again" in r.stderr
    week.unlink()  # as the message says: the analysis derives those host-days meanwhile
    r, after = _analyze(bucket)
    assert r.returncode == 0, r.stderr
    assert _findings(after) == _findings(before)
    assert _cli("rollup", str(bucket), "--before", "2030-01-01").returncode == 0
    assert list((bucket / "tier_gpu_info_week").rglob("*.parquet"))


def test_only_errors_that_may_come_from_rows_are_checked_file_by_file() -> None:
    assert rowcheck.may_be_rows(RuntimeError("01_gpu_buckets.sql: x")) is False  # no DuckDB cause
    for e in (duckdb.OutOfMemoryException("x"), duckdb.BinderException("x")):
        wrapped = RuntimeError("01_gpu_buckets.sql")
        wrapped.__cause__ = e
        assert not rowcheck.may_be_rows(wrapped)
    read = RuntimeError("00_gpu_info.sql: TProtocolException: Invalid data")
    read.__cause__ = duckdb.Error("TProtocolException: Invalid data")
    assert rowcheck.may_be_rows(read)


@pytest.fixture(scope="module")
def tiered(tmp_path_factory) -> Path:
    """Two hosts over 40 hours (a span read from the stored per-minute tier), rolled up."""
    out = tmp_path_factory.mktemp("rows-tier") / "bucket"
    for scenario in ("fast-image-processor-leak", "cache-warmup"):
        simulate(scenario, out, hosts=1, hours=40, seed=11, start=START)
    tier.build(out, before=BEFORE)
    return out


@pytest.mark.parametrize("table", sorted(tier.ALL_TIERS))
def test_every_stored_table_with_damaged_rows_is_named(tiered, tmp_path, table) -> None:
    bucket = Path(shutil.copytree(tiered, tmp_path / "bucket"))
    (week,) = (bucket / f"{table}_week").glob("date=2026-11-30/*/*.parquet")
    damage_pages(week)
    r = _cli("analyze", str(bucket), "--format", "json", "--fail-on", "never", "-q")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"{week}: rows cannot be read" in r.stderr
