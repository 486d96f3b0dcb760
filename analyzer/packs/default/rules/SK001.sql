/*---
id          = "SK001"
name        = "skew.one_rank_grows"
title       = "One tensor-parallel rank grows while the others stay flat"
category    = "skew.rank"
severity    = "warning"
requires    = ["gpu_samples"]
missing_hint = "device memory samples: `leakcollect run` on the host, or `nvidia-smi --query-gpu=timestamp,index,name,uuid,memory.total,memory.used,memory.free,utilization.gpu --format=csv -l 10 > smi.csv` imported with `leakcollect import nvidia-smi-csv smi.csv --tz ZONE`; the tensor-parallel size comes from the process table or the server log's ServerArgs dump"
evidence    = ["rank_gpu", "growth_mib", "others_median_growth_mib", "gpus", "tp_size", "tp_source"]
description = """
On a host whose server is tensor-parallel (tp_size > 1 in the process table's
command line or the ServerArgs dump of the server log), one GPU's idle-window memory grew by at least
$min_growth_mib MiB while the median growth of the others stayed below
$max_others_fraction of it. Tensor-parallel ranks hold mirrored state, so
growth on one rank only points at work done on that rank alone: the
multimodal encoder or image preprocessing on rank 0, or an extra process on
that GPU. GPUs of independent servers are not ranks: without a known tp_size
above 1 the rule does not fire.
"""
remediation = """
Look at the processes on that GPU (an extra PID is a common cause: a
tokenizer, encoder or detokenizer process that initialised CUDA on it). For
SGLang VLMs, --disable-fast-image-processor moves image preprocessing off GPU
0; keep auxiliary processes off the ranks' GPUs (CUDA_VISIBLE_DEVICES).
"""
references  = ["https://github.com/sgl-project/sglang/issues/15871", "https://github.com/sgl-project/sglang/issues/6082"]
equivalent  = [  # mutants that cannot change the result (leakreport rules test --mutate)
  {mutant = "drop WHERE `tp_max IS NOT NULL` @ FROM (SELECT host, tp_max AS tp_size, 'process table' AS src FROM server_parts WHERE tp_max IS NOT NULL", reason = "max(tp_size) and arg_max(src, tp_size) skip rows whose tp_size is NULL, so such rows never change tp"},
  {mutant = "drop WHERE `event = 'server_args'` @ WHERE event = 'server_args' AND tp_size IS NOT NULL)", reason = "only server_args events carry tp_size (a field of that event alone in logformats), and the next conjunct drops rows without it"},
  {mutant = "drop WHERE `tp_size IS NOT NULL` @ WHERE event = 'server_args' AND tp_size IS NOT NULL)", reason = "max(tp_size) and arg_max(src, tp_size) skip rows whose tp_size is NULL, so such rows never change tp"},
  {mutant = "drop WHERE `t.gpus >= 2` @ WHERE t.r = 1 AND t.gpus >= 2 AND tp.tp_size > 1", reason = "a host with one GPU has no rank r > 1, so the join with others (built from r > 1) has no row for it"},
]
[params]
min_growth_mib = 512
max_others_fraction = 0.2
---*/
WITH tp AS (
    -- ties broken by the source's name, so the same data always names the same source
    SELECT host, max(tp_size) AS tp_size, arg_max(src, {'t': tp_size, 's': src}) AS tp_source
    FROM (SELECT host, tp_max AS tp_size, 'process table' AS src FROM server_parts WHERE tp_max IS NOT NULL
          UNION ALL
          SELECT host, tp_size, 'server log (ServerArgs)' FROM log_events
          WHERE event = 'server_args' AND tp_size IS NOT NULL)
    GROUP BY host
),
per_gpu AS (
    SELECT host, gpu_index, max(growth_bytes) AS growth, min(first_start) AS start, max(last_end) AS "end"
    FROM idle_trend WHERE n >= 3 GROUP BY ALL
),
ranked AS (
    SELECT *, count(*) OVER (PARTITION BY host) AS gpus,
           row_number() OVER (PARTITION BY host ORDER BY growth DESC, gpu_index) AS r
    FROM per_gpu
),
others AS (
    SELECT host, median(growth) AS others_growth FROM ranked WHERE r > 1 GROUP BY host
)
SELECT t.host, NULL AS gpu, NULL AS pid, t.start, t."end",
       t.gpu_index AS rank_gpu, round(t.growth / 1048576, 0) AS growth_mib,
       round(o.others_growth / 1048576, 0) AS others_median_growth_mib, t.gpus, tp.tp_size, tp.tp_source,
       format('On {}, GPU {} grew {:.0f} MiB across idle windows while the other {} GPUs grew {:.0f} MiB (median).',
              t.host, t.gpu_index, t.growth / 1048576, t.gpus - 1, o.others_growth / 1048576) AS summary
FROM ranked t JOIN others o USING (host) JOIN tp USING (host)
WHERE t.r = 1 AND t.gpus >= 2 AND tp.tp_size > 1
  AND t.growth >= $min_growth_mib * 1048576.0
  AND greatest(o.others_growth, 0) <= $max_others_fraction * t.growth
ORDER BY t.host
