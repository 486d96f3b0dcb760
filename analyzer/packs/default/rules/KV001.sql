/*---
id          = "KV001"
name        = "kv_pool.not_reclaimed"
title       = "KV-cache pages are not reclaimed after requests finish"
category    = "leak.kv_pool"
severity    = "warning"
requires    = ["gpu_samples|log_lines|metric_samples"]
missing_hint = "the server log: `leakcollect run --log FILE` on the host, or `leakcollect import server-log FILE --tz ZONE` (or /metrics: `leakcollect run --metrics-url URL`)"
evidence    = ["leak_checks", "pool", "available_size", "max_total_num_tokens", "first_idle_kv", "last_idle_kv", "idle_windows"]
description = """
With no requests running, the engine's KV-cache usage should fall back to its
floor. It fires when SGLang's own idle check reports
"token_to_kv_pool_allocator memory leak detected", or when the KV usage seen in
idle windows keeps rising: the median of the last quarter of those windows at least
$min_kv_rise of the pool above the first quarter's, the two quarters' readings
apart (the last's lower quartile above the first's upper, two readings or more in
each). Device memory
does not show this leak: the KV pool is allocated up front, so it is found only
from the engine's own numbers.
"""
remediation = """
KV pages that are never freed shrink the usable cache until requests queue or
the scheduler raises. Known case: SGLang 0.5.3.post3 under high concurrency
(not in 0.5.3); upgrade or pin the version without the regression. Restarting
frees the pool. Text-only warmup requests leaking one page each (about 64
tokens) show up as a slowly falling available_size in the leak check.
"""
references  = ["https://github.com/sgl-project/sglang/issues/11970"]
[params]
min_kv_rise = 0.03   # rise of the idle KV usage (share of the pool)
min_idle_kv = 0.02   # and the last idle KV usage at least this
min_windows = 3
---*/
WITH checks AS (
    SELECT host, count(*) AS leak_checks, min(ts) AS first_ts, max(ts) AS last_ts,
           arg_max(pool, (ts, file, "offset")) AS pool, arg_max(available_size, (ts, file, "offset")) AS available_size,
           arg_max(max_total_num_tokens, (ts, file, "offset")) AS max_total_num_tokens
    FROM log_events WHERE event = 'kv_leak_check'
    GROUP BY host
),
idle AS (
    -- KV usage is per server, so any GPU's idle windows will do: take GPU 0's (lowest index)
    -- first: the earliest lifetime's first quarter of windows; last: the latest's last
    SELECT host, arg_min(first_kv_idle, gpu_index) AS first_idle_kv, arg_min(last_kv_idle, gpu_index) AS last_idle_kv,
           arg_min(first_kv_high, gpu_index) AS first_kv_high, arg_min(last_kv_low, gpu_index) AS last_kv_low,
           arg_min(quarter_n, gpu_index) AS quarter_n,
           arg_min(n, gpu_index) AS idle_windows, min(first_start) AS first_ts, max(last_end) AS last_ts
    FROM (SELECT host, gpu_index, min(first_start) AS first_start, max(last_end) AS last_end,
                 arg_min(first_kv_idle, (first_start, first_kv_idle)) AS first_kv_idle, arg_max(last_kv_idle, (last_end, last_kv_idle)) AS last_kv_idle,
                 arg_min(first_kv_high, (first_start, first_kv_idle)) AS first_kv_high, arg_max(last_kv_low, (last_end, last_kv_idle)) AS last_kv_low,
                 -- readings in the quarters compared (the first lifetime's first, the last's last)
                 least(arg_min(kv_quarter_n, (first_start, first_kv_idle)), arg_max(kv_quarter_n, (last_end, last_kv_idle))) AS quarter_n,
                 sum(n) AS n
          FROM idle_trend WHERE first_kv_idle IS NOT NULL GROUP BY ALL)
    GROUP BY host
),
hits AS (
    SELECT coalesce(c.host, i.host) AS host, coalesce(c.leak_checks, 0) AS leak_checks, c.pool,
           c.available_size, c.max_total_num_tokens, i.first_idle_kv, i.last_idle_kv, i.idle_windows,
           least(c.first_ts, i.first_ts) AS start, greatest(c.last_ts, i.last_ts) AS "end",
           coalesce(i.idle_windows >= $min_windows AND i.last_idle_kv - i.first_idle_kv >= $min_kv_rise
                    AND i.quarter_n >= 2 AND i.last_kv_low > i.first_kv_high
                    AND i.last_idle_kv >= $min_idle_kv, false) AS floor_rising
    FROM checks c FULL OUTER JOIN idle i USING (host)
)
SELECT host, NULL AS gpu, NULL AS pid, start, "end",
       CASE WHEN leak_checks > 0 AND floor_rising THEN 'critical' ELSE 'warning' END AS severity,
       leak_checks, pool, available_size, max_total_num_tokens,
       round(first_idle_kv, 4) AS first_idle_kv, round(last_idle_kv, 4) AS last_idle_kv, idle_windows,
       format('{}: KV-cache pages are not reclaimed: {}{}.', host,
              CASE WHEN leak_checks > 0
                   THEN format('the engine''s idle check reported a leak {} times (last: {} of {} tokens free)',
                               leak_checks, available_size, max_total_num_tokens)
                   ELSE '' END,
              CASE WHEN floor_rising
                   THEN format('{}KV usage at idle rose from {:.1f} % to {:.1f} %',
                               CASE WHEN leak_checks > 0 THEN '; ' ELSE '' END,
                               100 * first_idle_kv, 100 * last_idle_kv)
                   ELSE '' END) AS summary
FROM hits
WHERE leak_checks > 0 OR floor_rising
ORDER BY host
