"""Stored week findings: `leakreport rollup` stores finished weeks, `leakreport fleet`
reuses them while their key matches (same page), and analyses whenever anything the
document depends on changed; damaged or unfinished weeks are never used or stored."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from analyzer import weekstore
from analyzer.fleet import week_range
from collector import layout
from collector.schema import TABLES
from leakreport.cli import cli

W47, W48 = "2026-W47", "2026-W48"
BEFORE = "2026-11-30"  # the Monday after W48: both weeks finished


@pytest.fixture(scope="module")
def analysed_page(two_weeks: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The fleet page of W48 with nothing stored."""
    out = tmp_path_factory.mktemp("page") / "fleet.html"
    r = run("fleet", str(two_weeks), "--week", W48, "--out", str(out))
    assert r.exit_code == 0, r.stderr
    assert f"week {W48}: analysed" in r.stderr and f"week {W47}: analysed" in r.stderr
    return out.read_text()


@pytest.fixture
def bucket(two_weeks: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(two_weeks, tmp_path / "bucket"))


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def rollup(bucket: Path, before: str = BEFORE) -> Result:
    r = run("rollup", str(bucket), "--before", before)
    assert r.exit_code == 0, r.stderr
    return r


def fleet(bucket: Path, *extra: str) -> tuple[Result, str]:
    out = bucket.parent / "fleet.html"
    r = run("fleet", str(bucket), "--week", W48, "--out", str(out), *extra)
    assert r.exit_code == 0, r.stderr
    return r, out.read_text()


def sources(r: Result) -> dict[str, str]:
    """week -> where its findings came from, as the command said it."""
    return {w: s.split(";")[0] for w, s in stale(r).items()}


def stale(r: Result) -> dict[str, str]:
    """week -> the whole line: where its findings came from, and why not stored ones."""
    line = r"^week (\d{4}-W\d\d): ((?:stored findings|analysed|no data)(?:; .*)?)$"
    return dict(re.findall(line, r.stderr, re.M))


def without_stamp(html: str) -> str:
    return re.sub(r" · generated [^<]*", "", html)


def store_state(bucket: Path) -> dict[str, tuple[int, int]]:
    d = bucket / weekstore.STORE_DIR
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(d.iterdir())}


def test_rollup_stores_finished_weeks_and_the_page_is_the_same(bucket, analysed_page) -> None:
    # a daily cron run with -q: the counts on stdout, nothing on stderr when all went
    # well, whether weeks were stored or already current
    for stored_now, current in ((2, 0), (0, 2)):
        r = run("rollup", str(bucket), "--before", BEFORE, "-q")
        assert r.exit_code == 0 and r.stderr == "", r.stderr
        assert (
            f"week findings: {stored_now} weeks stored, {current} already current, 0 not stored"
            in r.stdout
        )
    assert sorted(store_state(bucket)) == [f"{W47}.json", f"{W48}.json"]
    stored = json.loads((bucket / weekstore.STORE_DIR / f"{W48}.json").read_text())
    assert stored["document"]["run"]["since"] == "2026-11-23"
    assert stored["document"]["findings"], "the week must find something to compare"
    # the fleet part only: each GPU series' last point, no KV chart (the page draws none)
    series = stored["document"]["series"]
    assert series and all(len(g["t"]) == 1 and not g["idle_windows"] for g in series)
    assert stored["document"]["kv"] == []
    before = store_state(bucket)
    r, html = fleet(bucket)
    assert sources(r) == {W48: "stored findings", W47: "stored findings"}
    assert without_stamp(html) == without_stamp(analysed_page)
    stamp = stored["document"]["run"]["generated_at"]
    assert f"generated {stamp} (findings stored by leakreport rollup)" in html
    assert store_state(bucket) == before, "fleet never writes"
    again = rollup(bucket)
    assert "0 weeks stored, 2 already current" in again.stdout
    assert store_state(bucket) == before


