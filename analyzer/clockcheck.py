"""Does a host's server log keep the same clock as its GPU samples?

An imported server log read in the wrong zone (its import given no ``--tz``, the
nvidia-smi log's given one) lies hours from the GPU samples, and nothing else says so:
process lifetimes, restarts and idle windows are then cut at the wrong times, and a
leak rate or an out-of-memory time comes out wrong. The engines print batch lines only
while they serve requests, when the GPU works: the minutes with such lines should be
minutes of GPU activity. Where they are far more often so with the log's times moved by
a whole quarter hour (within 14 hours) than as they are, the host is named with the
shift, and the analysis is incomplete.
"""

from __future__ import annotations

import duckdb

from analyzer.findings import host_reason

BUSY_PCT = 20  # GPU utilisation of an active minute
MIN_MINUTES = 30  # minutes with batch lines, for a host to be judged
SAMPLE = 600  # of them at most, spread over its span, per host
# the shift must match this share of the batch minutes, where none matches half
MATCH, AS_IS = 0.8, 0.5

_OFFSETS = """
WITH lines AS (
    SELECT host, m, row_number() OVER (PARTITION BY host ORDER BY m) AS k,
           count(*) OVER (PARTITION BY host) AS n
    FROM (SELECT DISTINCT host, CAST(floor(epoch(ts) / 60) AS BIGINT) AS m
          FROM log_events WHERE event = 'batch_stats' AND coalesce(running_reqs, 1) > 0)
),
picked AS (  -- at most $sample minutes a host, spread over its span
    SELECT host, m FROM lines
    WHERE n >= $min_minutes AND k % greatest(1, n // $sample) = 0
),
busy AS (
    SELECT DISTINCT host, CAST(floor(epoch(b) / 60) AS BIGINT) AS m
    FROM gpu_buckets
    WHERE util_max >= $busy AND host IN (SELECT host FROM picked)
),
shifts AS (SELECT unnest(range(-56, 57)) * 15 AS shift),
hits AS (
    SELECT p.host, s.shift, count(b.m) / count(*) AS share
    FROM picked p CROSS JOIN shifts s
    LEFT JOIN busy b ON b.host = p.host AND b.m = p.m + s.shift
    GROUP BY ALL
)
SELECT host, arg_max(shift, (share, -abs(shift))) AS best, max(share) AS best_share,
       max(share) FILTER (WHERE shift = 0) AS share_as_is
FROM hits GROUP BY host ORDER BY host
"""


def log_clock_offsets(con: duckdb.DuckDBPyConnection) -> list[str]:
    """A reason the analysis is incomplete per host whose server log looks shifted from
    its GPU samples (see the module)."""
    params = {"busy": BUSY_PCT, "min_minutes": MIN_MINUTES, "sample": SAMPLE}
    try:
        rows = con.execute(_OFFSETS, params).fetchall()
    except duckdb.Error:
        return []  # no log events or no buckets: nothing to compare
    out = []
    for host, best, best_share, as_is in rows:
        if best and best_share >= MATCH and (as_is or 0.0) < AS_IS:
            h, mins = divmod(abs(int(best)), 60)
            by = (f"{h} h" if h else "") + (f" {mins} min" if mins else "")
            way = "behind" if best > 0 else "ahead of"  # the shift that puts them right
            out.append(
                host_reason(
                    str(host),
                    f"its server log's times look {by.strip()} {way} its GPU samples' (its batch "
                    f"lines fall in GPU activity {best_share:.0%} of the time with that "
                    f"shift, {(as_is or 0.0):.0%} as they are): lifetimes, restarts and idle "
                    "windows read from the log are misplaced; import the log again with the "
                    "--tz its samples were imported with",
                )
            )
    return out
