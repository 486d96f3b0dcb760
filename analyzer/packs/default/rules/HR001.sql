/*---
id          = "HR001"
name        = "host_memory.rss_growth"
title       = "Host memory (RSS) of the server process keeps growing"
category    = "leak.host_rss"
severity    = "warning"
requires    = ["gpu_processes|metric_samples"]
missing_hint = "the server's RSS: `leakcollect run` on the host (/proc), or its /metrics (`--metrics-url`)"
evidence    = ["first_rss_mib", "last_rss_mib", "growth_mib", "late_growth_mib", "rate_mib_per_h", "early_req_per_s", "late_req_per_s", "source"]
description = """
Resident memory of a server process (VmRSS from /proc, or the server's own
process_resident_memory_bytes) compared across the quarters of its lifetime:
growth of at least $min_growth_mib MiB that is still going on in the last
quarter, while the request rate is flat or falling, is a host-memory leak
rather than more work. The rate is compared at the two ends of the series: over
its halves, or over as many whole days as fit in a half where it spans two days
or more, so that day and night traffic is no rise.
"""
remediation = """
Host-RAM leaks in vLLM (>= 0.7) serving vision-language models (Qwen2-VL) are
known (vllm issues #15597, #15085, #22736): upgrade, and restart on a schedule
shorter than the time the host has left. Watch the host's available memory:
the kernel OOM killer ends the server without a Python traceback.
"""
references  = ["https://github.com/vllm-project/vllm/issues/15597", "https://github.com/vllm-project/vllm/issues/22736"]
equivalent  = [  # mutants that cannot change the result (leakreport rules test --mutate)
  {mutant = "$min_growth_mib÷2 @ HAVING max(rss) - min(rss) >= $min_growth_mib * 1048576.0 - 1", reason = "moved only narrows the work: a looser span lets more series reach the growth test (q4 - q1 >= min_growth_mib), which alone decides"},
  {mutant = "drop HAVING `max(rss) - min(rss) >= $min_growth_mib * 1048576.0 - 1` @ HAVING max(rss) - min(rss) >= $min_growth_mib * 1048576.0 - 1", reason = "without the span test every series reaches the growth test, which alone decides"},
  {mutant = "drop WHERE `metric = 'rss_bytes'` @ SELECT host, 0 AS pid, 0 AS started, value, 'metrics' AS source FROM metric_norm WHERE metric = 'rss_bytes'", reason = "the span of every metric of a host covers that of rss_bytes: more hosts reach the growth test, which reads rss_bytes alone"},
]
[params]
min_growth_mib = 512
min_late_fraction = 0.1   # last-quarter growth at least this share of the total
max_rate_rise = 1.1       # late request rate at most this multiple of the early rate
min_samples = 8
---*/
WITH bins AS NOT MATERIALIZED (
    -- a series is one process: a PID that came back (process_start) is another one
    -- (started: its start in microseconds, 0 where unknown and for the metrics series).
    -- The columns used, read where used: a copy of every column of a month's 1.7 M bins
    -- cost more than this whole rule does now
    SELECT host, pid, pb, first_ts, rss_avg, coalesce(epoch_us(process_start), 0) AS started FROM proc_bins
),
moved AS (
    -- the series whose RSS spans the growth looked for at all (less a byte for rounding):
    -- the medians compared below lie within that span, so no other series can fire
    SELECT host, pid, started, source FROM (
        SELECT host, pid, started, rss_avg AS rss, 'procfs' AS source FROM bins
        UNION ALL
        SELECT host, 0 AS pid, 0 AS started, value, 'metrics' AS source FROM metric_norm WHERE metric = 'rss_bytes'
    )
    GROUP BY ALL
    HAVING max(rss) - min(rss) >= $min_growth_mib * 1048576.0 - 1
),
rss AS (
    SELECT host, pid, started, min(first_ts) AS ts, avg(rss_avg) AS rss, 'procfs' AS source
    FROM bins b SEMI JOIN moved m ON m.host = b.host AND m.pid = b.pid AND m.started = b.started AND m.source = 'procfs'
    WHERE rss_avg IS NOT NULL GROUP BY host, pid, started, pb
    UNION ALL
    SELECT host, 0 AS pid, 0 AS started, ts, value AS rss, 'metrics' AS source
    FROM metric_norm n SEMI JOIN moved m ON m.host = n.host AND m.source = 'metrics'
    WHERE metric = 'rss_bytes'
),
span AS (
    SELECT host, pid, started, source, epoch(min(ts)) AS t0, epoch(max(ts)) - epoch(min(ts)) AS d, count(*) AS n
    FROM rss GROUP BY ALL
),
q AS (
    -- quarters of the observed time (no sort over every sample)
    SELECT r.*, s.n,
           coalesce(least(4, 1 + CAST(floor(4 * (epoch(r.ts) - s.t0) / nullif(s.d, 0)) AS INTEGER)), 1) AS quarter
    FROM rss r JOIN span s USING (host, pid, started, source)
),
life AS (
    SELECT host, pid, started, source, min(ts) AS start, max(ts) AS "end", max(n) AS n,
           median(rss) FILTER (WHERE quarter = 1) AS q1, median(rss) FILTER (WHERE quarter = 3) AS q3,
           median(rss) FILTER (WHERE quarter = 4) AS q4
    FROM q GROUP BY ALL
),
grown AS (
    -- the series that grew, and still grow late: only they need the request rate
    SELECT * FROM life
    WHERE n >= $min_samples
      AND q4 - q1 >= $min_growth_mib * 1048576.0
      AND q4 - q3 >= $min_late_fraction * (q4 - q1)
),
half AS (
    -- the stretch whose request rate is compared at each end: half the series, or where
    -- it spans two days or more, as many whole days as fit in half of it (day and night
    -- traffic puts more afternoons in one half of 72 h than in the other)
    SELECT *, CASE WHEN "end" - start >= INTERVAL 2 DAY
                   THEN to_days(CAST(floor(epoch("end" - start) / 86400 / 2) AS INTEGER))
                   ELSE ("end" - start) / 2 END AS len
    FROM grown
),
rate AS (
    SELECT l.host, l.pid, l.started, l.source,
           (SELECT (max(r.cum_requests) - min(r.cum_requests)) / nullif(epoch(max(r.ts)) - epoch(min(r.ts)), 0)
              FROM requests r WHERE r.host = l.host AND r.ts >= l.start
               AND r.ts < l.start + l.len) AS early,
           (SELECT (max(r.cum_requests) - min(r.cum_requests)) / nullif(epoch(max(r.ts)) - epoch(min(r.ts)), 0)
              FROM requests r WHERE r.host = l.host AND r.ts >= l."end" - l.len
               AND r.ts <= l."end") AS late
    FROM half l
),
hits AS (
    SELECT l.*, r.early, r.late, (l.q4 - l.q1) AS growth, (l.q4 - l.q3) AS late_growth,
           row_number() OVER (PARTITION BY l.host ORDER BY l.source = 'procfs' DESC, l.q4 - l.q1 DESC, l.pid, l.started) AS pick
    FROM grown l JOIN rate r USING (host, pid, started, source)
    WHERE r.early IS NULL OR r.late IS NULL OR r.late <= $max_rate_rise * r.early
)
SELECT host, NULL AS gpu, nullif(pid, 0) AS pid, start, "end",
       round(q1 / 1048576, 0) AS first_rss_mib, round(q4 / 1048576, 0) AS last_rss_mib,
       round(growth / 1048576, 0) AS growth_mib, round(late_growth / 1048576, 0) AS late_growth_mib,
       round(growth / 1048576 / greatest((epoch("end") - epoch(start)) * 0.75 / 3600, 0.01), 1) AS rate_mib_per_h,
       round(early, 3) AS early_req_per_s, round(late, 3) AS late_req_per_s, source,
       format('Server process on {} grew its host memory by {:.0f} MiB (to {:.0f} MiB) while requests went from {} to {} per second.',
              host, growth / 1048576, q4 / 1048576,
              coalesce(format('{:.2f}', early), '?'), coalesce(format('{:.2f}', late), '?')) AS summary
FROM hits
WHERE pick = 1
ORDER BY host
