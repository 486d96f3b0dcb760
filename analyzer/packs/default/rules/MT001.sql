/*---
id          = "MT001"
name        = "memory.threshold_growing"
title       = "GPU memory above the alert threshold and still growing"
category    = "memory.threshold"
severity    = "warning"
requires    = ["gpu_samples"]
missing_hint = "device memory samples: `leakcollect run` on the host, or `nvidia-smi --query-gpu=timestamp,index,name,uuid,memory.total,memory.used,memory.free,utilization.gpu --format=csv -l 10 > smi.csv` imported with `leakcollect import nvidia-smi-csv smi.csv --tz ZONE`"
evidence    = ["used_pct", "recent_peak_mib", "total_mib", "rate_mib_per_h", "hours_to_full", "restart_now"]
description = """
Field alert levels: $warning_pct % warning, $critical_pct % critical, and above
$restart_pct % while still growing, restart now; critical and restart now only
where the growth fills the GPU within $restart_within_h h (SGLang runs at 88 %
from start-up: a slow leak there is days from its OOM). A GPU that sits high but
flat (vLLM pre-allocating gpu_memory_utilization, SGLang's static pool) is not
alerted: only GPUs whose idle baseline is rising (a leak-like trend) are, judged
on the latest process lifetime (a restart into a fixed build stops the alert),
or on the earlier ones while the latest has too few idle windows to tell.
"""
remediation = """
Where it says restart now (above the restart level, and full within a day
by default): restart the server now, in a quiet moment, before the OOM
takes requests down with it. Otherwise plan a restart before it is full (the
hours in its summary) and fix the cause (see the leak findings).
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
restart_within_h = 24.0  # critical and "restart now" only where the GPU fills within this
---*/
WITH lt AS (
    SELECT *,
           n >= $min_windows AND late_growth_bytes > 0
               AND late_growth_bytes >= $min_late_fraction * early_growth_bytes
               AND up_fraction >= $min_up_fraction AS growing,
           row_number() OVER (PARTITION BY host, gpu_index ORDER BY last_end DESC, segment DESC) = 1 AS latest
    FROM idle_trend
),
rate AS (
    -- the latest lifetime's own rate where it has the windows to tell (none: not growing),
    -- else the median of the growing lifetimes (a young process after a restart)
    SELECT host, gpu_index,
           CASE WHEN max(n) FILTER (WHERE latest) >= $min_windows
                THEN max(slope_bps) FILTER (WHERE latest AND growing)
                ELSE median(slope_bps) FILTER (WHERE growing) END * 3600 / 1048576 AS rate
    FROM lt GROUP BY ALL
),
recent AS (
    SELECT g.host, g.gpu_index, max(g.used_max) AS peak, max(g.total) AS total, min(g.b) AS start, max(g.b_end) AS "end"
    FROM gpu_buckets g
    -- each GPU's last bucket (gpu_span): no second pass over the buckets
    JOIN gpu_span l USING (host, gpu_index)
    WHERE g.b >= l.last_b - to_minutes(CAST($recent_minutes AS BIGINT))
    GROUP BY g.host, g.gpu_index
)
SELECT host, gpu, pid, start, "end",
       CASE WHEN used_pct >= $critical_pct AND soon THEN 'critical' ELSE 'warning' END AS severity,
       round(used_pct, 1) AS used_pct, recent_peak_mib, total_mib, round(rate, 1) AS rate_mib_per_h,
       round(hours_to_full, 1) AS hours_to_full,
       used_pct > $restart_pct AND soon AS restart_now,
       format('GPU {} on {} is at {:.0f} % and still growing ({:.0f} MiB/h, {}){}.',
              gpu, host, used_pct, rate,
              CASE WHEN hours_to_full < 0.5 THEN 'already full at its peak'
                   ELSE format('full in about {:.0f} h', hours_to_full) END,
              CASE WHEN used_pct > $restart_pct AND soon THEN ': restart now' ELSE '' END) AS summary
FROM (
    SELECT c.host, c.gpu_index AS gpu, NULL AS pid, c.start, c."end", r.rate,
           100.0 * c.peak / c.total AS used_pct, round(c.peak / 1048576, 0) AS recent_peak_mib,
           round(c.total / 1048576, 0) AS total_mib,
           greatest(c.total - c.peak, 0) / 1048576 / r.rate AS hours_to_full,
           greatest(c.total - c.peak, 0) / 1048576 / r.rate <= $restart_within_h AS soon
    FROM recent c JOIN rate r USING (host, gpu_index)
    WHERE 100.0 * c.peak / c.total >= $warning_pct AND r.rate >= $min_rate_mib_per_h
)
ORDER BY host, gpu
