-- The host's running requests at the end of each bucket: the last reading
-- before it, carried forward while fresh ($activity_stale_s; $log_activity_stale_s
-- for a reading from batch-stats log lines alone, which stop at idle) - a
-- bucket-grid join, not an ASOF join per GPU bucket.
CREATE OR REPLACE TABLE activity_grid AS
WITH grid AS (SELECT DISTINCT host, bi FROM gpu_buckets),
a AS (
    SELECT host, CAST(floor(epoch(ts) / $bucket_s) AS BIGINT) AS bi,
           arg_max(running, ts) AS running, max(ts) AS ts, arg_max(from_log, ts) AS from_log
    FROM activity GROUP BY ALL
),
f AS (
    SELECT g.host, g.bi,
           last_value(a.running IGNORE NULLS) OVER w AS running,
           last_value(a.ts IGNORE NULLS) OVER w AS ts,
           last_value(a.from_log IGNORE NULLS) OVER w AS from_log
    FROM grid g LEFT JOIN a USING (host, bi)
    WINDOW w AS (PARTITION BY g.host ORDER BY g.bi ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT host, bi,
       CASE WHEN (bi + 1) * $bucket_s - epoch(ts)
                 <= CASE WHEN from_log THEN $log_activity_stale_s ELSE $activity_stale_s END
            THEN running END AS running
FROM f;

-- Idle windows: consecutive buckets with the GPU near idle and no running
-- requests (the last activity reading, when fresh), lasting at least
-- $min_idle_s. Their median memory is the idle baseline. Two statements: the
-- windows (idle_runs, a temporary table), then whose they are - as one query,
-- its windows became a CTE read twice, and a month took 1.7 s instead of 1.0 s.
CREATE OR REPLACE TEMP TABLE idle_runs AS
WITH kv AS (
    -- the host's peak KV-cache usage per bucket (a window is whole buckets)
    SELECT host, CAST(floor(epoch(ts) / $bucket_s) AS BIGINT) AS bi, max(kv_usage) AS kv
    FROM kv_usage GROUP BY ALL
),
s AS (
    -- idle buckets only; consecutive bucket numbers form one window (a data gap ends it).
    -- Only the columns the windows need: the row_number sort carries every column it is
    -- given (a month's idle buckets spill), and times follow from bucket numbers
    SELECT g.host, g.gpu_index, g.bi, g.used_avg, g.used_min, g.used_max, g.total, k.kv,
           g.bi - row_number() OVER (PARTITION BY g.host, g.gpu_index ORDER BY g.bi) AS grp
    FROM gpu_buckets g LEFT JOIN activity_grid a USING (host, bi) LEFT JOIN kv k USING (host, bi)
    WHERE coalesce(g.util_max, 0) <= $idle_util_pct AND coalesce(a.running, 0) = 0
),
w AS (
    SELECT host, gpu_index, to_timestamp(min(bi) * $bucket_s) AS start,
           to_timestamp((max(bi) + 1) * $bucket_s) AS "end", count(*) AS buckets,
           median(used_avg) AS baseline, min(used_min) AS low, max(used_max) AS high,
           max(total) AS total, max(kv) AS kv_idle
    FROM s
    GROUP BY host, gpu_index, grp
    HAVING (max(bi) + 1 - min(bi)) * $bucket_s >= $min_idle_s
)
SELECT * FROM w;

CREATE OR REPLACE TABLE idle_windows AS
WITH wr AS (
    -- the requests served before each window: the last reading at or before its start
    SELECT w.*, r.cum_requests
    FROM idle_runs w ASOF LEFT JOIN requests r ON r.host = w.host AND r.ts <= w.start
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
