/*---
id          = "LP001"
name        = "latency.memory_pressure"
title       = "Requests get slower as memory use grows"
category    = "latency.pressure"
severity    = "warning"
requires    = ["metric_samples"]
missing_hint = "request latency from the server's /metrics: `leakcollect run --metrics-url URL`"
evidence    = ["first_latency_s", "last_latency_s", "latency_ratio", "memory_growth_mib", "correlation", "intervals"]
description = """
Mean end-to-end request latency per $interval_minutes-minute interval (from the
engine's latency histogram: change of _sum over change of _count) compared with
the GPU memory in use: latency up by at least $min_ratio x between the first
and last quarter, correlated (>= $min_corr) with memory that grew by at least
$min_growth_mib MiB. Memory pressure shrinks the KV cache and batch sizes and
forces allocator retries before it forces an OOM.
"""
remediation = """
Slower requests are an early sign: the leak is already costing throughput.
Restart to restore latency, and fix the leak (see the leak findings). If
memory is not leaking but near full, lower the concurrency or give the
allocator room (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True).
"""
references  = ["https://github.com/vllm-project/vllm/issues/28230"]
equivalent  = [  # mutants that cannot change the result (leakreport rules test --mutate)
  {mutant = "drop WHERE `metric IN ('latency_sum', 'latency_count')` @ FROM metric_norm WHERE metric IN ('latency_sum', 'latency_count')", reason = "lat reads h only through FILTER (WHERE metric = 'latency_sum' / 'latency_count'), so rows of other metrics never reach a latency"},
  {mutant = "drop WHERE `l.latency IS NOT NULL` @ WHERE l.latency IS NOT NULL AND l.latency > 0", reason = "l.latency > 0 is not true for a NULL latency, so the row is filtered out either way"},
]
[params]
interval_minutes = 15
min_ratio = 1.3
min_corr = 0.7
min_growth_mib = 256
min_intervals = 6
---*/
WITH h AS (
    SELECT host, to_timestamp(floor(epoch(ts) / ($interval_minutes * 60)) * ($interval_minutes * 60)) AS iv,
           metric, max(value) - min(value) AS d
    FROM metric_norm WHERE metric IN ('latency_sum', 'latency_count')
    GROUP BY ALL
),
lat AS (
    SELECT host, iv, max(d) FILTER (WHERE metric = 'latency_sum') / nullif(max(d) FILTER (WHERE metric = 'latency_count'), 0) AS latency
    FROM h GROUP BY ALL
),
mem AS (
    -- the hosts with a latency only: most fleets export none, and then no bucket is read
    SELECT g.host, to_timestamp(floor(epoch(g.b) / ($interval_minutes * 60)) * ($interval_minutes * 60)) AS iv,
           max(g.used_max) AS used
    FROM gpu_buckets g SEMI JOIN lat l ON l.host = g.host AND l.latency > 0
    GROUP BY ALL
),
j AS (
    SELECT l.host, l.iv, l.latency, m.used, ntile(4) OVER (PARTITION BY l.host ORDER BY l.iv) AS quarter,
           count(*) OVER (PARTITION BY l.host) AS n
    FROM lat l JOIN mem m USING (host, iv)
    WHERE l.latency IS NOT NULL AND l.latency > 0
),
agg AS (
    SELECT host, min(iv) AS start, max(iv) AS "end", max(n) AS intervals, corr(latency, used) AS correlation,
           median(latency) FILTER (WHERE quarter = 1) AS first_latency, median(latency) FILTER (WHERE quarter = 4) AS last_latency,
           median(used) FILTER (WHERE quarter = 4) - median(used) FILTER (WHERE quarter = 1) AS growth
    FROM j GROUP BY host
)
SELECT host, NULL AS gpu, NULL AS pid, start, "end",
       round(first_latency, 3) AS first_latency_s, round(last_latency, 3) AS last_latency_s,
       round(last_latency / first_latency, 2) AS latency_ratio, round(growth / 1048576, 0) AS memory_growth_mib,
       round(correlation, 3) AS correlation, intervals,
       format('Requests on {} slowed from {:.2f} s to {:.2f} s ({:.1f}x) as GPU memory grew {:.0f} MiB (correlation {:.2f}).',
              host, first_latency, last_latency, last_latency / first_latency, growth / 1048576, correlation) AS summary
FROM agg
WHERE intervals >= $min_intervals AND correlation >= $min_corr
  AND last_latency >= $min_ratio * first_latency AND growth >= $min_growth_mib * 1048576.0
ORDER BY host
