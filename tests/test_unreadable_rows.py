"""Files whose footer reads but whose rows do not (damaged pages): the analysis and the
rollup name each one, leave it out, and go on (exit 3); what they find is what they find
with the file gone. A damaged file of the stored tier is named too, with what to do, and
its host-days are derived from their raw samples instead."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize(
    ("table", "missing", "stored"),
    [
        ("gpu_samples", "tier_gpu_buckets", "tier_metric_norm"),
        # read by the joint idle segments alone: the file is named there too
        ("log_lines", "tier_idle_segments", "tier_gpu_buckets"),
    ],
)
def test_the_rollup_names_the_file_stores_the_rest_and_the_analysis_agrees(
    base, tmp_path, table, missing, stored
) -> None:
    damaged, gone, victim = _two(base, tmp_path, table)
    # a bucket given as a relative path, as in a cron line run from its folder
    r = _cli("rollup", damaged.name, "--before", "2030-01-01", cwd=damaged.parent)
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr
    # named by the rollup itself (its week findings name it too, as any analysis does)
    # (once per tier table it feeds), by the path the analysis names it by
    lines = [x for x in r.stderr.splitlines() if x.startswith("leakreport: incomplete: ")]
    assert lines, r.stderr
    for line in lines:
        assert f"{victim}: rows cannot be read" in line and line.endswith(" not stored"), line
    # the host-day's other tables were stored
    assert list((damaged / f"{stored}_week").rglob("*.parquet"))
    assert not list((damaged / f"{missing}_week").rglob("*.parquet"))
    r, doc = _analyze(damaged)
    assert r.returncode == 3, r.stderr
    _r, doc_gone = _analyze(gone)
    assert _findings(doc) == _findings(doc_gone)


def test_a_damaged_file_of_the_stored_tier_is_read_from_raw_samples_named(base, tmp_path) -> None:
    bucket = Path(shutil.copytree(base, tmp_path / "bucket"))
    assert _cli("rollup", str(bucket), "--before", "2030-01-01").returncode == 0
    r, before = _analyze(bucket)
    assert r.returncode == 0, r.stderr
    (week,) = (bucket / "tier_gpu_info_week").rglob("*.parquet")  # read by every analysis
    damage_pages(week)
    r, doc = _analyze(bucket)
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr  # incomplete: named
    (line,) = doc["run"]["incomplete"]
    assert line.startswith(f"file left out: {week}: rows cannot be read"), line
    assert "(tier_gpu_info): its host-days are derived from raw samples instead" in line
    assert "delete it, and `leakreport rollup` stores them again" in line
    assert _findings(doc) == _findings(before)  # the host-day's raw samples say the same
    week.unlink()  # as the line says
    r, after = _analyze(bucket)
    assert r.returncode == 0, r.stderr
    assert _findings(after) == _findings(before)
    assert _cli("rollup", str(bucket), "--before", "2030-01-01").returncode == 0
    assert list((bucket / "tier_gpu_info_week").rglob("*.parquet"))


def test_rollup_verify_deletes_a_damaged_tier_file_and_stores_its_host_days_again(
    base, tmp_path
) -> None:
    """A plain rollup trusts a tier file's footer: the damaged file stays, and every
    analysis is incomplete. `rollup --verify` decodes the tier, deletes that file, names
    it, and derives its host-days again; the analysis is then complete, with the same
    findings. On a sound tier it deletes nothing and says nothing."""
    from analyzer import rowcheck as rc

    bucket = Path(shutil.copytree(base, tmp_path / "bucket"))
    assert _cli("rollup", str(bucket), "--before", "2030-01-01").returncode == 0
    _r, before = _analyze(bucket)
    r = _cli("rollup", str(bucket), "--before", "2030-01-01", "--verify", "-q")
    assert r.returncode == 0 and r.stderr == "", r.stderr  # sound: nothing to repair
    tier_files = sorted(bucket.glob("tier_*/*/*/*.parquet"))
    (week,) = (bucket / "tier_metric_norm_week").rglob("*.parquet")
    damage_pages(week)
    r = _cli("rollup", str(bucket), "--before", "2030-01-01")
    assert week.exists() and rc.unreadable([str(week)])  # trusted, left as it is
    r, doc = _analyze(bucket)
    assert r.returncode == 3 and "`leakreport rollup --verify` does both" in r.stderr
    r = _cli("rollup", str(bucket), "--before", "2030-01-01", "--verify")
    assert r.returncode == 0, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("leakreport: repaired: ")]
    assert line.startswith(f"leakreport: repaired: {week}: rows cannot be read"), line
    assert line.endswith("deleted, its host-days are derived again")
    now = sorted(bucket.glob("tier_*/*/*/*.parquet"))
    assert len(now) == len(tier_files) and week not in now  # the week stored again, anew
    assert rc.unreadable([str(f) for f in now]) == {}
    r, after = _analyze(bucket)
    assert r.returncode == 0, r.stderr
    assert _findings(after) == _findings(before)


def test_a_damaged_file_read_only_by_the_charts_is_named(base, tmp_path) -> None:
    """allocator_snapshots is first read by the chart series, after the rules."""
    import pyarrow.parquet as pq

    from collector.writer import BucketWriter

    bucket = Path(shutil.copytree(base, tmp_path / "bucket"))
    sample = next((bucket / "gpu_samples").rglob("*.parquet"))
    first = pq.read_table(sample, columns=["ts", "host"]).slice(0, 1).to_pylist()[0]
    rows = [{**first, "pid": 7 + i, "path": f"/snapshots/s{i}.pickle"} for i in range(500)]
    (snap,) = BucketWriter(bucket, first["host"]).write("allocator_snapshots", rows)
    r, whole = _analyze(bucket)
    assert r.returncode == 0, r.stderr
    damage_pages(Path(snap))
    r, doc = _analyze(bucket)
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    (line,) = doc["run"]["incomplete"]
    assert line.startswith(f"file left out: {snap}: rows cannot be read"), line
    assert _findings(doc) == _findings(whole)


def test_the_check_finds_every_damaged_file_among_many(tmp_path) -> None:
    """Files are decoded in groups, halved where one fails: each damaged file is found,
    side by side or alone, in either table, and no sound one is named."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = []
    for table, n in (("gpu_samples", 150), ("metric_samples", 20)):
        for i in range(n):
            p = tmp_path / table / "date=2026-11-30" / "host=h" / f"{table}-{i:03d}.parquet"
            p.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table({"v": list(range(i, i + 50)), "s": [f"x{i}"] * 50}), p)
            paths.append(str(p))
    damaged = {paths[70], paths[71], paths[149], paths[160]}
    for p in damaged:
        damage_pages(Path(p))
    found = rowcheck.unreadable(paths)
    assert set(found) == damaged
    assert all(why.startswith("rows cannot be read: ") for why in found.values())
    assert rowcheck.unreadable([p for p in paths if p not in damaged]) == {}


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
    r, doc = _analyze(bucket)
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    (line,) = doc["run"]["incomplete"]
    assert line.startswith(f"file left out: {week}: rows cannot be read"), line
    assert f"({table}): its " in line and "derived from raw samples instead" in line
    _r, whole = _analyze(tiered)
    assert _findings(doc) == _findings(whole)


