/*---
id          = "AP002"
name        = "allocator.cache_growth"
title       = "Reserved memory grows while allocated stays flat: allocator cache, not a leak"
category    = "cache.growth"
severity    = "info"
requires    = ["allocator_samples"]
missing_hint = "the allocator probe: `eval \"$(leakcollect probe env ...)\"` before starting the server, then `leakcollect run --probe-spool DIR`; tells allocator cache from a leak"
evidence    = ["bins", "reserved_growth_mib", "allocated_growth_mib", "cached_mib", "inactive_split_mib",
               "new_alloc_retries", "role"]
description = """
From the in-process allocator probe: torch.cuda.memory_reserved() (what the
caching allocator has taken from the driver) grew by at least $min_growth_mib
MiB while torch.cuda.memory_allocated() (what live tensors hold) stayed
nearly flat. The difference is cached free blocks, kept for reuse: nvidia-smi
counts them as used, PyTorch can reuse them. It only becomes a problem when
fragmentation (inactive split blocks) grows, or other processes need the room.
"""
remediation = """
Not a leak: nothing is held. To give the cache back or keep it smaller, set
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (fewer, growable segments,
less fragmentation), or max_split_size_mb:<N> to stop large blocks being
split; call torch.cuda.empty_cache() when the server is idle if other
processes share the GPU. Allocation retries (new_alloc_retries > 0) mean the
allocator already had to free its cache to satisfy a request: memory is tight.
"""
references  = ["https://pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf"]
[params]
min_bins = 8
min_growth_mib = 256
max_allocated_share = 0.25 # allocated growth at most this share of reserved growth
---*/
SELECT host, gpu_index AS gpu, pid, start, "end", bins,
       round((r4 - r1) / 1048576, 1) AS reserved_growth_mib,
       round((a4 - a1) / 1048576, 1) AS allocated_growth_mib,
       round(cached_last / 1048576, 1) AS cached_mib,
       round(inactive_split / 1048576, 1) AS inactive_split_mib,
       new_retries AS new_alloc_retries,
       role,
       format('Process {} ({}) on {}{}: reserved memory grew {:.0f} MiB while allocated changed {:+.0f} MiB: '
              'PyTorch''s allocator cache, not a leak ({:.0f} MiB cached now).',
              pid, role, host, CASE WHEN gpu_index IS NULL THEN '' ELSE format(' GPU {}', gpu_index) END,
              (r4 - r1) / 1048576, (a4 - a1) / 1048576, cached_last / 1048576) AS summary
FROM alloc_trend
WHERE bins >= $min_bins
  AND r4 - r1 >= $min_growth_mib * 1048576.0
  AND a4 - a1 <= $max_allocated_share * (r4 - r1)
ORDER BY host, gpu_index, pid, device