def test_the_store_is_no_trace_table(bucket, tmp_path) -> None:
    """Listing, analysis and compaction see the same bucket with the store folder in it."""
    plain = run("analyze", str(bucket), "--format", "json", "--fail-on", "never")
    other = Path(shutil.copytree(bucket, tmp_path / "other"))
    rollup(other)
    shutil.copytree(other / weekstore.STORE_DIR, bucket / weekstore.STORE_DIR)
    assert weekstore.STORE_DIR not in TABLES
    listed = [e.path for t in TABLES for e in layout.list_entries(str(bucket), t)]
    assert listed and not [p for p in listed if weekstore.STORE_DIR in p]
    with_store = run("analyze", str(bucket), "--format", "json", "--fail-on", "never")
    assert with_store.exit_code == plain.exit_code == 0, with_store.stderr

    def findings(r: Result) -> list[object]:
        return json.loads(r.stdout)["findings"]

    assert findings(with_store) == findings(plain) and findings(plain)
    state = store_state(bucket)
    r = run("compact", str(bucket), "--before", BEFORE)
    assert r.exit_code == 0, r.stderr
    assert store_state(bucket) == state


def test_a_touched_or_added_raw_file_is_analysed_again(bucket) -> None:
    rollup(bucket)
    state = store_state(bucket)
    f = next((bucket / "gpu_samples" / "date=2026-11-25").rglob("*.parquet"))
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 1_000_000))
    r, _html = fleet(bucket)
    assert stale(r) == {
        W48: "analysed; stored findings not current: the week's trace files changed since "
        "they were stored (a late, rewritten or compacted file)",
        W47: "stored findings",
    }
    assert store_state(bucket) == state, "fleet never writes"
    r = rollup(bucket)
    assert "1 week stored, 1 already current" in r.stdout
    shutil.copy(f, f.with_name("gpu_samples-late-copy.parquet"))  # a late file of W48
    r, _html = fleet(bucket)
    assert sources(r)[W48] == "analysed"


def test_a_week_stored_by_the_release_before_says_so(bucket) -> None:
    """Its key was one hash of everything: read through the store, not just the helper."""
    rollup(bucket)
    path = bucket / weekstore.STORE_DIR / f"{W48}.json"
    stored = json.loads(path.read_text())
    path.write_text(json.dumps({**stored, "key": "ab" * 32}))
    r, _html = fleet(bucket)
    assert (
        stale(r)[W48]
        == "analysed; stored findings not current: stored by another release of leakreport"
    )
    assert stale(r)[W47] == "stored findings"


def test_params_packs_and_executor_change_the_key(bucket, tmp_path) -> None:
    rollup(bucket)
    r, _html = fleet(bucket, "--param", "GM001.min_growth_mib=256")
    assert sources(r) == {W48: "analysed", W47: "analysed"}
    assert stale(r)[W48] == (
        "analysed; stored findings not current: other options than when they were stored "
        "(--pack, --param, --executor, --batch-hosts, --rule-timeout)"
    )
    pack = tmp_path / "pack"
    (pack / "rules").mkdir(parents=True)
    (pack / "pack.toml").write_text('name = "extra"\nversion = "1"\n')
    rule = pack / "rules" / "XX001.sql"
    rule.write_text(
        '/*---\nid = "XX001"\nname = "x.full"\ntitle = "full"\ncategory = "memory.threshold"\n'
        'severity = "info"\nrequires = ["gpu_samples"]\nevidence = []\ndescription = "d"\n'
        "remediation = \"r\"\n---*/\nSELECT host, 'x' AS summary FROM gpu_buckets WHERE false\n"
    )
    r, _html = fleet(bucket, "--pack", str(pack))
    assert sources(r) == {W48: "analysed", W47: "analysed"}
    assert stale(r)[W48] == (
        f"analysed; stored findings not current: {weekstore.STALE[0]}; {weekstore.STALE[1]}"
    )
    # the same options give the same key; a changed rule file of a pack another
    days = week_range(W48)
    files = weekstore.raw_files(bucket, lambda d: days[0] <= d <= days[1])
    opts = {**weekstore.settings(_Opts()), "packs": [str(pack)]}
    key = weekstore.week_key(files, *days, opts, weekstore.code_hash([str(pack)]))
    assert key == weekstore.week_key(files, *days, opts, weekstore.code_hash([str(pack)]))
    rule.write_text(rule.read_text().replace("WHERE false", "WHERE true"))
    assert key != weekstore.week_key(files, *days, opts, weekstore.code_hash([str(pack)]))
    dask = {**opts, "executor": "dask"}
    assert key != weekstore.week_key(files, *days, dask, weekstore.code_hash([str(pack)]))
    # a key stored by the release before (one hash of everything) says so
    assert weekstore.stale_reason("ab" * 32, key) == "stored by another release of leakreport"


