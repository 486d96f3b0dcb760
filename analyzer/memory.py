"""``--memory-limit``: the analysis process's memory, of which DuckDB gets what the
process does not hold already or need for its Python side.

DuckDB's own ``memory_limit`` bounds only DuckDB's buffers: an analysis given all of a
1 GB limit peaked at 1.15 GiB of RSS on the 25-host month (``make bench``), over a
container's 1 GB. So DuckDB gets the budget less this process's resident memory when
the connection opens and :data:`PYTHON_RESERVE`, and spills to disk past that.
"""

from __future__ import annotations

import re
from pathlib import Path

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KIB|MIB|GIB|TIB)", re.I)
# 1000-based and 1024-based, as DuckDB reads them
_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_UNITS.update({"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40})

# What an analysis holds outside DuckDB after its connection opens (findings, chart
# series, modules imported later, query results on their way to Python): 100-130 MiB
# measured on the 25-host month, with room to spare.
PYTHON_RESERVE = 160 * 2**20
MIN_SHARE = 0.25  # DuckDB's least share of the budget, however much the process holds
# Less does not run the analysis of a small fleet within it (300MB peaked at 320 MiB; 0
# would mean no limit at all).
MIN_BUDGET = 512 * 10**6
MIN_BUDGET_TEXT = f"{MIN_BUDGET // 10**6}MB"
# An analysis's checkpoint_threshold: never. A checkpoint of its in-memory database
# compresses every table made so far; automatic ones ran whenever 16 MiB more had been
# made, so a month's history was rewritten several times (0.1 s of a 2 s run). Peak RSS
# fell with them gone (the 25-host month: 399 MiB against 478 MiB).
NO_CHECKPOINT = "1TB"


class TooSmall(ValueError):
    """A size under :data:`MIN_BUDGET`."""


def parse_memory_limit(value: str) -> int:
    """A size such as ``2GB``, ``512MiB`` or ``1.5 gib``, in bytes; ValueError otherwise."""
    m = _SIZE.fullmatch(value.strip())
    if not m:
        raise ValueError(f"--memory-limit {value!r}: expected a size such as 512MB, 2GB or 1.5GiB")
    n = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if n < MIN_BUDGET:
        raise TooSmall(
            f"--memory-limit {value!r}: too small; an analysis needs at least {MIN_BUDGET_TEXT}"
        )
    return n


def resident_bytes() -> int:
    """This process's resident memory now (VmRSS); 0 where /proc cannot say."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def duckdb_share(budget: int, held: int | None = None) -> int:
    """Of a process's memory ``budget`` (bytes), what DuckDB may use: the budget less what
    the process holds (``held``, default its resident memory now) and the reserve, and at
    least :data:`MIN_SHARE` of it."""
    held = resident_bytes() if held is None else held
    return max(budget - held - PYTHON_RESERVE, int(budget * MIN_SHARE))


def mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def budget_note(limit: str) -> str:
    """What ``--memory-limit`` means, for runs of several connections (batches, Dask)."""
    return (
        f"memory: --memory-limit {limit} per process; each connection's DuckDB gets it less "
        f"what its process holds and {mib(PYTHON_RESERVE)}, and spills to disk past that"
    )


OUT_OF_MEMORY_HINT = (
    "DuckDB ran out of memory: raise --memory-limit (DuckDB gets it less what the "
    f"process holds and a {mib(PYTHON_RESERVE)} reserve), or lower --batch-hosts"
)
