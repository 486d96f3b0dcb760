/*---
id          = "AP003"
name        = "allocator.outside_growth"
title       = "GPU memory outside PyTorch's allocator keeps growing"
category    = "leak.outside_allocator"
severity    = "warning"
requires    = ["allocator_samples", "gpu_processes"]
missing_hint = "the allocator probe plus per-process GPU memory (`leakcollect run --probe-spool DIR` on the host); finds memory outside PyTorch's allocator"
evidence    = ["bins", "first_outside_mib", "last_outside_mib", "growth_mib", "late_growth_mib",
               "nvml_growth_mib", "reserved_growth_mib", "role"]
description = """
NVML's per-process GPU memory minus what PyTorch's allocator has reserved
(compared bin by bin on their floors) rose by at least $min_growth_mib MiB and
was still rising in the last quarter of the process lifetime. That memory is
not PyTorch's: NCCL buffers and communicators, cuBLAS/cuDNN workspaces, CUDA
graphs, CUDA contexts, or native extensions that call cudaMalloc directly.
"""
remediation = """
PyTorch-level tools (memory snapshots, empty_cache) cannot see or free this
memory. Check for communicators or process groups created per request
(NCCL), new CUDA streams or graphs captured per batch shape, and native
extensions (image preprocessing, custom kernels) that allocate outside the
caching allocator. NCCL_DEBUG=INFO logs communicator creation; restarting
the process frees it.
"""
references  = ["https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"]
equivalent  = [  # mutants that cannot change the result (leakreport rules test --mutate)
  {mutant = "drop WHERE `o1 IS NOT NULL` @ WHERE bins >= $min_bins AND o1 IS NOT NULL AND o4 IS NOT NULL", reason = "o4 - o1 in the next conjunct is NULL when o1 is NULL, so the row is filtered out either way"},
  {mutant = "drop WHERE `o4 IS NOT NULL` @ WHERE bins >= $min_bins AND o1 IS NOT NULL AND o4 IS NOT NULL", reason = "o4 - o1 in the next conjunct is NULL when o4 is NULL, so the row is filtered out either way"},
]
[params]
min_bins = 8
min_growth_mib = 256
min_late_fraction = 0.15
---*/
SELECT host, gpu_index AS gpu, pid, start, "end", bins,
       round(o1 / 1048576, 1) AS first_outside_mib,
       round(o4 / 1048576, 1) AS last_outside_mib,
       round((o4 - o1) / 1048576, 1) AS growth_mib,
       round((o4 - o3) / 1048576, 1) AS late_growth_mib,
       round((n4 - n1) / 1048576, 1) AS nvml_growth_mib,
       round((r4 - r1) / 1048576, 1) AS reserved_growth_mib,
       role,
       format('Process {} ({}) on {} GPU {}: memory outside PyTorch''s allocator rose {:.0f} MiB '
              '(NVML {:+.0f} MiB, reserved {:+.0f} MiB) and was still rising.',
              pid, role, host, gpu_index, (o4 - o1) / 1048576, (n4 - n1) / 1048576, (r4 - r1) / 1048576) AS summary
FROM alloc_trend
WHERE bins >= $min_bins AND o1 IS NOT NULL AND o4 IS NOT NULL
  AND o4 - o1 >= $min_growth_mib * 1048576.0
  AND o4 - o3 >= $min_late_fraction * (o4 - o1)
ORDER BY host, gpu_index, pid, device
