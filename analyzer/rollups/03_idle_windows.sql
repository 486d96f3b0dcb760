-- Idle windows: consecutive buckets with the GPU near idle and no running
-- requests (the last activity reading, when fresh), lasting at least
-- $min_idle_s. Their median memory is the idle baseline.
CREATE OR REPLACE TABLE bucket_state AS
SELECT
    g.*,
    CASE WHEN epoch(g.b_end) - epoch(a.ts) <= $activity_stale_s THEN a.running END AS running,
    coalesce(g.util_max, 0) <= $idle_util_pct
        AND coalesce(CASE WHEN epoch(g.b_end) - epoch(a.ts) <= $activity_stale_s
                          THEN a.running END, 0) = 0 AS idle
FROM gpu_buckets g
ASOF LEFT JOIN activity a ON g.host = a.host AND g.b_end > a.ts;

CREATE OR REPLACE TABLE gpu_lifetimes AS
SELECT host, gpu_index, pid, min(ts) AS first_ts, max(ts) AS last_ts,
       max(used_gpu_memory_bytes) AS max_used
FROM gpu_processes
WHERE gpu_index IS NOT NULL
GROUP BY ALL;

CREATE OR REPLACE TABLE idle_windows AS
WITH s AS (
    SELECT *,
           row_number() OVER (PARTITION BY host, gpu_index ORDER BY b)
         - row_number() OVER (PARTITION BY host, gpu_index, idle ORDER BY b) AS grp
    FROM bucket_state
),
w AS (
    SELECT host, gpu_index, min(b) AS start, max(b_end) AS "end", count(*) AS buckets,
           median(used_avg) AS baseline, min(used_min) AS low, max(used_max) AS high,
           max(total) AS total
    FROM s
    WHERE idle
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
