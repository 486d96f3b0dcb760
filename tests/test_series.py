"""Chart series (analyzer/series.py): its SQL lives in rollups/series/*.sql and nowhere
else, a broken install says which folder lost what, and the series it derives from small
rollup tables match a plain Python statement of the downsampling rules."""

from __future__ import annotations

import datetime as dt
import math
import random
import re
import shutil
import tomllib
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from analyzer import rollup, series
from analyzer.findings import FindingsDocument, RunInfo, iso_utc

REPO = Path(__file__).resolve().parents[1]
BUCKET_S = 60.0
T0 = 1_795_000_020.0  # epoch seconds, a multiple of BUCKET_S
BLOCK = rollup.DEFAULTS["chart_block"]


def test_the_series_sql_lives_in_its_folder_and_ships_in_the_wheel() -> None:
    files = {p.stem for p in series.SERIES_DIR.glob("*.sql")}
    assert files == set(series.QUERIES), "every query has a file, and no file is unused"
    assert series.SERIES_DIR.parent == series.ROLLUP_DIR  # beside the rollups ...
    # ... but not where rollup.build runs every *.sql in order
    assert not set(series.ROLLUP_DIR.glob("*.sql")) & set(series.SERIES_DIR.glob("*.sql"))
    source = Path(series.__file__).read_text(encoding="utf-8")
    for word in ("SELECT", "FROM", "GROUP BY", "ORDER BY"):
        assert not re.search(rf"\b{word}\b", source), f"SQL ({word}) left in series.py"
    # the wheel's package data (pyproject) picks every one of them up
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["analyzer"]
    shipped = {p for g in globs for p in (REPO / "analyzer").glob(g)}
    assert set(series.SERIES_DIR.glob("*.sql")) <= shipped


def test_a_missing_series_sql_file_is_an_error_naming_the_folder(tmp_path, monkeypatch) -> None:
    broken = tmp_path / "series"
    shutil.copytree(series.SERIES_DIR, broken)
    (broken / "kv_series.sql").unlink()
    monkeypatch.setattr(series, "SERIES_DIR", broken)
    doc = FindingsDocument(run=RunInfo("b", None, None, [], "", ""))
    with pytest.raises(RuntimeError, match=r"kv_series\.sql") as e:
        series.fill(duckdb.connect(), doc)
    assert str(broken) in str(e.value) and "reinstall" in str(e.value)
    monkeypatch.setattr(series, "SERIES_DIR", tmp_path / "gone")
    with pytest.raises(RuntimeError, match=re.escape(str(tmp_path / "gone"))):
        series.fill(duckdb.connect(), doc)


def _ts(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, dt.UTC)


def _table(con: duckdb.DuckDBPyConnection, name: str, cols: dict[str, list]) -> None:
    data = pa.table(cols)  # noqa: F841 - read by name below
    con.execute(f"CREATE TABLE {name} AS SELECT * FROM data")


def _source_runs(con: duckdb.DuckDBPyConnection) -> None:
    """The rollup the failed-source gaps are read from, over the table collector_runs."""
    (f,) = [f for f in rollup.rollup_files() if f.name == "07_source_runs.sql"]
    for stmt in rollup._statements(f.read_text(encoding="utf-8")):
        con.execute(stmt)


