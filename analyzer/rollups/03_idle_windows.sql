-- The host's running requests at the end of each bucket: the last reading
-- before it, carried forward while fresh (a bucket-grid join, not an ASOF join
-- per GPU bucket).
CREATE OR REPLACE TABLE activity_grid AS
WITH grid AS (SELECT DISTINCT host, bi FROM gpu_buckets),
a AS (
    SELECT host, CAST(floor(epoch(ts) / $bucket_s) AS BIGINT) AS bi,
           arg_max(running, ts) AS running, max(ts) AS ts
    FROM activity GROUP BY ALL
),
f AS (
    SELECT g.host, g.bi,
           last_value(a.running IGNORE NULLS) OVER w AS running,
           last_value(a.ts IGNORE NULLS) OVER w AS ts
    FROM grid g LEFT JOIN a USING (host, bi)
    WINDOW w AS (PARTITION BY g.host ORDER BY g.bi ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT host, bi,
       CASE WHEN (bi + 1) * $bucket_s - epoch(ts) <= $activity_stale_s THEN running END AS running
FROM f;

-- Per process and GPU, in bins of $proc_bin_s: what NVML and /proc said. The one
-- pass over gpu_processes: lifetimes and every per-process rule read this.
CREATE OR REPLACE TABLE proc_bins AS
SELECT host, gpu_index, pid,
       CAST(floor(epoch(ts) / $proc_bin_s) AS BIGINT) AS pb,
       min(ts) AS first_ts, max(ts) AS last_ts, count(*) AS samples,
       min(used_gpu_memory_bytes) AS used_min, avg(used_gpu_memory_bytes) AS used_avg,
       max(used_gpu_memory_bytes) AS used_max, avg(vm_rss_bytes) AS rss_avg
FROM gpu_processes
GROUP BY ALL;

CREATE OR REPLACE TABLE gpu_lifetimes AS
SELECT host, gpu_index, pid, min(first_ts) AS first_ts, max(last_ts) AS last_ts,
       max(used_max) AS max_used
FROM proc_bins
WHERE gpu_index IS NOT NULL
GROUP BY ALL;

-- Idle windows: consecutive buckets with the GPU near idle and no running
-- requests (the last activity reading, when fresh), lasting at least
-- $min_idle_s. Their median memory is the idle baseline.
CREATE OR REPLACE TABLE idle_windows AS
WITH s AS (
    -- idle buckets only; consecutive bucket numbers form one window (a data gap ends it)
    SELECT g.*, g.bi - row_number() OVER (PARTITION BY g.host, g.gpu_index ORDER BY g.bi) AS grp
    FROM gpu_buckets g LEFT JOIN activity_grid a USING (host, bi)
    WHERE coalesce(g.util_max, 0) <= $idle_util_pct AND coalesce(a.running, 0) = 0
),
w AS (
    SELECT host, gpu_index, min(b) AS start, max(b_end) AS "end", count(*) AS buckets,
           median(used_avg) AS baseline, min(used_min) AS low, max(used_max) AS high,
           max(total) AS total
    FROM s
    GROUP BY host, gpu_index, grp
    HAVING epoch(max(b_end)) - epoch(min(b)) >= $min_idle_s
)
SELECT w.*,
       (SELECT max(k.kv_usage) FROM kv_usage k
         WHERE k.host = w.host AND k.ts >= w.start AND k.ts < w."end") AS kv_idle,
       (SELECT arg_max(r.cum_requests, r.ts) FROM requests r
         WHERE r.host = w.host AND r.ts <= w.start) AS cum_requests,
       coalesce((
           -- the process that was on the GPU longest during the window
           SELECT arg_max(l.pid, epoch(least(l.last_ts, w."end")) - epoch(greatest(l.first_ts, w.start)))
           FROM gpu_lifetimes l
           WHERE l.host = w.host AND l.gpu_index = w.gpu_index
             AND l.first_ts < w."end" AND l.last_ts > w.start
       ), 0) AS segment
FROM w;
