/*---
id          = "CC001"
name        = "cuda_context.orphaned_memory"
title       = "GPU memory held by processes that no longer exist (CUDA contexts)"
category    = "leak.cuda_context"
severity    = "warning"
requires    = ["gpu_samples", "gpu_processes"]
missing_hint = "per-process GPU memory and /proc maps: run `leakcollect run` on the host; distinguishes a CUDA-context leak from a tensor leak"
evidence    = ["unattributed_first_mib", "unattributed_last_mib", "growth_mib", "short_lived_pids", "map_growth", "parent_pid"]
description = """
Device memory that no running process accounts for (NVML's used memory minus
the sum of its processes) grows by at least $min_growth_mib MiB, together with
a dynamic process pool: at least $min_short_lived GPU processes that lived less
than $short_lived_minutes minutes, or a server process whose /dev/nvidia*
mappings grew by $min_map_growth or more. Each CUDA context costs memory; a
context whose owner exited without tearing it down stays on the GPU.
"""
remediation = """
Reuse worker processes instead of spawning one per task, make workers release
CUDA before they exit (torch.cuda.empty_cache(), destroy process groups, exit
cleanly rather than being killed), and check for zombie processes still
holding /dev/nvidia* open (fuser -v /dev/nvidia*). Restarting the parent frees
the memory.
"""
references  = []
equivalent  = [  # mutants that cannot change the result (leakreport rules test --mutate)
  {mutant = "drop WHERE `gpu_index IS NOT NULL` @ WHERE gpu_index IS NOT NULL AND used_avg IS NOT NULL", reason = "a process bin with no GPU index never joins gpu or span (NULL = NULL is not true in USING), so it reaches no quarter"},
  {mutant = "drop WHERE `nvidia_device_count IS NOT NULL` @ FROM proc_maps WHERE nvidia_device_count IS NOT NULL GROUP BY ALL)", reason = "arg_min and arg_max skip rows whose value is NULL, so rows without a count change neither end of a pid's mappings"},
]
[params]
min_growth_mib = 1024
min_short_lived = 5
short_lived_minutes = 10
min_map_growth = 20
---*/
WITH short AS (
    SELECT host, gpu_index, count(*) AS short_lived
    FROM gpu_lifetimes
    WHERE epoch(last_ts) - epoch(first_ts) < $short_lived_minutes * 60
    GROUP BY ALL
),
maps AS (
    SELECT host, arg_max(pid, (last_n - first_n, pid)) AS parent_pid, max(last_n - first_n) AS map_growth
    -- one process: a PID that came back (process_start) is another one, not mappings growth
    FROM (SELECT host, pid, process_start, arg_min(nvidia_device_count, (ts, nvidia_device_count)) AS first_n,
                 arg_max(nvidia_device_count, (ts, nvidia_device_count)) AS last_n
          FROM proc_maps WHERE nvidia_device_count IS NOT NULL GROUP BY ALL)
    GROUP BY host
),
pool AS (
    -- the GPUs with a dynamic process pool (short-lived processes on it, or a process of
    -- its host whose mappings grew): the only ones whose memory is measured below
    SELECT i.host, i.gpu_index, coalesce(s.short_lived, 0) AS short_lived,
           coalesce(m.map_growth, 0) AS map_growth, m.parent_pid
    FROM gpu_info i
    LEFT JOIN short s USING (host, gpu_index)
    LEFT JOIN maps m USING (host)
    WHERE coalesce(s.short_lived, 0) >= $min_short_lived OR coalesce(m.map_growth, 0) >= $min_map_growth
),
procs AS (
    -- what the running processes held, per process bin: each one's mean, weighted by
    -- the share of the bin's sampling instants it was seen at (workers come and go)
    SELECT host, gpu_index, pb, min(first_ts) AS ts,
           sum(used_avg * samples) / max(samples) AS proc_used
    FROM proc_bins SEMI JOIN pool USING (host, gpu_index)
    WHERE gpu_index IS NOT NULL AND used_avg IS NOT NULL
    GROUP BY ALL
),
gpu AS (
    SELECT g.host, g.gpu_index, CAST(floor(epoch(g.b) / s.proc_bin_s) AS BIGINT) AS pb,
           avg(g.used_avg) AS used
    FROM gpu_buckets g SEMI JOIN pool USING (host, gpu_index), rollup_settings s
    GROUP BY ALL
),
span AS (SELECT host, gpu_index, min(pb) AS pb0, max(pb) - min(pb) + 1 AS nb FROM procs GROUP BY ALL),
unattributed AS (
    -- quarters of the GPU's observed time (by bin number: no sort needed)
    SELECT p.host, p.gpu_index, p.ts, g.used - p.proc_used AS orphan,
           1 + CAST(floor(4 * (p.pb - s.pb0) / s.nb) AS INTEGER) AS quarter
    FROM procs p
    JOIN gpu g USING (host, gpu_index, pb)
    JOIN span s USING (host, gpu_index)
),
growth AS (
    SELECT host, gpu_index, min(ts) AS start, max(ts) AS "end",
           median(orphan) FILTER (WHERE quarter = 1) AS first_orphan,
           median(orphan) FILTER (WHERE quarter = 4) AS last_orphan
    FROM unattributed GROUP BY ALL
)
SELECT g.host, g.gpu_index AS gpu, p.parent_pid AS pid, g.start, g."end",
       round(g.first_orphan / 1048576, 0) AS unattributed_first_mib,
       round(g.last_orphan / 1048576, 0) AS unattributed_last_mib,
       round((g.last_orphan - g.first_orphan) / 1048576, 0) AS growth_mib,
       p.short_lived AS short_lived_pids, p.map_growth,
       p.parent_pid,
       format('GPU {} on {}: {:.0f} MiB more memory is held by no running process ({} short-lived GPU processes{}): leaked CUDA contexts.',
              g.gpu_index, g.host, (g.last_orphan - g.first_orphan) / 1048576, p.short_lived,
              CASE WHEN p.map_growth > 0
                   THEN format(', /dev/nvidia* mappings of pid {} +{}', p.parent_pid, p.map_growth) ELSE '' END)
           AS summary
FROM growth g
JOIN pool p USING (host, gpu_index)
WHERE g.last_orphan - g.first_orphan >= $min_growth_mib * 1048576.0
ORDER BY g.host, g.gpu_index
