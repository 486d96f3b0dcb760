/*---
id          = "RM001"
name        = "restart.masked_leak"
title       = "Restarts hide a leak: growth, restart, growth again"
category    = "restart.masked_leak"
severity    = "warning"
requires    = ["gpu_samples"]
missing_hint = "device memory samples: `leakcollect run` on the host, or `nvidia-smi --query-gpu=timestamp,index,name,uuid,memory.total,memory.used,memory.free,utilization.gpu --format=csv -l 10 > smi.csv` imported with `leakcollect import nvidia-smi-csv smi.csv --tz ZONE`"
evidence    = ["leaking_gpu", "lifetimes", "leaking_lifetimes", "median_growth_mib", "median_lifetime_h", "oom_events",
               "lifetime_source"]
description = """
The GPU's memory climbs during each server process lifetime and drops at each
restart (a sawtooth): at least $min_leaking_lifetimes lifetimes that each grew by
$min_growth_mib MiB or more across their idle windows. Scheduled restarts and
OOM-kills hide the leak from dashboards that look at a day's average; the
leak rate per lifetime is what it really costs.
"""
remediation = """
Keep the restarts while the cause is found, but size them from the leak
rate: restart well before a lifetime's growth reaches the headroom. Then fix
the leak (see the leak findings for this GPU) so the restarts can go.
"""
references  = []
[params]
min_leaking_lifetimes = 2
min_growth_mib = 256
min_up_fraction = 0.6
min_windows = 4
---*/
WITH seg AS (
    SELECT host, gpu_index, segment, n, growth_bytes, up_fraction, lifetime_source,
           epoch(last_end) - epoch(first_start) AS life_s, first_start, last_end
    FROM idle_trend WHERE segment <> 0
),
per_gpu AS (
    SELECT host, gpu_index, count(*) AS lifetimes,
           count(*) FILTER (WHERE n >= $min_windows AND growth_bytes >= $min_growth_mib * 1048576.0
                            AND up_fraction >= $min_up_fraction) AS leaking,
           median(growth_bytes) FILTER (WHERE n >= $min_windows AND growth_bytes >= $min_growth_mib * 1048576.0
                                        AND up_fraction >= $min_up_fraction) AS med_growth,
           median(life_s) AS med_life_s, min(first_start) AS start, max(last_end) AS "end",
           arg_max(lifetime_source, (last_end, segment)) AS lifetime_source
    FROM seg GROUP BY ALL
),
ooms AS (SELECT host, count(*) AS oom_events FROM log_events WHERE event = 'oom' GROUP BY host),
best AS (
    SELECT p.*, coalesce(o.oom_events, 0) AS oom_events,
           row_number() OVER (PARTITION BY p.host ORDER BY p.leaking DESC, p.med_growth DESC, p.gpu_index) AS r
    FROM per_gpu p LEFT JOIN ooms o USING (host)
    WHERE p.leaking >= $min_leaking_lifetimes
)
SELECT host, NULL AS gpu, NULL AS pid, start, "end",
       gpu_index AS leaking_gpu, lifetimes, leaking AS leaking_lifetimes,
       round(med_growth / 1048576, 0) AS median_growth_mib, round(med_life_s / 3600, 2) AS median_lifetime_h,
       oom_events, lifetime_source,
       format('On {} (GPU {}), {} of {} process lifetimes leaked about {:.0f} MiB each before a restart{}.',
              host, gpu_index, leaking, lifetimes, med_growth / 1048576,
              CASE WHEN oom_events > 0 THEN format(' ({} ended in an OOM)', oom_events) ELSE '' END) AS summary
FROM best WHERE r = 1
ORDER BY host
