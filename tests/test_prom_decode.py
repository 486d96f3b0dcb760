"""The query_range decoder (Arrow CSV for the points) and the column-wise chunk builder.

The answers are written here in the shape of Prometheus' HTTP API documentation
(``{"status":"success","data":{"resultType":"matrix","result":[{"metric":{...},
"values":[[<unix time>,"<value>"],...]}]}}``); the fast path must read exactly what
``json`` reads, and fall back to ``json`` for any other shape.
"""

from __future__ import annotations

import http.server
import json
import math
import threading
from typing import Any

import pyarrow as pa
import pytest

from collector.promdecode import Matrix, MatrixFormatError, fast_matrix, slow_matrix
from collector.promgrid import GpuGrid, engine_table
from collector.promplan import GpuId

MIB = 1024 * 1024


def _answer(result: list[dict[str, Any]], **dump: Any) -> bytes:
    doc = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    return json.dumps(doc, separators=(",", ":"), **dump).encode()


def _same(a: Matrix, b: Matrix) -> None:
    assert a.labels == b.labels and a.counts == b.counts
    assert a.t.to_pylist() == b.t.to_pylist()
    for x, y in zip(a.v.to_pylist(), b.v.to_pylist(), strict=True):
        assert (math.isnan(x) and math.isnan(y)) or x == y


ODD: list[dict[str, Any]] = [
    {
        "metric": {"__name__": "up", "job": 'a"b}', "path": "c:\\d", "x": "],[ ]]"},
        "values": [[1795392000, "1"], [1795392015.5, "NaN"], [1795392030.125, "+Inf"]],
    },
    {"metric": {}, "values": [[1795392000, "-Inf"], [1795392001, "1e-3"]]},
    {"metric": {"k": "ü"}, "values": [[1795392000, "-0.5"]]},
]


def test_fast_path_reads_what_json_reads() -> None:
    raw = _answer(ODD)
    fast = fast_matrix(raw)
    _same(fast, slow_matrix(json.loads(raw)["data"]))
    assert fast.counts == [3, 2, 1] and fast.labels[0]["job"] == 'a"b}'
    v = fast.v.to_pylist()
    assert math.isnan(v[1]) and v[2] == math.inf and v[3] == -math.inf and v[4] == 0.001
    assert fast.t.to_pylist()[1:3] == [1795392015.5, 1795392030.125]
    assert fast.series_index().to_pylist() == [0, 0, 0, 1, 1, 2]
    # an empty result, and Prometheus' own key order only
    assert fast_matrix(_answer([])).points == 0
    with pytest.raises(MatrixFormatError):
        fast_matrix(_answer(ODD, indent=1))  # whitespace: json decodes it instead
    with pytest.raises(MatrixFormatError):
        fast_matrix(_answer([{"values": [[1, "1"]], "metric": {}}]))
    with pytest.raises(MatrixFormatError):
        fast_matrix(b'{"status":"error","errorType":"bad_data","error":"x"}')


class _Pretty(http.server.BaseHTTPRequestHandler):
    """Answers every query with ODD, indented (as a proxy might re-encode it)."""

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = _answer(ODD, indent=2)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_a: object) -> None:
        pass


def test_client_falls_back_to_json_for_other_shapes() -> None:
    from collector.promapi import PromClient

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pretty)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        c = PromClient(f"http://127.0.0.1:{srv.server_address[1]}", retries=0, timeout=10)
        _same(c.query_range("up", 1795392000, 1795392030, 15), fast_matrix(_answer(ODD)))
    finally:
        srv.shutdown()
        srv.server_close()


def _gid(pod: str, gpu: int = 0) -> GpuId:
    return GpuId(gpu, f"GPU-{gpu}", "H100", "llm", pod, "server")


def _matrix(series: list[list[tuple[float, float]]]) -> Matrix:
    pts = [p for s in series for p in s]
    return Matrix(
        [{"s": str(k)} for k in range(len(series))],
        [len(s) for s in series],
        pa.array([t for t, _ in pts], pa.float64()),
        pa.array([v for _, v in pts], pa.float64()),
    )


def test_grid_newest_series_wins_and_rows_need_memory_or_utilisation() -> None:
    t0, step = 1000.0, 10.0
    g = GpuGrid(t0, 4, step)
    used = _matrix(
        [
            [(1000, 100), (1010, 101), (1020, 102)],  # the old pod
            [(1020, 500), (1030, math.nan)],  # the new pod, from 1020 on
        ]
    )
    p = g.part(used)
    g.keep(p, "h", _gid("old"), "memory_used_bytes", MIB, 1000.0)
    g.keep(p, "h", _gid("new"), "memory_used_bytes", MIB, 1020.0)
    free = g.part(_matrix([[(1000, 900), (1010, 899), (1020, 898), (1030, 897)]]))
    g.keep(free, "h", _gid("old"), "memory_free_bytes", MIB, 1000.0)
    util = g.part(_matrix([[(1030, 7.0), (1050, 9.0)], [(1000, 1.0)]]))  # 1050: out of chunk
    g.keep(util, "h", _gid("new"), "utilization_gpu_pct", 1.0, 1020.0)
    g.keep(util, None, None, "utilization_gpu_pct", 1.0, 0.0)  # a series not in the plan
    rows = g.tables()["h"].to_pylist()
    assert [r["ts"].timestamp() for r in rows] == [1000, 1010, 1020, 1030]
    assert [r["memory_used_bytes"] for r in rows] == [100 * MIB, 101 * MIB, 500 * MIB, None]
    assert [r["pod"] for r in rows] == ["old", "old", "new", "new"]
    assert [r["utilization_gpu_pct"] for r in rows] == [None, None, None, 7.0]
    assert rows[2]["memory_total_bytes"] == (500 + 898) * MIB
    assert rows[3]["memory_total_bytes"] is None  # used unknown at 1030


def test_engine_table_keeps_names_labels_and_hosts() -> None:
    m = _matrix([[(1000, 1.0), (1010, 2.0)], [(1000, 3.0)], [(1000.5, 4.0)]])
    m.labels = [{"__name__": "a", "x": "1"}, {"__name__": "b"}, {"__name__": "c", "y": "2"}]
    t = engine_table(m, ["h1", None, "h2"], "prometheus:u").to_pylist()
    assert [(r["name"], r["host"], r["value"]) for r in t] == [
        ("a", "h1", 1.0),
        ("a", "h1", 2.0),
        ("c", "h2", 4.0),
    ]
    assert t[0]["labels"] == [("x", "1")] and t[2]["labels"] == [("y", "2")]
    assert t[2]["ts"].timestamp() == 1000.5 and t[0]["source"] == "prometheus:u"
