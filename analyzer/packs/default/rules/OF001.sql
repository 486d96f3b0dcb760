/*---
id          = "OF001"
name        = "oom.forecast"
title       = "GPU will run out of memory at the current leak rate"
category    = "oom.forecast"
severity    = "critical"
requires    = ["gpu_samples"]
missing_hint = "device memory samples: `leakcollect run` on the host, or `nvidia-smi --query-gpu=timestamp,index,name,uuid,memory.total,memory.used,memory.free,utilization.gpu --format=csv -l 10 > smi.csv` imported with `leakcollect import nvidia-smi-csv smi.csv --tz ZONE`"
evidence    = ["rate_mib_per_h", "headroom_mib", "recent_peak_mib", "total_mib", "hours_to_oom", "used_pct",
               "lifetime_source"]
description = """
Projects the idle-baseline leak rate (robust Theil-Sen slope, median over the
process lifetimes that leak) onto the headroom left above the recent peak.
Critical when the GPU fills within $critical_hours hours, warning within
$warning_hours hours.
"""
remediation = """
Plan a restart before the forecast time (a restart frees leaked memory), and
fix the cause (see the leak finding). To buy time: lower --mem-fraction-static
(SGLang) or --gpu-memory-utilization (vLLM) so the leak has more room, and
schedule restarts inside the forecast window. Field alert levels: 75 % warning,
90 % critical; above 85 % and full within a day, restart now.
"""
references  = []
[params]
critical_hours = 4.0
warning_hours = 24.0
min_rate_mib_per_h = 16.0
min_windows = 4
min_late_fraction = 0.35
min_up_fraction = 0.6
recent_minutes = 30
---*/
WITH rate AS (
    SELECT host, gpu_index, median(slope_bps) AS slope_bps, max(total) AS total,
           arg_max(lifetime_source, (last_end, lifetime_source)) AS lifetime_source
    FROM idle_trend
    WHERE n >= $min_windows
      AND late_growth_bytes >= $min_late_fraction * early_growth_bytes
      AND late_growth_bytes > 0
      AND up_fraction >= $min_up_fraction
    GROUP BY host, gpu_index
),
recent AS (
    SELECT g.host, g.gpu_index, max(g.used_max) AS peak, max(g.total) AS total, max(g.b_end) AS last_ts
    FROM gpu_buckets g
    -- each GPU's last bucket (gpu_span): no second pass over the buckets
    JOIN gpu_span l USING (host, gpu_index)
    WHERE g.b >= l.last_b - to_minutes(CAST($recent_minutes AS BIGINT))
    GROUP BY g.host, g.gpu_index
),
f AS (
    SELECT r.host, r.gpu_index, r.slope_bps * 3600 / 1048576 AS rate_mib_per_h,
           greatest(c.total - c.peak, 0) / 1048576 AS headroom_mib,
           c.peak / 1048576 AS recent_peak_mib, c.total / 1048576 AS total_mib,
           greatest(c.total - c.peak, 0) / (r.slope_bps * 3600) AS hours_to_oom,
           100.0 * c.peak / c.total AS used_pct, r.lifetime_source, c.last_ts
    FROM rate r JOIN recent c USING (host, gpu_index)
    WHERE r.slope_bps * 3600 / 1048576 >= $min_rate_mib_per_h
)
SELECT host, gpu_index AS gpu, NULL AS pid, last_ts AS start, last_ts + to_seconds(CAST(hours_to_oom * 3600 AS BIGINT)) AS "end",
       CASE WHEN hours_to_oom <= $critical_hours THEN 'critical' ELSE 'warning' END AS severity,
       round(rate_mib_per_h, 1) AS rate_mib_per_h, round(headroom_mib, 0) AS headroom_mib,
       round(recent_peak_mib, 0) AS recent_peak_mib, round(total_mib, 0) AS total_mib,
       round(hours_to_oom, 2) AS hours_to_oom, round(used_pct, 1) AS used_pct, lifetime_source,
       format('GPU {} on {} will run out of memory in about {} at {:.0f} MiB/h ({:.0f} MiB left, {:.0f} % used).',
              gpu_index, host,
              CASE WHEN hours_to_oom < 1 THEN format('{:.0f} min', hours_to_oom * 60)
                   ELSE format('{:.1f} h', hours_to_oom) END,
              rate_mib_per_h, headroom_mib, used_pct) AS summary
FROM f
WHERE hours_to_oom <= $warning_hours
ORDER BY host, gpu_index