def test_a_changed_builtin_rule_changes_the_key(tmp_path, monkeypatch) -> None:
    """The built-in pack and rollups are hashed from the analyzer's folder: a copy of it
    with one rule changed gives another code hash."""
    copy = tmp_path / "analyzer"
    shutil.copytree(Path(weekstore.__file__).parent, copy)
    monkeypatch.setattr(weekstore, "_ANALYZER", copy)
    same = weekstore.code_hash()
    rule = copy / "packs" / "default" / "rules" / "GM001.sql"
    rule.write_text(rule.read_text() + "\n-- changed\n")
    assert weekstore.code_hash() != same
    sql = copy / "rollups" / "03_idle_windows.sql"
    changed = weekstore.code_hash()
    sql.write_text(sql.read_text() + "\n-- changed\n")
    assert weekstore.code_hash() != changed


class _Opts:
    packs: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    executor = "local"
    batch_hosts = 32
    rule_timeout = 60.0


def test_a_corrupt_stored_document_is_a_warning(bucket, analysed_page) -> None:
    rollup(bucket)
    path = bucket / weekstore.STORE_DIR / f"{W48}.json"
    path.write_text('{"format": 1, "key": "trunc')
    r, html = fleet(bucket)
    assert "stored findings unreadable" in r.stderr and str(path) in r.stderr
    assert sources(r) == {W48: "analysed", W47: "stored findings"}
    assert without_stamp(html) == without_stamp(analysed_page)
    # the right key but no findings document inside: still a warning, never a crash
    days = week_range(W48)
    files = weekstore.raw_files(bucket, lambda d: days[0] <= d <= days[1])
    key = weekstore.week_key(files, *days, weekstore.settings(_Opts()), weekstore.code_hash())
    path.write_text(
        json.dumps({"format": weekstore.STORE_FORMAT, "key": key, "document": {"run": {"x": 1}}})
    )
    r, html = fleet(bucket)
    assert "stored findings unreadable" in r.stderr
    assert sources(r)[W48] == "analysed"
    assert without_stamp(html) == without_stamp(analysed_page)


def test_unfinished_and_incomplete_weeks_are_not_stored(bucket) -> None:
    r = rollup(bucket, "2026-11-27")  # W48 runs to the 29th: unfinished
    assert "1 week stored, 0 already current, 0 not stored\n" in r.stdout  # no reason given
    assert sorted(store_state(bucket)) == [f"{W47}.json"]
    # a week of now is never stored, whatever --before says
    from simulator.generate import simulate

    monday = dt.date.today() - dt.timedelta(days=dt.date.today().weekday())
    start = dt.datetime.combine(monday, dt.time(), dt.UTC)
    simulate("cache-warmup", bucket, hosts=1, hours=1, seed=3, start=start)
    r = rollup(bucket, "2099-01-01")
    assert sorted(store_state(bucket)) == [f"{W47}.json", f"{W48}.json"]
    # an unreadable trace file makes the analysis incomplete: the week is not stored
    shutil.rmtree(bucket / weekstore.STORE_DIR)
    bad = bucket / "gpu_samples" / "date=2026-11-18" / "host=broken" / "gpu_samples-x.parquet"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"not parquet")
    r = run("rollup", str(bucket), "--before", BEFORE)
    assert r.exit_code == 3, r.stderr  # the tier says the file is left out
    assert "1 week stored, 0 already current, 1 not stored (incomplete analysis)" in r.stdout
    assert f"week not stored: {W47}: file left out:" in r.stderr
    assert sorted(store_state(bucket)) == [f"{W48}.json"]


def test_a_week_whose_analysis_is_incomplete_makes_rollup_exit_3(bucket) -> None:
    """A host-day's raw files deleted after its tier was stored: the week's analysis is
    incomplete and its findings are not stored, which rollup said on stderr and exit 0,
    so a cron job saw success every day."""
    rollup(bucket)
    shutil.rmtree(bucket / weekstore.STORE_DIR)
    for d in (bucket / "gpu_samples" / "date=2026-11-18").iterdir():
        shutil.rmtree(d)
    r = run("rollup", str(bucket), "--before", BEFORE)
    assert r.exit_code == 3, r.stdout + r.stderr
    assert "1 week stored, 0 already current, 1 not stored (incomplete analysis)" in r.stdout
    assert f"week not stored: {W47}: " in r.stderr


