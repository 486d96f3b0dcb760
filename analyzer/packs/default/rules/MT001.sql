/*---
id          = "MT001"
name        = "memory.threshold_growing"
title       = "GPU memory above the alert threshold and still growing"
category    = "memory.threshold"
severity    = "warning"
requires    = ["gpu_samples"]
missing_hint = "device memory samples: `leakcollect run` on the host, or `nvidia-smi --query-gpu=timestamp,index,name,uuid,memory.total,memory.used,memory.free,utilization.gpu --format=csv -l 10 > smi.csv` imported with `leakcollect import nvidia-smi-csv smi.csv --tz ZONE`"
evidence    = ["used_pct", "recent_peak_mib", "total_mib", "rate_mib_per_h", "restart_now"]
description = """
Field alert levels: $warning_pct % warning, $critical_pct % critical, and above
$restart_pct % while still growing, restart now. A GPU that sits high but flat
(vLLM pre-allocating gpu_memory_utilization, SGLang's static pool) is not
alerted: only GPUs whose idle baseline is rising (a leak-like trend) are.
"""
remediation = """
Above the restart level and growing: restart the server now, in a quiet
moment, before the OOM takes requests down with it. Otherwise plan a restart
before the OOM forecast and fix the cause (see the leak findings).
"""
references  = []
[params]
warning_pct = 75.0
critical_pct = 90.0
restart_pct = 85.0
recent_minutes = 30
min_rate_mib_per_h = 16.0
min_windows = 4
min_late_fraction = 0.35
min_up_fraction = 0.6
---*/
WITH rate AS (
    SELECT host, gpu_index, median(slope_bps) * 3600 / 1048576 AS rate
    FROM idle_trend
    WHERE n >= $min_windows AND late_growth_bytes > 0
      AND late_growth_bytes >= $min_late_fraction * early_growth_bytes AND up_fraction >= $min_up_fraction
    GROUP BY ALL
),
recent AS (
    SELECT g.host, g.gpu_index, max(g.used_max) AS peak, max(g.total) AS total, min(g.b) AS start, max(g.b_end) AS "end"
    FROM gpu_buckets g
    -- each GPU's last bucket (gpu_span): no second pass over the buckets
    JOIN gpu_span l USING (host, gpu_index)
    WHERE g.b >= l.last_b - to_minutes(CAST($recent_minutes AS BIGINT))
    GROUP BY g.host, g.gpu_index
)
SELECT c.host, c.gpu_index AS gpu, NULL AS pid, c.start, c."end",
       CASE WHEN 100.0 * c.peak / c.total >= $critical_pct THEN 'critical' ELSE 'warning' END AS severity,
       round(100.0 * c.peak / c.total, 1) AS used_pct, round(c.peak / 1048576, 0) AS recent_peak_mib,
       round(c.total / 1048576, 0) AS total_mib, round(r.rate, 1) AS rate_mib_per_h,
       100.0 * c.peak / c.total > $restart_pct AS restart_now,
       format('GPU {} on {} is at {:.0f} % and still growing ({:.0f} MiB/h){}.', c.gpu_index, c.host,
              100.0 * c.peak / c.total, r.rate,
              CASE WHEN 100.0 * c.peak / c.total > $restart_pct THEN ': restart now' ELSE '' END) AS summary
FROM recent c JOIN rate r USING (host, gpu_index)
WHERE 100.0 * c.peak / c.total >= $warning_pct AND r.rate >= $min_rate_mib_per_h
ORDER BY c.host, c.gpu_index
