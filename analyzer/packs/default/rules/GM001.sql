/*---
id          = "GM001"
name        = "gpu_memory.idle_growth"
title       = "GPU memory keeps growing across idle windows"
category    = "leak.gpu"
severity    = "warning"
requires    = ["gpu_samples"]
missing_hint = "device memory samples: `leakcollect run` on the host, or `nvidia-smi --query-gpu=timestamp,index,name,uuid,memory.total,memory.used,memory.free,utilization.gpu --format=csv -l 10 > smi.csv` imported with `leakcollect import nvidia-smi-csv smi.csv --tz ZONE`"
evidence    = ["segments", "idle_windows", "first_idle_mib", "last_idle_mib", "growth_mib",
               "early_growth_mib", "late_growth_mib", "rate_mib_per_h", "mib_per_1k_requests", "up_fraction",
               "total_mib", "confidence", "lifetime_source"]
description = """
Compares the GPU's memory at successive idle windows (GPU near idle, no running
requests, for at least 30 s), per server process lifetime. Memory that is still
higher at every idle window, and still rising in the second half of the process
lifetime as much as in the first, is held by something that never frees it: a
leak. Growth that levels off is allocator cache (see GM002).
"""
remediation = """
The memory is held, not cached: restarting the server frees it, nothing else will.
Until the cause is fixed, restart before the forecast OOM (see the OOM forecast)
and look for a known bug (the known-bug rules name versions and flags). Check
torch.cuda.memory_allocated() in the server: rising allocated memory confirms a
leak inside PyTorch tensors; flat allocated with rising nvidia-smi usage points
outside PyTorch (NCCL, CUDA contexts, image preprocessing buffers);
`leakcollect probe env` makes the collector record both.
"""
references  = ["https://github.com/sgl-project/sglang/issues/9365"]
[params]
min_growth_mib = 256      # total idle-baseline growth within one process lifetime
min_windows = 4           # idle windows needed within one lifetime
min_late_fraction = 0.35  # late-half growth at least this share of early-half growth
min_late_growth_mib = 64  # and at least this much in absolute terms
min_up_fraction = 0.6     # share of window-to-window steps that rose
high_conf_windows = 8     # confidence is high from this many idle windows on
probe_min_bins = 8        # allocator-probe bins that make AP001-AP003 the judges instead
---*/
WITH leaky AS (
    SELECT *
    FROM idle_trend
    WHERE n >= $min_windows
      AND growth_bytes >= $min_growth_mib * 1048576.0
      AND late_growth_bytes >= $min_late_growth_mib * 1048576.0
      AND late_growth_bytes >= $min_late_fraction * early_growth_bytes
      AND up_fraction >= $min_up_fraction
      -- where the allocator probe covers this GPU, its rules (AP001-AP003) say which memory grows
      AND NOT EXISTS (SELECT 1 FROM alloc_trend a
                      WHERE a.host = idle_trend.host AND a.gpu_index = idle_trend.gpu_index
                        AND a.bins >= $probe_min_bins)
)
SELECT
    host,
    gpu_index AS gpu,
    CASE WHEN arg_max(segment, (last_end, segment)) > 0 THEN arg_max(pid, (last_end, segment)) END AS pid,
    min(first_start) AS start,
    max(last_end) AS "end",
    count(*) AS segments,
    sum(n) AS idle_windows,
    round(arg_max(first_baseline, (growth_bytes, segment)) / 1048576, 1) AS first_idle_mib,
    round(arg_max(last_baseline, (growth_bytes, segment)) / 1048576, 1) AS last_idle_mib,
    round(max(growth_bytes) / 1048576, 1) AS growth_mib,
    round(arg_max(early_growth_bytes, (growth_bytes, segment)) / 1048576, 1) AS early_growth_mib,
    round(arg_max(late_growth_bytes, (growth_bytes, segment)) / 1048576, 1) AS late_growth_mib,
    round(median(slope_bps) * 3600 / 1048576, 1) AS rate_mib_per_h,
    round(sum(growth_bytes) / 1048576 / nullif(sum(requests) / 1000, 0), 2) AS mib_per_1k_requests,
    round(min(up_fraction), 2) AS up_fraction,
    round(max(total) / 1048576, 0) AS total_mib,
    -- where the lifetimes came from: process table / server log / memory reset
    arg_max(lifetime_source, (last_end, segment)) AS lifetime_source,
    -- high: many windows, nearly every step up, and no slowing down in the late half
    CASE WHEN sum(n) >= $high_conf_windows AND min(up_fraction) >= 0.8
              AND min(late_growth_bytes / nullif(early_growth_bytes, 0)) >= 0.7 THEN 'high' ELSE 'medium' END
        AS confidence,
    format('GPU {} on {} leaks about {:.0f} MiB/h: idle memory rose {:.0f} MiB over {} idle windows '
           'and kept rising (late half +{:.0f} MiB){}; {} confidence.',
           gpu_index, host, median(slope_bps) * 3600 / 1048576, max(growth_bytes) / 1048576,
           sum(n), arg_max(late_growth_bytes, (growth_bytes, segment)) / 1048576,
           CASE WHEN count(*) > 1 THEN format(', in {} process lifetimes', count(*)) ELSE '' END,
           CASE WHEN sum(n) >= $high_conf_windows AND min(up_fraction) >= 0.8
                     AND min(late_growth_bytes / nullif(early_growth_bytes, 0)) >= 0.7 THEN 'high' ELSE 'medium' END)
        AS summary
FROM leaky
GROUP BY host, gpu_index
ORDER BY host, gpu_index
