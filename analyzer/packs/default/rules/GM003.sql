/*---
id          = "GM003"
name        = "gpu_memory.leak_outside_kv"
title       = "The leak is outside the KV cache"
category    = "leak.gpu"
severity    = "warning"
requires    = ["gpu_samples"]
missing_hint = "device memory samples: `leakcollect run` on the host, or `nvidia-smi --query-gpu=timestamp,index,name,uuid,memory.total,memory.used,memory.free,utilization.gpu --format=csv -l 10 > smi.csv` imported with `leakcollect import nvidia-smi-csv smi.csv --tz ZONE`; KV usage comes from the server log or /metrics"
evidence    = ["growth_mib", "first_idle_kv", "last_idle_kv", "kv_change", "idle_windows", "lifetime_source"]
description = """
Device memory grows across idle windows (as in GM001) while the engine's
KV-cache usage at those idle windows stays flat (change below $max_kv_change of
the pool). The KV pool is allocated up front and is not where the memory goes:
look at what runs outside it, such as image preprocessing and vision-encoder
buffers, or tensors held by Python references.
"""
remediation = """
For SGLang vision models on <= 0.4.9.post6, the fast image processor keeps GPU
buffers: --disable-fast-image-processor (costs ~50 ms per image). A periodic
gc.collect() stopping the growth of torch.cuda.memory_allocated() points at
Python reference cycles; torch.cuda.empty_cache() stopping memory_reserved()
growth points at allocator cache.
"""
references  = ["https://github.com/sgl-project/sglang/issues/8902", "https://github.com/sgl-project/sglang/issues/9365"]
equivalent  = [  # mutants that cannot change the result (leakreport rules test --mutate)
  {mutant = "drop WHERE `first_kv_idle IS NOT NULL` @ AND first_kv_idle IS NOT NULL AND last_kv_idle IS NOT NULL", reason = "first_kv_idle and last_kv_idle are medians of the idle KV readings of a lifetime's first and last quarter of windows (04_idle_trend.sql); a lifetime that lacks either has a NULL KV change, which max() in the HAVING passes over as it would the row, so either conjunct alone gives the same verdicts"},
  {mutant = "drop WHERE `last_kv_idle IS NOT NULL` @ AND first_kv_idle IS NOT NULL AND last_kv_idle IS NOT NULL", reason = "first_kv_idle and last_kv_idle are medians of the idle KV readings of a lifetime's first and last quarter of windows (04_idle_trend.sql); a lifetime that lacks either has a NULL KV change, which max() in the HAVING passes over as it would the row, so either conjunct alone gives the same verdicts"},
]
[params]
min_growth_mib = 256
min_windows = 4
min_late_fraction = 0.35
min_up_fraction = 0.6
max_kv_change = 0.02
probe_min_bins = 8        # allocator-probe bins that make AP001-AP003 the judges instead
---*/
SELECT host, gpu_index AS gpu, arg_max(pid, (last_end, segment)) AS pid, min(first_start) AS start, max(last_end) AS "end",
       round(max(growth_bytes) / 1048576, 0) AS growth_mib,
       round(arg_max(first_kv_idle, (growth_bytes, segment)), 4) AS first_idle_kv,
       round(arg_max(last_kv_idle, (growth_bytes, segment)), 4) AS last_idle_kv,
       round(max(abs(last_kv_idle - first_kv_idle)), 4) AS kv_change,
       sum(n) AS idle_windows,
       arg_max(lifetime_source, (last_end, segment)) AS lifetime_source,
       format('GPU {} on {}: memory grew {:.0f} MiB across idle windows while KV-cache usage stayed at {:.1f} %: '
              'the leak is outside the KV cache.',
              gpu_index, host, max(growth_bytes) / 1048576, 100 * arg_max(last_kv_idle, (growth_bytes, segment))) AS summary
FROM idle_trend
WHERE n >= $min_windows
  AND growth_bytes >= $min_growth_mib * 1048576.0
  AND late_growth_bytes > 0
  AND late_growth_bytes >= $min_late_fraction * early_growth_bytes
  AND up_fraction >= $min_up_fraction
  AND first_kv_idle IS NOT NULL AND last_kv_idle IS NOT NULL
  -- where the allocator probe covers this GPU, its rules (AP001-AP003) say which memory grows
  AND NOT EXISTS (SELECT 1 FROM alloc_trend a
                  WHERE a.host = idle_trend.host AND a.gpu_index = idle_trend.gpu_index
                    AND a.bins >= $probe_min_bins)
GROUP BY host, gpu_index
HAVING max(abs(last_kv_idle - first_kv_idle)) < $max_kv_change
ORDER BY host, gpu_index
