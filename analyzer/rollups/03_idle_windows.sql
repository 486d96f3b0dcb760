-- The buckets of the host-days whose idle segments this run derives: those the stored
-- tier does not cover (idle_cover; empty without a tier). With a tier, the analysis
-- makes this view over those host-days' files alone (analyzer/tierjoint.py), so a
-- covered host-day's buckets are not read for it at all. (A view takes no parameters:
-- the day of a bucket from its start, b.)
CREATE OR REPLACE VIEW idle_gpu_buckets AS
SELECT g.* FROM gpu_buckets g
ANTI JOIN idle_cover c ON c.host = g.host AND c.dn = CAST(floor(epoch(g.b) / 86400) AS BIGINT);

-- The host's running requests at the end of each bucket: the last reading
-- before it, carried forward while fresh ($activity_stale_s; $log_activity_stale_s
-- for a reading from batch-stats log lines alone, which stop at idle) - a
-- bucket-grid join, not an ASOF join per GPU bucket. Only for the buckets whose
-- idle state is derived in this run: those of host-days the stored tier does not
-- cover (idle_cover; empty without a tier); and the readings near every midnight,
-- where a reading of one day is still fresh in the next day's first buckets (which
-- idle_runs checks, stored or not: last_running and last_ts are the last reading at or
-- before the bucket, fresh or not, and stale_s how long that reading stays fresh). A step
-- of the idle windows only (a temporary table).
CREATE OR REPLACE TEMP TABLE activity_grid AS
WITH a AS (
    -- the readings of those host-days, and those of a covered host-day near its ends:
    -- the last of each bucket
    SELECT x.host, CAST(floor(epoch(x.ts) / $bucket_s) AS BIGINT) AS bi,
           arg_max(x.running, x.ts) AS running, max(x.ts) AS ts, arg_max(x.from_log, x.ts) AS from_log
    FROM activity x
    LEFT JOIN idle_cover c ON c.host = x.host AND c.dn = CAST(floor(epoch(x.ts) / 86400) AS BIGINT)
    WHERE c.dn IS NULL
       OR epoch(x.ts) - c.dn * 86400 NOT BETWEEN greatest($activity_stale_s, $log_activity_stale_s) + $bucket_s
                                          AND 86400 - greatest($activity_stale_s, $log_activity_stale_s) - $bucket_s - 1
    GROUP BY ALL
),
grid AS (
    -- every bucket of those host-days, and every bucket with a reading: a reading then
    -- always has a place on the grid to be carried from
    SELECT DISTINCT host, bi FROM (
        SELECT host, bi FROM idle_gpu_buckets
        UNION ALL
        SELECT host, bi FROM a
    )
),
f AS (
    SELECT g.host, g.bi,
           last_value(a.running IGNORE NULLS) OVER w AS running,
           last_value(a.ts IGNORE NULLS) OVER w AS ts,
           last_value(a.from_log IGNORE NULLS) OVER w AS from_log
    FROM grid g LEFT JOIN a USING (host, bi)
    WINDOW w AS (PARTITION BY g.host ORDER BY g.bi ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
l AS (
    SELECT host, bi, running AS last_running, ts AS last_ts,
           CASE WHEN from_log THEN $log_activity_stale_s ELSE $activity_stale_s END AS stale_s
    FROM f
)
SELECT host, bi,
       CASE WHEN (bi + 1) * $bucket_s - epoch(last_ts) <= stale_s THEN last_running END AS running,
       last_running, last_ts, stale_s
FROM l;

-- The requests_total readings of the host-days whose idle segments this run derives (as
-- idle_gpu_buckets: with a tier, made over those host-days' files alone).
CREATE OR REPLACE VIEW idle_requests AS
SELECT m.host, m.ts, m.day_increase FROM metric_norm m
ANTI JOIN idle_cover c ON c.host = m.host AND c.dn = CAST(floor(epoch(m.ts) / 86400) AS BIGINT)
WHERE m.metric = 'requests_total';

-- Idle windows: consecutive buckets with the GPU near idle and no running
-- requests (the last activity reading, when fresh), lasting at least
-- $min_idle_s. Their median memory is the idle baseline.
-- First the segments: runs of idle buckets within one UTC day (dn: days since
-- 1970), each of a day's first buckets (those within the longer staleness of
-- midnight) a segment of its own. The stored tier keeps them per host-day (made
-- from that day's samples alone: a first bucket is then idle unless the day's own
-- readings say otherwise, and is checked again below). vals: how many buckets had
-- each used_avg (a map), so that segments joined across midnight have an exact median.
-- day_requests: the day_increase of the host's last requests_total reading at or before
-- the segment's start, that day (NULL: none yet that day), so that a window's requests
-- served before it need no lookup over every reading (idle_windows).
CREATE OR REPLACE TABLE idle_segments AS
WITH kv AS (
    -- the host's peak KV-cache usage per bucket (a window is whole buckets), from the
    -- first of the buckets whose segments this run derives on: those are all it joins
    SELECT k.host, CAST(floor(epoch(k.ts) / $bucket_s) AS BIGINT) AS bi, max(k.kv_usage) AS kv
    FROM kv_usage k
    WHERE k.ts >= (SELECT to_timestamp(min(bi) * $bucket_s - 1) FROM idle_gpu_buckets)
    GROUP BY ALL
),
s AS (
    -- idle buckets only; consecutive bucket numbers form one run (a data gap ends it).
    -- Only the columns the segments need: the row_number sort carries every column it
    -- is given (a month's idle buckets spill)
    SELECT g.host, g.gpu_index, g.bi, g.used_avg, g.used_min, g.used_max, g.total, k.kv,
           g.bi - row_number() OVER (PARTITION BY g.host, g.gpu_index ORDER BY g.bi) AS grp
    FROM idle_gpu_buckets g LEFT JOIN activity_grid a USING (host, bi) LEFT JOIN kv k USING (host, bi)
    WHERE coalesce(g.util_max, 0) <= $idle_util_pct AND coalesce(a.running, 0) = 0
),
z AS (
    SELECT *, CASE WHEN bi * $bucket_s - dn * 86400 < greatest($activity_stale_s, $log_activity_stale_s)
                   THEN bi ELSE -1 END AS zone_bi
    FROM (SELECT *, CAST(floor(bi * $bucket_s / 86400) AS BIGINT) AS dn FROM s)
),
seg AS (
    SELECT host, gpu_index, dn, min(bi) AS b0, max(bi) AS b1, count(*) AS buckets,
           median(used_avg) AS baseline, min(used_min) AS low, max(used_max) AS high,
           max(total) AS total, max(kv) AS kv_idle, any_value(zone_bi) >= 0 AS zone,
           histogram(used_avg) AS vals
    FROM z
    GROUP BY host, gpu_index, dn, grp, zone_bi
),
starts AS (
    SELECT DISTINCT host, dn, b0, CAST(floor(b0 * $bucket_s / 3600) AS BIGINT) AS h FROM seg
),
rq AS (
    SELECT host, ts, day_increase, CAST(floor(epoch(ts) / 3600) AS BIGINT) AS h FROM idle_requests
),
in_hour AS (
    -- the last reading within the start's hour (a hash join) ...
    SELECT s.host, s.b0, arg_max_null(r.day_increase, r.ts) AS v
    FROM starts s JOIN rq r ON r.host = s.host AND r.h = s.h AND r.ts <= to_timestamp(s.b0 * $bucket_s)
    GROUP BY ALL
),
hours AS (
    -- ... else the last of an earlier hour of the day (an ASOF join over one row per host-hour)
    SELECT host, h, arg_max_null(day_increase, ts) AS v FROM rq GROUP BY ALL
),
found AS (
    SELECT s.host, s.b0,
           CASE WHEN i.host IS NOT NULL THEN i.v WHEN e.h >= s.dn * 24 THEN e.v END AS day_requests
    FROM starts s ASOF LEFT JOIN hours e ON e.host = s.host AND e.h < s.h
    LEFT JOIN in_hour i ON i.host = s.host AND i.b0 = s.b0
)
SELECT seg.*, f.day_requests FROM seg LEFT JOIN found f USING (host, b0);

-- The windows: segments end to end (across midnight, and a day's first buckets
-- with the run after them) joined, less the first buckets of a day that a fresh
-- reading of the day before shows busy. A temporary table: as part of one query
-- with the next statement, its rows became a CTE read twice (a month: 1.7 s, not 1.0 s).
CREATE OR REPLACE TEMP TABLE idle_runs AS
WITH seg AS (
    -- no value counts here: the sorts below need not carry them. A day's first buckets
    -- (zone) only: the last reading at or before the bucket's end, if fresh then (the
    -- ASOF join sorts only what it is given)
    SELECT * EXCLUDE (vals) FROM idle_segments WHERE NOT zone
    UNION ALL
    SELECT s.* EXCLUDE (vals) FROM idle_segments s
    ASOF LEFT JOIN activity_grid a ON a.host = s.host AND a.bi <= s.b0
    WHERE s.zone
      AND coalesce(CASE WHEN (s.b0 + 1) * $bucket_s - epoch(a.last_ts) <= a.stale_s
                        THEN a.last_running END, 0) = 0
),
o AS (
    SELECT *, sum(CASE WHEN b0 = prev + 1 THEN 0 ELSE 1 END)
                  OVER (PARTITION BY host, gpu_index ORDER BY b0 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
                  AS run
    FROM (SELECT *, lag(b1) OVER (PARTITION BY host, gpu_index ORDER BY b0) AS prev FROM seg)
),
w AS (
    -- wid: the window's number, what the median below partitions and sorts by (an
    -- integer key: a third cheaper than host, GPU and run)
    SELECT host, gpu_index, run, row_number() OVER () AS wid,
           min(b0) AS b0, max(b1) AS b1, sum(buckets)::BIGINT AS buckets,
           count(*) AS segments, any_value(baseline) AS baseline, min(low) AS low, max(high) AS high,
           max(total) AS total, max(kv_idle) AS kv_idle, arg_min_null(day_requests, b0) AS day_requests
    FROM o
    GROUP BY host, gpu_index, run
    HAVING (max(b1) + 1 - min(b0)) * $bucket_s >= $min_idle_s
),
joined AS (
    -- the median of a window of several segments, from their value counts
    SELECT wid,
           (min(v) FILTER (WHERE cum > (tot - 1) // 2) + min(v) FILTER (WHERE cum > tot // 2)) / 2 AS baseline
    FROM (
        SELECT *, sum(n) OVER (PARTITION BY wid ORDER BY v
                               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cum,
                  sum(n) OVER (PARTITION BY wid) AS tot
        FROM (
            SELECT wid, x.key AS v, sum(x.value) AS n
            FROM (SELECT w.wid, unnest(map_entries(s.vals)) AS x
                  FROM o JOIN w ON w.host = o.host AND w.gpu_index = o.gpu_index AND w.run = o.run
                                 AND w.segments > 1
                  JOIN idle_segments s ON s.host = o.host AND s.gpu_index = o.gpu_index AND s.b0 = o.b0)
            GROUP BY ALL
        )
    )
    GROUP BY ALL
)
SELECT w.host, w.gpu_index, to_timestamp(w.b0 * $bucket_s) AS start,
       to_timestamp((w.b1 + 1) * $bucket_s) AS "end", w.buckets,
       CASE WHEN w.segments = 1 THEN w.baseline ELSE j.baseline END AS baseline,
       w.low, w.high, w.total, w.kv_idle, w.day_requests
FROM w LEFT JOIN joined j USING (wid);

DROP TABLE activity_grid;

CREATE OR REPLACE TABLE idle_windows AS
-- the requests served before each window (cum_requests): those of the days before its
-- start's day and of that day up to its last reading at or before the start (the
-- segments' day_requests); where that day had none yet, all those of the host's last
-- earlier day with readings (an ASOF join over one row per host-day)
WITH starts AS (
    SELECT DISTINCT host, start, CAST(floor(epoch(start) / 86400) AS BIGINT) AS dn, day_requests
    FROM idle_runs
),
served AS (
    SELECT s.host, s.start,
           CASE WHEN s.day_requests IS NOT NULL THEN d.before + s.day_requests
                ELSE p.before + p.total END AS cum_requests
    FROM starts s ASOF LEFT JOIN request_days p ON p.host = s.host AND p.dn < s.dn
    LEFT JOIN request_days d ON d.host = s.host AND d.dn = s.dn
),
wr AS (
    SELECT w.* EXCLUDE (day_requests), r.cum_requests FROM idle_runs w JOIN served r USING (host, start)
)
SELECT w.* EXCLUDE (kv_idle, cum_requests),
       coalesce(l.lifetime, 0) AS segment, l.pid, coalesce(l.lifetime_source, 'none') AS lifetime_source,
       w.kv_idle, w.cum_requests
FROM wr w
LEFT JOIN (
    -- the lifetime that was on the GPU longest during the window (0: none known); of
    -- ones on it equally long, the one that held the most memory, then the later one
    -- (segment: the lifetime's id, unique per GPU; pid: its process id, NULL if inferred)
    SELECT p.host, p.gpu_index, p.start, l.lifetime, l.pid, l.lifetime_source, l.max_used
    FROM (
        SELECT w2.host, w2.gpu_index, w2.start,
               arg_max(l.lifetime, (epoch(least(l.last_ts, w2."end")) - epoch(greatest(l.first_ts, w2.start)),
                                    coalesce(l.max_used, -1), l.first_ts, l.lifetime)) AS lifetime
        FROM idle_runs w2 JOIN gpu_lifetimes l
          ON l.host = w2.host AND l.gpu_index = w2.gpu_index AND l.first_ts < w2."end" AND l.last_ts > w2.start
        GROUP BY ALL
    ) p JOIN gpu_lifetimes l USING (host, gpu_index, lifetime)
) l USING (host, gpu_index, start)
-- a window while an inferred server was still loading (memory far below its
-- lifetime's peak: an exited or starting server) is no baseline of that lifetime
WHERE coalesce(l.lifetime_source, 'process table') = 'process table'
   OR w.low >= $loaded_fraction * l.max_used;

DROP TABLE idle_runs;
