"""Decode ``/api/v1/query_range`` matrices into Arrow columns without a Python object per point.

A matrix answer is ``{"status":"success","data":{"resultType":"matrix","result":[
{"metric":{...},"values":[[1795392000,"60000"],...]}, ...]}}``. The label sets are few
and are decoded with :mod:`json`; the points (most of the bytes) are cut out of the
answer as they are, turned into CSV lines (``1795392000,"60000"``) and parsed by
Arrow's CSV reader, so a point costs a few bytes copied instead of two lists, a float
and a string. An answer in any other shape (other key order, native histograms,
whitespace) is decoded with :mod:`json` instead, into the same :class:`Matrix`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

_HEAD = b'{"status":"success","data":{"resultType":"matrix","result":['
# one result's label set: a JSON object of strings (escapes allowed), then its points
_METRIC = re.compile(rb'\{"metric":(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\}),"values":\[')
_CSV_READ = pcsv.ReadOptions(column_names=["t", "v"], use_threads=False)
_CSV_CONVERT = pcsv.ConvertOptions(
    column_types={"t": pa.float64(), "v": pa.float64()},
    null_values=[],
    strings_can_be_null=False,
)


class MatrixFormatError(ValueError):
    pass


@dataclass
class Matrix:
    """Series of one or more range queries: ``labels[k]`` has ``counts[k]`` points, which
    are consecutive in ``t`` (epoch seconds) and ``v``."""

    labels: list[dict[str, str]] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    t: pa.Array = field(default_factory=lambda: pa.array([], pa.float64()))
    v: pa.Array = field(default_factory=lambda: pa.array([], pa.float64()))

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def points(self) -> int:
        return len(self.t)

    def starts(self) -> list[int]:
        """The offset of each series' first point."""
        out, at = [], 0
        for n in self.counts:
            out.append(at)
            at += n
        return out

    def series_index(self) -> pa.Array:
        """int32: for every point, the number of its series."""
        return repeat(list(range(len(self.counts))), self.counts)

    def pairs(self) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """(labels, [(t, v), ...]) per series: for tests and small answers."""
        ts, vs = self.t.to_pylist(), self.v.to_pylist()
        return [
            (lab, list(zip(ts[a : a + n], vs[a : a + n], strict=True)))
            for lab, a, n in zip(self.labels, self.starts(), self.counts, strict=True)
        ]

    @staticmethod
    def concat(parts: list[Matrix]) -> Matrix:
        if len(parts) == 1:
            return parts[0]
        out = Matrix()
        for p in parts:
            out.labels += p.labels
            out.counts += p.counts
        if parts:
            out.t = pa.concat_arrays([p.t for p in parts])
            out.v = pa.concat_arrays([p.v for p in parts])
        return out


def repeat(values: list[int], counts: list[int]) -> pa.Array:
    """int32 ``values[k]`` repeated ``counts[k]`` times, built in Arrow."""
    keep = [(x, n) for x, n in zip(values, counts, strict=True) if n > 0]
    if not keep:
        return pa.array([], pa.int32())
    ends, at = [], 0
    for _, n in keep:
        at += n
        ends.append(at)
    ree = pa.RunEndEncodedArray.from_arrays(
        pa.array(ends, pa.int32()), pa.array([x for x, _ in keep], pa.int32())
    )
    return pc.run_end_decode(ree)


def _points(csv: bytes) -> tuple[pa.Array, pa.Array]:
    if not csv:
        return pa.array([], pa.float64()), pa.array([], pa.float64())
    tab = pcsv.read_csv(pa.BufferReader(csv), read_options=_CSV_READ, convert_options=_CSV_CONVERT)
    return tab.column("t").combine_chunks(), tab.column("v").combine_chunks()


def fast_matrix(raw: bytes) -> Matrix:
    """The result of a compact Prometheus matrix answer; MatrixFormatError if it is not one."""
    if not raw.startswith(_HEAD):
        raise MatrixFormatError("not a compact matrix answer")
    at = len(_HEAD)
    labels: list[dict[str, str]] = []
    counts: list[int] = []
    pieces: list[bytes] = []
    if raw[at : at + 1] != b"]":
        while True:
            m = _METRIC.match(raw, at)
            if m is None:
                raise MatrixFormatError(f"unexpected bytes at {at}")
            labels.append(json.loads(m.group(1)))
            at = m.end()
            if raw[at : at + 1] == b"]":  # no points
                counts.append(0)
                at += 1
            else:
                end = raw.find(b"]]", at)
                if end < 0 or raw[at : at + 1] != b"[":
                    raise MatrixFormatError(f"unterminated values at {at}")
                piece = raw[at + 1 : end]  # t,"v"],[t,"v"],...,[t,"v"
                counts.append(piece.count(b"],[") + 1)
                pieces.append(piece)
                at = end + 2
            if raw[at : at + 1] != b"}":
                raise MatrixFormatError(f"unexpected bytes after a series at {at}")
            at += 1
            if raw[at : at + 1] == b",":
                at += 1
                continue
            break
    if raw[at : at + 2] != b"]}":
        raise MatrixFormatError(f"unexpected end of the result at {at}")
    csv = b"],[".join(pieces).replace(b"],[", b"\n")
    t, v = _points(csv)
    if len(t) != sum(counts):
        raise MatrixFormatError("point count mismatch")
    return Matrix(labels, counts, t, v)


def slow_matrix(data: Any) -> Matrix:
    """The same from an answer's decoded ``data`` (any valid JSON shape)."""
    out = Matrix()
    ts: list[float] = []
    vs: list[float] = []
    for r in data.get("result", []):
        pts = r.get("values") or []
        out.labels.append(dict(r.get("metric") or {}))
        out.counts.append(len(pts))
        ts.extend(float(p[0]) for p in pts)
        vs.extend(float(p[1]) for p in pts)
    out.t, out.v = pa.array(ts, pa.float64()), pa.array(vs, pa.float64())
    return out