def test_damaged_objects_on_s3_are_named_by_their_keys(tmp_path) -> None:
    """On S3 the files are read from staged copies: they are checked while the copies are
    there, and the lines name the objects. A tier object's host-days come from raw samples."""
    from motoserver import MOTO, s3_environ
    from pyarrow import fs as pafs

    from collector.store import s3_filesystem

    if MOTO is None:
        pytest.skip("moto[server] missing")
    with s3_environ("leaktraces"):
        bucket = "s3://leaktraces/rows"
        simulate("fast-image-processor-leak", bucket, hosts=1, hours=30, seed=5, start=START)
        tier.build(bucket, before=BEFORE)
        r, before = _analyze(bucket)  # type: ignore[arg-type]
        assert r.returncode == 0, r.stderr
        fs = s3_filesystem()

        def damage(folder: str) -> str:
            infos = fs.get_file_info(pafs.FileSelector(f"leaktraces/rows/{folder}", recursive=True))
            key = max((i for i in infos if i.path.endswith(".parquet")), key=lambda i: i.size).path
            local = tmp_path / "obj.parquet"
            local.write_bytes(fs.open_input_stream(key).read())
            damage_pages(local)
            with fs.open_output_stream(key) as f:
                f.write(local.read_bytes())
            return str(key)

        key = damage("tier_gpu_info_week")
        r, doc = _analyze(bucket)  # type: ignore[arg-type]
        assert r.returncode == 3, r.stderr
        (line,) = doc["run"]["incomplete"]
        assert line.startswith(f"file left out: s3://{key}: rows cannot be read"), line
        assert "leakreport-s3-" not in line, line  # DuckDB names the file it read: the copy
        assert _findings(doc) == _findings(before)
        raw = damage("log_lines")
        r, doc = _analyze(bucket)  # type: ignore[arg-type]
        assert r.returncode == 3, r.stderr
        assert sorted(x.split(": rows cannot be read")[0] for x in doc["run"]["incomplete"]) == [
            f"file left out: s3://{k}" for k in sorted([key, raw])
        ]
        # rollup --verify deletes the tier object by its key and stores its host-days
        # again; a raw file is not its to delete (this one is of the unfinished day)
        r = _cli("rollup", bucket, "--before", BEFORE.isoformat(), "--verify")
        assert r.returncode == 0, r.stderr
        assert r.stderr.count("leakreport: repaired: ") == 1, r.stderr
        assert f"leakreport: repaired: s3://{key}: rows cannot be read" in r.stderr, r.stderr
        r, doc = _analyze(bucket)  # type: ignore[arg-type]
        assert r.returncode == 3, r.stderr
        assert [x.split(": rows cannot be read")[0] for x in doc["run"]["incomplete"]] == [
            f"file left out: s3://{raw}"
        ]


