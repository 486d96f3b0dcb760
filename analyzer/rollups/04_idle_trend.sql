-- Idle-baseline trend per GPU and process lifetime (segment: the lifetime's id,
-- unique per GPU; pid: its process, NULL where inferred or none): robust
-- (Theil-Sen, bounded) slope, growth in the early and late halves of its time (saturation test),
-- and the share of steps between windows that rose (see w).
CREATE OR REPLACE TABLE idle_trend AS
-- A step is from a window back to the last window at least a 64th of the lifetime's
-- time before it (in time, not in count: idle windows crowd into quiet hours, a night's
-- dozens of them minutes apart, and a step between two of those is under the noise
-- however fast the leak runs by day; 30 MiB/h with a window every 5 min rises 2.5 MiB
-- a step). Windows in the lifetime's first 64th have no step.
WITH w0 AS (
    SELECT *,
           (epoch(start) + epoch("end")) / 2 AS t,
           row_number() OVER (PARTITION BY host, gpu_index, segment ORDER BY start) AS k,
           count(*) OVER (PARTITION BY host, gpu_index, segment) AS n,
           (min(epoch(start)) OVER (PARTITION BY host, gpu_index, segment)
            + max(epoch("end")) OVER (PARTITION BY host, gpu_index, segment)) / 2 AS t_mid,
           (max(epoch("end")) OVER (PARTITION BY host, gpu_index, segment)
            - min(epoch(start)) OVER (PARTITION BY host, gpu_index, segment)) / 64 AS reach
    FROM idle_windows
),
w AS (
    SELECT a.*, a.baseline - b.baseline AS step
    FROM w0 a
    ASOF LEFT JOIN (SELECT host, gpu_index, segment, t, baseline FROM w0) b
        ON a.host = b.host AND a.gpu_index = b.gpu_index AND a.segment = b.segment
       AND a.t - greatest(a.reach, 1) >= b.t
),
-- Theil-Sen over every pair of windows while a lifetime has at most 64 of them,
-- past that, the pairs at 32 fixed offsets spread over the lifetime (from the next
-- window to the last): O(n) pairs, so a month of windows costs about what a day does.
lt AS (
    SELECT DISTINCT host, gpu_index, segment, n FROM w
),
offs AS (
    SELECT DISTINCT host, gpu_index, segment,
           CASE WHEN n <= 64 THEN j
                ELSE 1 + CAST(floor((j - 1) * (n - 2) / 31.0) AS BIGINT) END AS d
    FROM (SELECT host, gpu_index, segment, n,
                 unnest(range(1, CASE WHEN n <= 64 THEN n ELSE 33 END)) AS j
          FROM lt)
),
ends AS MATERIALIZED (
    SELECT a.host, a.gpu_index, a.segment, a.t, a.baseline, a.k + o.d AS kb
    FROM w a JOIN offs o USING (host, gpu_index, segment)
),
pairs AS (
    SELECT a.host, a.gpu_index, a.segment, (b.baseline - a.baseline) / (b.t - a.t) AS slope
    FROM ends a
    JOIN w b ON b.host = a.host AND b.gpu_index = a.gpu_index AND b.segment = a.segment
            AND b.k = a.kb
    WHERE b.t > a.t
),
slopes AS (
    SELECT host, gpu_index, segment, median(slope) AS slope_bps
    FROM pairs GROUP BY ALL
),
agg AS (
    SELECT host, gpu_index, segment,
           max(n) AS n,
           -- one lifetime per segment: its source and pid are single-valued
           any_value(lifetime_source) AS lifetime_source,
           any_value(pid) AS pid,
           min(start) AS first_start,
           max("end") AS last_end,
           min(t) AS t0,
           max(t) AS t1,
           arg_min(baseline, k) AS first_baseline,
           arg_max(baseline, k) AS last_baseline,
           -- the window nearest the middle of the lifetime in time (not in count:
           -- idle windows can be unevenly spaced, and a straight line must not look levelled off)
           -- (of two equally near, the earlier)
           arg_min(baseline, (abs(t - t_mid), k)) AS mid_baseline,
           count(*) FILTER (WHERE step > $step_noise_mib * 1048576.0) / greatest(count(step), 1) AS up_fraction,
           max(total) AS total,
           -- KV usage at idle in the first and last quarter of the windows (by count; at
           -- least one window each): their medians, and how far apart the quarters stand
           -- (the first's upper quartile, the last's lower), so one high reading is no trend
           median(kv_idle) FILTER (WHERE k <= ceil(n / 4)) AS first_kv_idle,
           median(kv_idle) FILTER (WHERE k > n - ceil(n / 4)) AS last_kv_idle,
           quantile_cont(kv_idle, 0.75) FILTER (WHERE k <= ceil(n / 4)) AS first_kv_high,
           quantile_cont(kv_idle, 0.25) FILTER (WHERE k > n - ceil(n / 4)) AS last_kv_low,
           least(count(kv_idle) FILTER (WHERE k <= ceil(n / 4)),
                 count(kv_idle) FILTER (WHERE k > n - ceil(n / 4))) AS kv_quarter_n,
           max(cum_requests) - min(cum_requests) AS requests
    FROM w GROUP BY ALL
)
SELECT agg.*,
       coalesce(slopes.slope_bps, 0) AS slope_bps,
       last_baseline - first_baseline AS growth_bytes,
       mid_baseline - first_baseline AS early_growth_bytes,
       last_baseline - mid_baseline AS late_growth_bytes,
       (SELECT median(w.baseline - coalesce(slopes.slope_bps, 0) * (w.t - agg.t0)) FROM w
         WHERE w.host = agg.host AND w.gpu_index = agg.gpu_index AND w.segment = agg.segment)
           AS intercept_bytes
FROM agg LEFT JOIN slopes USING (host, gpu_index, segment);
