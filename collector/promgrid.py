"""One import chunk's rows, built column-wise in Arrow from the decoded matrices.

``GpuGrid`` puts the device series of one time chunk on the step grid per (host, GPU):
one row per step where memory used or utilisation is known, the columns side by side,
and where an old and a new series of one GPU overlap (a restarted pod), the newer one
(the later first sample) wins. ``engine_table`` keeps the engine series as scraped,
for ``metric_samples``. Neither makes a Python object per point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from collector.promdecode import Matrix, repeat
from collector.promplan import GPU_COLUMNS, GpuId

_IDENT = ("gpu_uuid", "gpu_name", "namespace", "pod", "container")
_BYTES = tuple(c for c in GPU_COLUMNS if c.endswith("_bytes"))


@dataclass
class _Part:
    m: Matrix
    slot: list[int] = field(default_factory=list)  # -1: not kept
    column: list[int] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)
    born: list[float] = field(default_factory=list)
    ident: list[int] = field(default_factory=list)


def _last_per_key(key: pa.Array) -> pa.Array:
    """Mask of the last row of each run of equal keys (``key`` sorted)."""
    n = len(key)
    if n == 0:
        return pa.array([], pa.bool_())
    if n == 1:
        return pa.array([True])
    diff = pc.not_equal(key.slice(0, n - 1), key.slice(1))
    return pa.concat_arrays([diff, pa.array([True])])


class GpuGrid:
    """Device columns of one chunk [t0, t0 + (n - 1) * step] for a batch of hosts."""

    def __init__(self, t0: float, n: int, step: float) -> None:
        self.t0, self.n, self.step = t0, n, step
        self.parts: list[_Part] = []
        self.slots: dict[tuple[str, int], int] = {}
        self.idents: dict[GpuId, int] = {}

    def part(self, m: Matrix) -> _Part:
        p = _Part(m)
        self.parts.append(p)
        return p

    def keep(
        self, p: _Part, host: str | None, g: GpuId | None, column: str, scale: float, born: float
    ) -> None:
        """The next series of ``p.m`` goes to (host, g.gpu_index) (host None: left out)."""
        if host is None or g is None:
            p.slot.append(-1)
            p.column.append(0)
            p.ident.append(0)
        else:
            p.slot.append(self.slots.setdefault((host, g.gpu_index), len(self.slots)))
            p.column.append(GPU_COLUMNS.index(column))
            p.ident.append(self.idents.setdefault(g, len(self.idents)))
        p.scale.append(scale)
        p.born.append(born)

    def tables(self) -> dict[str, pa.Table]:
        """host -> its gpu_samples rows of this chunk (hosts without rows left out)."""
        parts = [p for p in self.parts if p.m.points]
        if not parts or not self.slots:
            return {}
        # slots in (host, GPU) order, so each host's rows come out together and sorted
        order = sorted(self.slots, key=lambda k: k)
        rank = {k: r for r, k in enumerate(order)}
        to_rank = [rank[k] for k in sorted(self.slots, key=self.slots.__getitem__)]

        def per_point(attr: str, typ: pa.DataType) -> pa.Array:
            # per-series attribute over every point, through the series number
            vals: list[Any] = [x for p in parts for x in getattr(p, attr)]
            return pc.take(pa.array(vals, typ), sid)

        counts = [n for p in parts for n in p.m.counts]
        sid = repeat(list(range(len(counts))), counts)
        t = pa.concat_arrays([p.m.t for p in parts])
        v = pa.concat_arrays([p.m.v for p in parts])
        slot_raw = per_point("slot", pa.int64())
        i = pc.cast(pc.round(pc.divide(pc.subtract(t, self.t0), self.step)), pa.int64())
        ok = pc.and_(
            pc.greater_equal(slot_raw, 0),
            pc.and_(pc.greater_equal(i, 0), pc.less(i, self.n)),
        )
        rows = pa.table(
            {
                "slot": slot_raw,
                "i": i,
                "col": per_point("column", pa.int8()),
                "born": per_point("born", pa.float64()),
                "x": pc.multiply(v, per_point("scale", pa.float64())),
                "ident": per_point("ident", pa.int32()),
            }
        ).filter(ok)
        ranked = pc.take(pa.array(to_rank, pa.int64()), rows["slot"])
        rows = rows.append_column("key", pc.add(pc.multiply(ranked, self.n), rows["i"]))
        # the newest series wins a step: stable sort by born within each (column, key)
        won: dict[str, pa.Table] = {}
        for c, name in enumerate(GPU_COLUMNS):
            sub = rows.filter(pc.equal(rows["col"], c))  # in input order
            if not sub.num_rows:
                continue
            sub = sub.take(pc.sort_indices(sub, [("key", "ascending"), ("born", "ascending")]))
            sub = sub.filter(_last_per_key(sub["key"].combine_chunks()))
            x = sub["x"].combine_chunks()
            won[name] = sub.set_column(
                sub.schema.get_field_index("x"), "x", pc.if_else(pc.is_nan(x), None, x)
            )
        known = [
            w.filter(pc.is_valid(w["x"]))["key"]
            for c, w in won.items()
            if c in ("memory_used_bytes", "utilization_gpu_pct")
        ]
        if not known:
            return {}
        keys = pc.unique(pa.chunked_array([k for ch in known for k in ch.chunks]))
        keys = pc.take(keys, pc.sort_indices(keys))
        cols: dict[str, pa.Array] = {}
        ident: pa.Array | None = None
        for name in ("memory_used_bytes", "utilization_gpu_pct", *GPU_COLUMNS):
            if name in cols or name not in won:
                continue
            w = won[name]
            pos = pc.index_in(keys, value_set=w["key"].combine_chunks())
            cols[name] = pc.take(w["x"].combine_chunks(), pos)
            who = pc.take(w["ident"].combine_chunks(), pos)
            ident = who if ident is None else pc.coalesce(ident, who)
        assert ident is not None
        slot = pc.divide(keys, self.n)  # integer division
        step_i = pc.subtract(keys, pc.multiply(slot, self.n))
        us = pc.round(pc.multiply(pc.add(self.t0, pc.multiply(step_i, self.step)), 1e6))
        ids = list(self.idents)
        out: dict[str, Any] = {
            "ts": pc.cast(pc.cast(us, pa.int64()), pa.timestamp("us", tz="UTC")),
            "gpu_index": pc.take(pa.array([k[1] for k in order], pa.int32()), slot),
        }
        for a in _IDENT:
            attr = "uuid" if a == "gpu_uuid" else "name" if a == "gpu_name" else a
            out[a] = pc.take(pa.array([getattr(g, attr) for g in ids], pa.string()), ident)
        for name in GPU_COLUMNS:
            x = cols.get(name, pa.nulls(len(keys), pa.float64()))
            out[name] = pc.cast(x, pa.int64(), safe=False) if name in _BYTES else x
        used, free = cols.get("memory_used_bytes"), cols.get("memory_free_bytes")
        if used is not None and free is not None:
            res = cols.get("memory_reserved_bytes")
            tot = pc.add(used, free)
            if res is not None:
                tot = pc.add(tot, pc.fill_null(res, 0.0))
            out["memory_total_bytes"] = pc.cast(tot, pa.int64(), safe=False)
        else:
            out["memory_total_bytes"] = pa.nulls(len(keys), pa.int64())
        table = pa.table(out)
        host_of = pc.take(pa.array([k[0] for k in order], pa.string()), slot)
        return {h: table.filter(pc.equal(host_of, h)) for h in sorted({k[0] for k in self.slots})}


def engine_table(m: Matrix, hosts: list[str | None], source: str) -> pa.Table:
    """metric_samples rows (and a ``host`` column) of the series with a host (None: left
    out); the labels as a map array that repeats each series' keys and values."""
    every = m.series_index()
    keep = pc.take(pa.array([h is not None for h in hosts], pa.bool_()), every)
    sid = every.filter(keep)
    t, v = m.t.filter(keep), m.v.filter(keep)
    names = [x.get("__name__") for x in m.labels]
    labels = [{k: x for k, x in d.items() if k != "__name__"} for d in m.labels]
    klist = pa.array([list(x) for x in labels], pa.list_(pa.string()))
    vlist = pa.array([list(x.values()) for x in labels], pa.list_(pa.string()))
    ks, vs = pc.take(klist, sid), pc.take(vlist, sid)
    lab = pa.MapArray.from_arrays(ks.offsets, ks.flatten(), vs.flatten())
    us = pc.cast(pc.round(pc.multiply(t, 1e6)), pa.int64())
    return pa.table(
        {
            "ts": pc.cast(us, pa.timestamp("us", tz="UTC")),
            "source": pa.repeat(pa.scalar(source, pa.string()), len(t)),
            "name": pc.take(pa.array(names, pa.string()), sid),
            "labels": lab,
            "value": v,
            "host": pc.take(pa.array(hosts, pa.string()), sid),
        }
    )