def test_a_week_with_quarantined_rows_is_not_stored(bucket) -> None:
    """Samples before the host's first collector run are quarantined: not a clean week."""
    from collector.writer import BucketWriter

    early = dt.datetime(2026, 11, 16, 1, tzinfo=dt.UTC)  # W47, two days before the host's runs
    row = {"ts": early, "host": "fast-image-processor-leak-00", "gpu_index": 0}
    BucketWriter(bucket, "fast-image-processor-leak-00").write(
        "gpu_samples", [{**row, "memory_used_bytes": 1}]
    )
    r = rollup(bucket)  # exit 0: the next rollup could not store it either
    assert "1 week stored, 0 already current, 1 not stored\n" in r.stdout
    assert (
        f"week not stored: {W47}: fast-image-processor-leak-00: 1 gpu_samples row(s) quarantined"
        in r.stderr
    )
    assert sorted(store_state(bucket)) == [f"{W48}.json"]


def test_on_s3(tmp_path) -> None:
    """The same on an S3 bucket: stored by one put, listed by key, size and LastModified."""
    from motoserver import MOTO, s3_environ

    if MOTO is None:
        pytest.skip("moto[server] missing")
    from collector.store import s3_filesystem
    from simulator.generate import simulate

    with s3_environ("weeks"):
        bucket = "s3://weeks/traces"
        start = dt.datetime(2026, 11, 25, tzinfo=dt.UTC)
        simulate("fast-image-processor-leak", bucket, hosts=1, hours=3, seed=5, start=start)
        r = run("rollup", bucket, "--before", BEFORE)
        assert r.exit_code == 0, r.stderr
        assert "1 week stored, 0 already current" in r.stdout
        fs = s3_filesystem()
        key = f"weeks/traces/{weekstore.STORE_DIR}/{W48}.json"
        assert json.loads(fs.open_input_stream(key).read())["week"] == W48
        out = tmp_path / "fleet.html"
        r = run("fleet", bucket, "--week", W48, "--out", str(out))
        assert r.exit_code == 0, r.stderr
        assert sources(r) == {W48: "stored findings", W47: "no data"}
        # a late object of the week: analysed again
        raw = layout.list_entries("weeks/traces", "gpu_samples", fs)
        with fs.open_output_stream(raw[0].path.replace(".parquet", "-late.parquet")) as f:
            f.write(fs.open_input_stream(raw[0].path).read())
        r = run("fleet", bucket, "--week", W48, "--out", str(out))
        assert r.exit_code == 0, r.stderr
        assert sources(r)[W48] == "analysed"
        with fs.open_output_stream(key) as f:
            f.write(b"\x00garbage")
        r = run("fleet", bucket, "--week", W48, "--out", str(out))
        assert "stored findings unreadable" in r.stderr and sources(r)[W48] == "analysed"


def test_a_week_whose_files_change_during_its_analysis_makes_rollup_exit_3(
    bucket, monkeypatch
) -> None:
    """Found by a user's pass: late data arriving while a finished week was analysed kept
    its findings from being stored ("1 not stored"), and rollup exited 0."""
    from collector.writer import BucketWriter
    from leakreport import common

    rollup(bucket)
    shutil.rmtree(bucket / weekstore.STORE_DIR)
    real = common.run_analysis

    def with_late_data(*args, **kwargs):  # type: ignore[no-untyped-def]
        late = dt.datetime(2026, 11, 17, 3, tzinfo=dt.UTC)  # in W47
        row = {"ts": late, "host": "late-host", "gpu_index": 0, "memory_used_bytes": 1}
        doc = real(*args, **kwargs)
        BucketWriter(bucket, "late-host").write("gpu_samples", [row])  # as it ends
        return doc

    monkeypatch.setattr(common, "run_analysis", with_late_data)
    r = run("rollup", str(bucket), "--before", BEFORE)
    assert r.exit_code == 3, r.stdout + r.stderr
    assert f"week not stored: {W47}: trace files changed during the analysis" in r.stderr
