/*---
id          = "AP001"
name        = "allocator.allocated_growth"
title       = "PyTorch still holds more and more memory: a leak inside the process"
category    = "leak.gpu"
severity    = "warning"
requires    = ["allocator_samples"]
missing_hint = "the allocator probe: `eval \"$(leakcollect probe env ...)\"` before starting the server, then `leakcollect run --probe-spool DIR`; tells a tensor leak from allocator cache"
evidence    = ["bins", "first_allocated_mib", "last_allocated_mib", "growth_mib", "late_growth_mib",
               "rate_mib_per_h", "reserved_growth_mib", "role", "confidence"]
description = """
From the in-process allocator probe: the floor of torch.cuda.memory_allocated()
(memory held by live tensors, lowest value per bin of rollup.alloc_bin_s, 5 min,
so idle moments count) rose from each quarter of the process lifetime to the
next and was still rising in the last quarter. Allocated memory is what the
program still references; the caching allocator cannot give it back. This is
the direct evidence of a leak, so it is reported with high confidence.
"""
remediation = """
Something keeps references to tensors: caches keyed by request, lists of
outputs, hooks, or per-request state that is never dropped. Restart the
server before the forecast OOM, then take a PyTorch memory snapshot of the
process (`leakcollect probe snapshot --pid PID`) and open it at
https://pytorch.org/memory_viz: the allocations that stay alive name the
stack that made them.
"""
references  = ["https://pytorch.org/docs/stable/torch_cuda_memory.html"]
[params]
min_bins = 8
min_growth_mib = 256
min_late_fraction = 0.15 # growth in the last quarter at least this share of the total
---*/
SELECT host, gpu_index AS gpu, pid, start, "end", bins,
       round(a1 / 1048576, 1) AS first_allocated_mib,
       round(a4 / 1048576, 1) AS last_allocated_mib,
       round((a4 - a1) / 1048576, 1) AS growth_mib,
       round((a4 - a3) / 1048576, 1) AS late_growth_mib,
       round((a4 - a1) / nullif(t4 - t1, 0) * 3600 / 1048576, 1) AS rate_mib_per_h,
       round((r4 - r1) / 1048576, 1) AS reserved_growth_mib,
       role,
       'high' AS confidence,
       format('Process {} ({}) on {}{} leaks inside PyTorch: allocated memory rose {:.0f} MiB '
              '({:.0f} MiB/h) and was still rising at the end; high confidence.',
              pid, role, host, CASE WHEN gpu_index IS NULL THEN '' ELSE format(' GPU {}', gpu_index) END,
              (a4 - a1) / 1048576, (a4 - a1) / nullif(t4 - t1, 0) * 3600 / 1048576) AS summary
FROM alloc_trend
WHERE bins >= $min_bins
  AND a4 - a1 >= $min_growth_mib * 1048576.0
  AND a2 >= a1 AND a3 >= a2 AND a4 > a3
  AND a4 - a3 >= $min_late_fraction * (a4 - a1)
ORDER BY host, gpu_index, pid, device