def test_a_tier_file_whose_footer_cannot_be_read_is_said_and_stored_again(tiered, tmp_path) -> None:
    """Its host-days are derived from raw samples (same findings, exit 0) and the analysis
    says so; the next rollup replaces it."""
    bucket = Path(shutil.copytree(tiered, tmp_path / "bucket"))
    (week,) = (bucket / "tier_gpu_buckets_week").glob("date=2026-11-30/*/*.parquet")
    week.write_bytes(week.read_bytes()[:-30])
    r = _cli("analyze", str(bucket), "--format", "json", "--fail-on", "never")
    assert r.returncode == 0, r.stderr
    assert f"rollup tier: 1 stored files cannot be read ({week} first): not read" in r.stderr
    _r, whole = _analyze(tiered)
    assert _findings(json.loads(r.stdout)) == _findings(whole)
    assert _cli("rollup", str(bucket), "--before", BEFORE.isoformat()).returncode == 0
    assert not week.exists() and list((bucket / "tier_gpu_buckets_week").rglob("*.parquet"))
    r = _cli("analyze", str(bucket), "--format", "json", "--fail-on", "never")
    assert r.returncode == 0 and "cannot be read" not in r.stderr, r.stderr


def test_stored_host_days_whose_raw_files_are_gone_are_said_not_analysed(tiered, tmp_path) -> None:
    """The tier is read only beside the raw files it was made from: a host-day whose raw
    files of a table were deleted is not analysed, and the analysis says so (exit 3)."""
    r, whole = _analyze(tiered)
    assert r.returncode == 0 and not whole["run"]["incomplete"], r.stderr
    bucket = Path(shutil.copytree(tiered, tmp_path / "bucket"))
    (folder,) = (bucket / "metric_samples" / "date=2026-11-30").glob("host=cache-warmup*")
    shutil.rmtree(folder)
    r, doc = _analyze(bucket)
    assert r.returncode == 3, r.stderr
    (line,) = doc["run"]["incomplete"]
    assert line == (
        "rollup tier: 1 stored host-days (2026-11-30 host=cache-warmup-00 first) have no "
        "readable raw files of metric_samples: not analysed (the tier is read only beside "
        "the raw files it was made from)"
    )


def test_host_batches_name_a_damaged_tier_file_once(tiered, tmp_path) -> None:
    """Each batch of hosts meets the week file (it holds every host): one line for it."""
    bucket = Path(shutil.copytree(tiered, tmp_path / "bucket"))
    # a third host, raw, named between the two: each batch holds a host of the week file
    simulate("cuda-context-leak", bucket, hosts=1, hours=40, seed=11, start=START)
    (week,) = (bucket / "tier_gpu_info_week").glob("date=2026-11-30/*/*.parquet")
    damage_pages(week)
    r = _cli("analyze", str(bucket), "--format", "json", "--fail-on", "never", "--batch-hosts", "1")
    assert r.returncode == 3, r.stderr
    assert "3 hosts: analysing them in 3 batches of 1 host (--batch-hosts 1: " in r.stderr
    assert "a batch holds at most 1 host's weeks of raw samples" in r.stderr
    assert r.stderr.count("reading rows failed") == 2  # both batches read the week file
    (line,) = json.loads(r.stdout)["run"]["incomplete"]
    assert line.startswith(f"file left out: {week}: rows cannot be read"), line


def test_a_reason_names_the_object_not_its_staged_copy(tmp_path) -> None:
    """DuckDB's words quote the file it read; for S3 that was the staged copy in a
    temporary folder, gone after the run. The reason names the object's key instead."""
    from analyzer import rowcheck

    staged = (
        tmp_path / "leakreport-s3-x" / "gpu_samples" / "date=2026-11-30" / "host=a" / "f.parquet"
    )
    staged.parent.mkdir(parents=True)
    staged.write_bytes(b"PAR1" + b"\x00" * 64)  # no footer: DuckDB names the file
    key = "s3://bk/gpu_samples/date=2026-11-30/host=a/f.parquet"
    err = rowcheck.RowsUnreadable(RuntimeError("x"), {str(staged): key}, {})
    (why,) = rowcheck.left_out(err, lambda _m: None).items()
    assert why[0] == key and why[1].startswith("rows cannot be read"), why
    assert str(staged) not in why[1] and key in why[1], why[1]