def _expected_gpu(rows: list[tuple[int, int, int]], first: float, last: float) -> list[list]:
    """The rules, stated plainly: fine chunks of `fine` buckets from the first sample (about
    2 x MAX_POINTS over the span), taken ceil(fine chunks / MAX_POINTS) at a time, whether
    they hold data or not (a gap stays a gap); where that is BLOCK buckets or more, chunks
    of whole blocks of BLOCK buckets from the first sample's block instead, the fewest that
    keep to MAX_POINTS chunks. Each point is a chunk's first time, highest peak and lowest
    trough."""
    m = series.MAX_POINTS
    bi0, bi1 = math.floor(first / BUCKET_S), math.floor(last / BUCKET_S)
    fine = max(1, math.ceil((last - first) / BUCKET_S / (2 * m)))
    step = fine * math.ceil(((bi1 - bi0) // fine + 1) / m)
    if step >= BLOCK:
        bi0 = bi0 // BLOCK * BLOCK
        step = BLOCK * math.ceil((bi1 - bi0 + 1) / (BLOCK * m))
    chunks: dict[int, list] = {}
    for bi, hi, lo in rows:
        t = bi * BUCKET_S
        c = chunks.setdefault((bi - bi0) // step, [t, hi, lo])
        c[:] = [min(c[0], t), max(c[1], hi), min(c[2], lo)]
    return [[chunks[k][i] for k in sorted(chunks)] for i in range(3)]


@pytest.fixture
def filled() -> tuple[FindingsDocument, dict]:
    """Two hosts (h1 with two GPUs, one of them with gaps, h2 with one short GPU) and every
    other table the chart data reads, small enough to reason about."""
    rnd = random.Random(3)
    con = duckdb.connect()
    gpus = {
        ("h1", 0): range(0, 3000),
        ("h1", 1): [*range(5, 900), *range(1400, 2600, 3)],
        ("h2", 0): range(100, 400),
    }
    rows = {
        g: [
            (int(T0 / BUCKET_S) + i, rnd.randrange(10**9, 2 * 10**9), rnd.randrange(10**9))
            for i in idx
        ]
        for g, idx in gpus.items()
    }
    info = {g: (r[0][0] * BUCKET_S + 7, r[-1][0] * BUCKET_S + 50) for g, r in rows.items()}
    flat = [(h, g, *x) for (h, g), r in rows.items() for x in r]
    _table(
        con,
        "gpu_buckets",
        {
            "host": [r[0] for r in flat],
            "gpu_index": pa.array([r[1] for r in flat], pa.int32()),
            "bi": [r[2] for r in flat],
            "b": [_ts(r[2] * BUCKET_S) for r in flat],
            "b_end": [_ts((r[2] + 1) * BUCKET_S) for r in flat],
            "used_max": [r[3] for r in flat],
            "used_min": [r[4] for r in flat],
        },
    )
    _table(
        con,
        "gpu_info",
        {
            "host": [h for h, _ in info],
            "gpu_index": pa.array([g for _, g in info], pa.int32()),
            "gpu_name": ["H100"] * 3,
            "total": [80 * 2**30] * 3,
            "first_ts": [_ts(a) for a, _ in info.values()],
            "last_ts": [_ts(b) for _, b in info.values()],
        },
    )
    con.execute(
        f"CREATE TABLE rollup_settings AS SELECT {BUCKET_S} AS bucket_s, {BLOCK} AS chart_block"
    )
    for made in ("gpu_span", "gpu_blocks"):  # as the rollups make them
        (stmt,) = [
            s
            for s in rollup._statements((rollup.ROLLUP_DIR / "01_gpu_buckets.sql").read_text())
            if f"TABLE {made} AS" in s
        ]
        con.execute(stmt, {"chart_block": BLOCK} if "$chart_block" in stmt else None)
    _table(
        con,
        "idle_windows",
        {
            "host": ["h1", "h1", "h1"],
            "gpu_index": pa.array([0, 0, 1], pa.int32()),
            "start": [_ts(T0 + 600), _ts(T0), _ts(T0 + 60)],
            "end": [_ts(T0 + 900), _ts(T0 + 300), _ts(T0 + 120)],
            "baseline": [2.5, 3.5, 1e9 + 0.4],
        },
    )
    _table(
        con,
        "idle_trend",
        {
            "host": ["h1", "h1", "h1", "h2"],
            "gpu_index": pa.array([0, 0, 1, 0], pa.int32()),
            "t0": [T0, T0 + 10, T0, T0],
            "t1": [T0 + 3600, T0 + 20, T0 + 60, T0 + 60],
            "intercept_bytes": [1e9, 5.0, float("nan"), 7.0],
            "slope_bps": [10.25, 1.0, 1.0, 1.0],
            "n": [3, 2, 4, 5],
        },
    )
    # h1: 1,100 readings every 10 s around a gap of 4,000 s; h2: 300 at uneven times
    kv_ts = [("h1", T0 + i * 10) for i in range(1500) if not 500 <= i < 900]
    kv_ts += [("h2", T0 + i * 10 + 5 + i % 3) for i in range(300)]
    rnd.shuffle(kv_ts)
    kv = {x: rnd.random() for x in kv_ts}
    _table(
        con,
        "kv_usage",
        {"host": [h for h, _ in kv], "ts": [_ts(t) for _, t in kv], "kv_usage": list(kv.values())},
    )
    _table(
        con,
        "server_info",
        {
            "host": ["h1", "h1", "h3"],
            "engine": ["sglang", "sglang", "vllm"],
            "engine_version": ["0.4.1", "0.4.2", "0.6"],
            "model": ["m", "m", "n"],
            "mem_fraction_static": [0.8, 0.85, None],
            "gpu_memory_utilization": [None, None, 0.9],
            "disable_fast_image_processor": [None, False, None],
            "tp_size": [2, 2, None],
            "last_ts": [_ts(T0), _ts(T0 + 60), _ts(T0)],
        },
    )
    # 70 OOMs, and 3 restarts before most of them: each kind keeps its last 60
    logs = [("h1", T0 + 10 + i, "oom", i) for i in range(70)]
    logs += [("h1", T0 + i, "restart", 100 + i) for i in range(3)]
    logs += [("h1", T0 + 1000, "batch_stats", 99), ("h2", T0 + 5, "kv_leak_check", 1)]
    _table(
        con,
        "log_lines",
        {
            "host": [x[0] for x in logs],
            "ts": [_ts(x[1]) for x in logs],
            "signature": [x[2] for x in logs],
            "text": [f"line {x[3]}" for x in logs],
            "offset": [x[3] for x in logs],
        },
    )
    _table(
        con,
        "collector_runs",
        {
            "host": ["h1", "h1", "h1", "h2"],
            "source": ["metrics"] * 4,
            "status": ["failed", "ok", "failed", "ok"],
            "error": ["first", None, "last", None],
            "ts": [_ts(T0), _ts(T0 + 60), _ts(T0 + 120), _ts(T0)],
        },
    )
    _source_runs(con)
    n_alloc = 1000
    _table(
        con,
        "alloc_bins",
        {
            "host": ["h1"] * n_alloc,
            "pid": [42] * n_alloc,
            "process_start": [_ts(T0 - 60)] * n_alloc,
            "device": pa.array([0] * n_alloc, pa.int32()),
            "gpu_index": pa.array([0] * n_alloc, pa.int32()),
            "role": ["rank0"] * n_alloc,
            "b": [_ts(T0 + 300 * i) for i in reversed(range(n_alloc))],
            "alloc_floor": list(reversed(range(n_alloc))),
            "reserved_floor": [7] * n_alloc,
            "nvml_floor": [9] * n_alloc,
        },
    )
    _table(
        con,
        "allocator_snapshots",
        {"host": ["h2"], "ts": [_ts(T0 + 1)], "pid": [5], "path": ["/s.pickle"]},
    )
    doc = FindingsDocument(run=RunInfo("b", None, None, [], "", ""))
    series.fill(con, doc)
    return doc, {"rows": rows, "info": info, "kv": kv, "con": con}


def test_gpu_series_keep_each_chunks_peak_and_trough(filled) -> None:
    doc, given = filled
    assert [(s.host, s.gpu) for s in doc.series] == [("h1", 0), ("h1", 1), ("h2", 0)]
    for s in doc.series:
        want = _expected_gpu(given["rows"][s.host, s.gpu], *given["info"][s.host, s.gpu])
        assert [s.t, s.used_max, s.used_min] == want, (s.host, s.gpu)
        assert len(s.t) <= series.MAX_POINTS
        assert all(type(x) is float for x in s.t) and all(type(x) is int for x in s.used_max)
        assert (s.gpu_name, s.total_bytes) == ("H100", 80 * 2**30)
    assert len(doc.series[0].t) == 301 and len(doc.series[2].t) == 300  # blocks / untouched


def test_long_spans_are_charted_from_the_blocks_short_ones_from_the_buckets(filled) -> None:
    """h1's GPUs span days (whole blocks of gpu_blocks), h2's five hours (its buckets): each
    reads only its own table, so the stored tier's blocks stand in for a month's buckets."""
    doc, given = filled
    con = given["con"]
    con.execute("DELETE FROM gpu_buckets WHERE host = 'h1'")
    con.execute("DELETE FROM gpu_blocks WHERE host = 'h2'")
    again = FindingsDocument(run=RunInfo("b", None, None, [], "", ""))
    series.fill(con, again)
    assert [(s.host, s.gpu, s.t, s.used_max, s.used_min) for s in again.series] == [
        (s.host, s.gpu, s.t, s.used_max, s.used_min) for s in doc.series
    ]
    last_bi = max(r[-1][0] for r in given["rows"].values())
    assert doc.run.data_start == iso_utc(_ts(T0))
    assert doc.run.data_end == iso_utc(_ts((last_bi + 1) * BUCKET_S))


def test_idle_windows_and_trend_lines_per_gpu(filled) -> None:
    doc, _ = filled
    by = {(s.host, s.gpu): s for s in doc.series}
    # in start order; baselines rounded half to even, as floats
    assert by["h1", 0].idle_windows == [[T0, T0 + 300, 4.0], [T0 + 600, T0 + 900, 2.0]]
    assert by["h1", 1].idle_windows == [[T0 + 60, T0 + 120, 1e9]]
    # three idle windows or more, no NaN; the line's two ends
    assert by["h1", 0].trend == [[T0, 1e9, T0 + 3600, 1e9 + 36900.0]]
    assert by["h1", 1].trend == [] and by["h2", 0].trend == [[T0, 7.0, T0 + 60, 67.0]]


def test_kv_hosts_events_gaps_and_allocator(filled) -> None:
    doc, given = filled
    assert [k.host for k in doc.kv] == ["h1", "h2"]
    for k in doc.kv:
        pts = sorted((t, v) for (h, t), v in given["kv"].items() if h == k.host)
        if len(pts) <= series.MAX_POINTS:  # h2: every reading
            chunks = [[p] for p in pts]
        else:  # h1: equal slices of its span; none in the gap
            t0, w = pts[0][0], (pts[-1][0] - pts[0][0]) / series.MAX_POINTS
            by: dict[int, list[tuple[float, float]]] = {}
            for t, v in pts:
                by.setdefault(min(math.floor((t - t0) / w), series.MAX_POINTS - 1), []).append(
                    (t, v)
                )
            chunks = [by[i] for i in sorted(by)]
            assert 300 < len(chunks) < series.MAX_POINTS  # 4,000 s of 14,990 s have none
        assert k.t == [c[0][0] for c in chunks]
        assert k.kv == [round(max(v for _, v in c), 4) for c in chunks]
    assert [(h.host, h.gpus, h.engine_version) for h in doc.hosts] == [
        ("h1", 2, "0.4.2"),
        ("h2", 1, None),
        ("h3", 0, "0.6"),
    ]
    assert doc.hosts[0].flags == {
        "disable_fast_image_processor": False,
        "mem_fraction_static": 0.85,
        "tp_size": 2,
    }
    h1 = [e for e in doc.events if e.host == "h1"]
    ooms = [e.text for e in h1 if e.kind == "oom"]
    assert len(ooms) == series.MAX_EVENTS_PER_KIND and ooms[0] == "line 10"  # the last 60
    assert [e.text for e in h1 if e.kind == "restart"] == ["line 100", "line 101", "line 102"]
    assert {e.kind for e in h1} == {"oom", "restart"}  # not batch_stats
    assert [e.kind for e in doc.events if e.host == "h2"] == ["memory_snapshot", "kv_leak_check"]
    stale, *failed = doc.run.gaps
    assert stale.startswith("h2: no GPU samples after ")  # h2's GPU stops long before h1's
    assert failed == ["h1: source metrics failed in 2 of 3 collector runs (last: last)"]
    (a,) = doc.alloc
    assert a.t == [T0 + 300 * i for i in range(0, 1000, 3)]  # every third of 1,000, in time order
    assert a.allocated == list(range(0, 1000, 3))


def test_no_failed_source_is_no_gap() -> None:
    con = duckdb.connect()
    _table(
        con,
        "collector_runs",
        {
            "host": ["h"],
            "source": ["nvml"],
            "status": ["ok"],
            "error": pa.array([None], pa.string()),
            "ts": [_ts(T0)],
        },
    )
    _source_runs(con)
    assert series.source_failures(con) == []
    con.execute("UPDATE collector_runs SET status = 'failed', error = 'boom'")
    _source_runs(con)
    assert series.source_failures(con) == [
        "h: source nvml failed in 1 of 1 collector runs (last: boom)"
    ]


def test_source_runs_added_up_by_day_are_those_of_every_run() -> None:
    """The stored tier keeps source_runs per host-day; added up (tier/source_runs.sql) they
    are what one pass over every run gives: counts, and the last error, also where two
    failures share an instant, the latest has no error text, or a day has no failure."""
    from analyzer import tier

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")  # days are UTC days, as in the bucket
    day = 86400
    runs = [  # host, source, status, error, seconds
        ("h", "metrics", "failed", "b", 10),
        ("h", "metrics", "failed", "a", 10),
        ("h", "metrics", "ok", None, 20),
        ("h", "metrics", "failed", "z-early", day - 5),
        ("h", "metrics", "failed", "c", day + 10),
        ("h", "metrics", "failed", "b", day + 10),
        ("h", "metrics", "failed", None, day + 99),  # latest, but no text
        ("h", "nvml", "ok", None, 30),
        ("h", "nvml", "ok", None, day + 30),
        ("g", "logs", "failed", "x", 2 * day + 1),
        ("g", "logs", "ok", None, 1),
    ]
    _table(
        con,
        "all_runs",
        {
            "host": [r[0] for r in runs],
            "source": [r[1] for r in runs],
            "status": [r[2] for r in runs],
            "error": pa.array([r[3] for r in runs], pa.string()),
            "ts": [_ts(T0 + r[4]) for r in runs],
        },
    )
    got = "SELECT * FROM source_runs ORDER BY host, source"
    con.execute("CREATE VIEW collector_runs AS SELECT * FROM all_runs")
    _source_runs(con)
    whole = con.execute(got).fetchall()
    assert ("h", "metrics", 6, 7, "c", dt.datetime.fromtimestamp(T0 + day + 10, dt.UTC)) in whole
    con.execute("CREATE TABLE tier_source_runs AS SELECT * FROM source_runs LIMIT 0")
    days = con.execute("SELECT DISTINCT ts::DATE FROM all_runs").fetchall()
    for (d,) in days:
        con.execute(
            f"CREATE OR REPLACE VIEW collector_runs AS "
            f"SELECT * FROM all_runs WHERE ts::DATE = DATE '{d}'"
        )
        _source_runs(con)
        con.execute("INSERT INTO tier_source_runs SELECT * FROM source_runs")
    con.execute("CREATE TABLE source_runs_rest AS SELECT * FROM source_runs LIMIT 0")
    con.execute((tier.COMBINE_DIR / "source_runs.sql").read_text("utf-8"))
    assert con.execute(got).fetchall() == whole
