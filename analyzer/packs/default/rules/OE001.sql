/*---
id          = "OE001"
name        = "oom.events"
title       = "The server ran out of GPU memory"
category    = "oom.event"
severity    = "critical"
requires    = ["log_lines"]
missing_hint = "the server log: `leakcollect run --log FILE` on the host, or `leakcollect import server-log FILE --tz ZONE`"
evidence    = ["ooms", "last_tried_mib", "last_free_mib", "total_mib", "rate_mib_per_h_before", "leak_before",
               "lifetime_source"]
description = """
CUDA / PyTorch out-of-memory errors in the server log, per GPU (from the
message's "GPU N"), tied to the memory trend before them: the idle-baseline
slope of the process lifetimes on that GPU. An OOM after steady idle growth is
the end of a leak; one without growth is a load spike or a too-large request.
"""
remediation = """
If the memory grew before the OOM, treat it as the leak's end (see the leak
findings and the OOM forecast). If it did not, the request or batch was too
large for the headroom: lower --max-running-requests / --max-num-seqs or the
context length, or leave more room outside the static pool
(--mem-fraction-static / --gpu-memory-utilization).
"""
references  = []
[params]
leak_rate_mib_per_h = 16.0
---*/
WITH o AS (
    SELECT host, coalesce(gpu, 0) AS gpu_index, count(*) AS ooms, min(ts) AS start, max(ts) AS "end",
           arg_max(tried_bytes, (ts, file, "offset")) AS tried, arg_max(free_bytes, (ts, file, "offset")) AS free, arg_max(total_bytes, (ts, file, "offset")) AS total
    FROM log_events WHERE event = 'oom'
    GROUP BY ALL
),
trend AS (
    SELECT host, gpu_index, median(slope_bps) * 3600 / 1048576 AS rate,
           arg_max(lifetime_source, (last_end, lifetime_source)) AS lifetime_source
    FROM idle_trend WHERE n >= 3 GROUP BY ALL
)
SELECT o.host, o.gpu_index AS gpu, NULL AS pid, o.start, o."end",
       o.ooms, round(o.tried / 1048576, 1) AS last_tried_mib, round(o.free / 1048576, 1) AS last_free_mib,
       round(o.total / 1048576, 0) AS total_mib, round(t.rate, 1) AS rate_mib_per_h_before,
       coalesce(t.rate >= $leak_rate_mib_per_h, false) AS leak_before, t.lifetime_source,
       format('GPU {} on {} ran out of memory {} time{}{}.', o.gpu_index, o.host, o.ooms,
              CASE WHEN o.ooms > 1 THEN 's' ELSE '' END,
              CASE WHEN t.rate >= $leak_rate_mib_per_h
                   THEN format(', after idle memory grew about {:.0f} MiB/h: the end of a leak', t.rate)
                   WHEN t.rate IS NOT NULL
                   THEN ', without steady growth before: a load spike or an oversized request'
                   -- no idle-window trend to compare with: say so rather than guess
                   ELSE ', with no memory trend before it to compare with (no idle windows in device '
                        'samples of this GPU): a leak cannot be told from a load spike' END) AS summary
FROM o LEFT JOIN trend t USING (host, gpu_index)
ORDER BY o.host, o.gpu_index
