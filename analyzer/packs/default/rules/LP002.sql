/*---
id          = "LP002"
name        = "latency.probe_pressure"
title       = "The collector's own request gets slower as memory use grows"
category    = "latency.pressure"
severity    = "warning"
requires    = ["http_probes", "gpu_samples"]
missing_hint = "the latency probe: `leakcollect run --probe-url URL`"
evidence    = ["first_latency_s", "last_latency_s", "latency_ratio", "memory_growth_mib", "correlation",
               "probes", "failed_probes"]
description = """
The latency of the one tiny request `leakcollect run --probe-url` sends per run
(median per $interval_minutes-minute interval), compared with the GPU memory
in use over the same intervals: slower by at least $min_ratio x between the
first and last quarter, correlated (>= $min_corr) with memory that grew by at
least $min_growth_mib MiB. Works without any engine metrics.
"""
remediation = """
Requests slow down before the server runs out of memory: less KV cache,
smaller batches, allocator retries. Restart to restore latency and fix the
leak the memory findings name; if memory is only near full, lower the
concurrency or the static memory fraction.
"""
references  = []
equivalent  = [  # mutants that cannot change the result (leakreport rules test --mutate)
  {mutant = "drop WHERE `p.latency IS NOT NULL` @ WHERE p.latency IS NOT NULL AND p.latency > 0", reason = "p.latency > 0 is not true for a NULL latency, so the row is filtered out either way"},
]
[params]
interval_minutes = 15
min_ratio = 1.3
min_corr = 0.7
min_growth_mib = 256
min_intervals = 6
---*/
WITH p AS (
    SELECT host, to_timestamp(floor(epoch(ts) / ($interval_minutes * 60)) * ($interval_minutes * 60)) AS iv,
           median(latency_s) FILTER (WHERE status BETWEEN 200 AND 299) AS latency,
           count(*) AS probes, count(*) FILTER (WHERE status IS NULL OR status >= 400) AS failed
    FROM http_probes GROUP BY ALL
),
mem AS (
    SELECT host, to_timestamp(floor(epoch(b) / ($interval_minutes * 60)) * ($interval_minutes * 60)) AS iv,
           max(used_max) AS used
    FROM gpu_buckets GROUP BY ALL
),
j AS (
    SELECT p.host, p.iv, p.latency, p.probes, p.failed, m.used,
           ntile(4) OVER (PARTITION BY p.host ORDER BY p.iv) AS quarter,
           count(*) OVER (PARTITION BY p.host) AS n
    FROM p JOIN mem m USING (host, iv)
    WHERE p.latency IS NOT NULL AND p.latency > 0
),
agg AS (
    SELECT host, min(iv) AS start, max(iv) AS "end", max(n) AS intervals, corr(latency, used) AS correlation,
           median(latency) FILTER (WHERE quarter = 1) AS first_latency,
           median(latency) FILTER (WHERE quarter = 4) AS last_latency,
           median(used) FILTER (WHERE quarter = 4) - median(used) FILTER (WHERE quarter = 1) AS growth,
           sum(probes) AS probes, sum(failed) AS failed
    FROM j GROUP BY host
)
SELECT host, NULL AS gpu, NULL AS pid, start, "end",
       round(first_latency, 3) AS first_latency_s, round(last_latency, 3) AS last_latency_s,
       round(last_latency / first_latency, 2) AS latency_ratio, round(growth / 1048576, 0) AS memory_growth_mib,
       round(correlation, 3) AS correlation, probes, failed AS failed_probes,
       format('The probe request to {} slowed from {:.3f} s to {:.3f} s ({:.1f}x) as GPU memory grew {:.0f} MiB '
              '(correlation {:.2f}).', host, first_latency, last_latency, last_latency / first_latency,
              growth / 1048576, correlation) AS summary
FROM agg
WHERE intervals >= $min_intervals AND correlation >= $min_corr
  AND last_latency >= $min_ratio * first_latency AND growth >= $min_growth_mib * 1048576.0
ORDER BY host
