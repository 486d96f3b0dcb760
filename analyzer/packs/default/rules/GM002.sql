/*---
id          = "GM002"
name        = "gpu_memory.cache_saturation"
title       = "GPU memory grew, then levelled off: allocator cache, not a leak"
category    = "cache.growth"
severity    = "info"
requires    = ["gpu_samples"]
missing_hint = "device memory samples: `leakcollect run` on the host, or `nvidia-smi --query-gpu=timestamp,index,name,uuid,memory.total,memory.used,memory.free,utilization.gpu --format=csv -l 10 > smi.csv` imported with `leakcollect import nvidia-smi-csv smi.csv --tz ZONE`"
evidence    = ["first_idle_mib", "last_idle_mib", "growth_mib", "early_growth_mib", "late_growth_mib", "idle_windows",
               "lifetime_source"]
description = """
Idle-window memory rose during the first part of a process lifetime and then
stopped rising. PyTorch's caching allocator keeps freed blocks for reuse and
never returns them to the driver, so nvidia-smi shows the high-water mark of
the working set: harmless as long as it has levelled off below the card's size.
"""
remediation = """
No action needed. If the cached memory itself is a problem, set
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (less fragmentation) or
max_split_size_mb, or call torch.cuda.empty_cache() at idle.
"""
references  = ["https://pytorch.org/docs/stable/notes/cuda.html#memory-management"]
equivalent  = [  # mutants that cannot change the result (leakreport rules test --mutate)
  {mutant = "drop WHERE `o.segment <> idle_trend.segment` @ AND o.segment <> idle_trend.segment AND o.n >= $min_windows", reason = "a lifetime cannot count against itself: it is a candidate only with late growth below max_late_fraction of its early growth, and counts only with late growth at or above it"},
]
[params]
min_growth_mib = 256
min_windows = 4
max_late_fraction = 0.35  # late-half growth below this share of early-half growth = levelled off
---*/
SELECT
    host,
    gpu_index AS gpu,
    pid,
    first_start AS start,
    last_end AS "end",
    n AS idle_windows,
    lifetime_source,
    round(first_baseline / 1048576, 1) AS first_idle_mib,
    round(last_baseline / 1048576, 1) AS last_idle_mib,
    round(growth_bytes / 1048576, 1) AS growth_mib,
    round(early_growth_bytes / 1048576, 1) AS early_growth_mib,
    round(late_growth_bytes / 1048576, 1) AS late_growth_mib,
    format('GPU {} on {}: idle memory rose {:.0f} MiB and then levelled off '
           '(late half {:+.0f} MiB): allocator cache, not a leak.',
           gpu_index, host, growth_bytes / 1048576, late_growth_bytes / 1048576) AS summary
FROM idle_trend
WHERE n >= $min_windows
  AND growth_bytes >= $min_growth_mib * 1048576.0
  AND late_growth_bytes < $max_late_fraction * early_growth_bytes
  -- cache only where no other lifetime of the GPU grew as much without levelling off: in
  -- a restart sawtooth a lifetime whose late idle windows were few looks levelled off,
  -- and "not a leak" beside the leak of the lifetimes around it is no verdict
  AND NOT EXISTS (SELECT 1 FROM idle_trend o
                  WHERE o.host = idle_trend.host AND o.gpu_index = idle_trend.gpu_index
                    AND o.segment <> idle_trend.segment AND o.n >= $min_windows
                    AND o.growth_bytes >= $min_growth_mib * 1048576.0
                    AND o.late_growth_bytes >= $max_late_fraction * o.early_growth_bytes)
ORDER BY host, gpu_index, first_start, segment
