-- Engine metrics normalised to one vocabulary, whatever the engine, version
-- or gateway prefix: kv_usage (0-1), running, queued, requests_total,
-- rss_bytes, latency_sum / latency_count. Per-rank series are aggregated:
-- max across tensor/pipeline ranks of one replica, then sum across replicas
-- (max for usage), never "last sample wins".
-- day_increase (requests_total only, else NULL): requests served since the host's
-- first reading of that UTC day, across counter resets (a reading below the one
-- before it counts whole: the counter restarted from 0). Per day, so the stored
-- tier keeps it and `requests` below only adds up the days.
CREATE OR REPLACE TABLE metric_norm AS
WITH named AS (
    SELECT host, ts, value, labels,
           CASE
               WHEN name IN ('sglang:token_usage', 'sglang_token_usage',
                             'vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc') THEN 'kv_usage'
               WHEN name IN ('sglang:num_running_reqs', 'sglang_num_running_reqs',
                             'sglang:num_requests_running', 'vllm:num_requests_running') THEN 'running'
               WHEN name IN ('sglang:num_queue_reqs', 'sglang_num_queue_reqs', 'sglang:num_requests_waiting',
                             'vllm:num_requests_waiting') THEN 'queued'
               WHEN name IN ('sglang:num_requests_total', 'sglang_num_requests_total',
                             'vllm:request_success_total') THEN 'requests_total'
               WHEN name = 'process_resident_memory_bytes' THEN 'rss_bytes'
               WHEN name IN ('sglang:e2e_request_latency_seconds_sum', 'sglang_e2e_request_latency_seconds_sum',
                             'vllm:e2e_request_latency_seconds_sum') THEN 'latency_sum'
               WHEN name IN ('sglang:e2e_request_latency_seconds_count', 'sglang_e2e_request_latency_seconds_count',
                             'vllm:e2e_request_latency_seconds_count') THEN 'latency_count'
           END AS metric
    FROM metric_samples
    WHERE value IS NOT NULL AND NOT isnan(value)
),
m AS (
    SELECT host, ts, value, metric,
           -- the replica: labels less the rank labels (rebuilt only where there are rank
           -- labels), as a hash: it is only ever a grouping key
           hash(CASE WHEN labels IS NULL OR cardinality(labels) = 0 THEN MAP {}
                     WHEN NOT (map_contains(labels, 'tp_rank') OR map_contains(labels, 'pp_rank')
                               OR map_contains(labels, 'pid') OR map_contains(labels, 'moe_ep_rank'))
                          THEN labels
                     ELSE map_from_entries(list_filter(map_entries(labels),
                          lambda e: e.key NOT IN ('tp_rank', 'pp_rank', 'pid', 'moe_ep_rank')))
                END) AS replica
    FROM named WHERE metric IS NOT NULL
),
per_replica AS (
    SELECT host, ts, metric, replica, max(value) AS value
    FROM m
    GROUP BY ALL
),
norm AS (
    SELECT host, ts, metric,
           CASE WHEN metric = 'kv_usage' THEN max(value) ELSE sum(value) END AS value
    FROM per_replica
    GROUP BY host, ts, metric
),
counted AS (
    SELECT host, ts, metric, value,
           value - lag(value) OVER (PARTITION BY host, CAST(floor(epoch(ts) / 86400) AS BIGINT)
                                    ORDER BY ts) AS d
    FROM norm WHERE metric = 'requests_total'
)
SELECT host, ts, metric, value, CAST(NULL AS DOUBLE) AS day_increase
FROM norm WHERE metric <> 'requests_total'
UNION ALL
SELECT host, ts, metric, value,
       sum(CASE WHEN d IS NULL THEN 0 WHEN d < 0 THEN value ELSE d END)
           OVER (PARTITION BY host, CAST(floor(epoch(ts) / 86400) AS BIGINT) ORDER BY ts)
FROM counted;

-- Requests served per host and UTC day (dn: days since 1970): before, those of the
-- host's days before it, across counter resets (restarts): each day's day_increase,
-- plus each day's first reading against the last of the day before (the whole reading
-- where it fell); total, the day's own (its last day_increase). One row per host-day:
-- the cumulative count at any reading is before + its day_increase (`requests`), and
-- at the end of a day before + total.
CREATE OR REPLACE TABLE request_days AS
WITH days AS (
    SELECT host, CAST(floor(epoch(ts) / 86400) AS BIGINT) AS dn,
           arg_min(value, ts) AS first_v, arg_max(value, ts) AS last_v,
           arg_max(day_increase, ts) AS total
    FROM metric_norm WHERE metric = 'requests_total' GROUP BY ALL
),
edges AS (
    SELECT host, dn, total, first_v - lag(last_v) OVER w AS d, first_v
    FROM days WINDOW w AS (PARTITION BY host ORDER BY dn)
)
SELECT host, dn,
       coalesce(sum(total) OVER (PARTITION BY host ORDER BY dn
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
       + sum(CASE WHEN d IS NULL THEN 0 WHEN d < 0 THEN first_v ELSE d END)
             OVER (PARTITION BY host ORDER BY dn) AS before,
       total
FROM edges;

-- Requests served, cumulative per host over the whole span, at each reading. A view:
-- the analysis itself looks up per host-day (request_days) and per idle segment
-- (idle_segments.day_requests), not every reading.
CREATE OR REPLACE VIEW requests AS
SELECT r.host, r.ts, r.day_increase + d.before AS cum_requests
FROM metric_norm r
JOIN request_days d ON d.host = r.host AND d.dn = CAST(floor(epoch(r.ts) / 86400) AS BIGINT)
WHERE r.metric = 'requests_total';

-- KV-cache usage per host over time (metrics, else batch-stats log lines). metric_norm
-- has one row per host, time and metric: only the times a log line shares with it are
-- grouped (the highest reading wins); the rest is taken as it is.
CREATE OR REPLACE TABLE kv_usage AS
WITH logs AS (
    SELECT host, ts, kv_usage_ratio AS v FROM log_events
    WHERE event = 'batch_stats' AND kv_usage_ratio IS NOT NULL
)
SELECT host, ts, value AS kv_usage FROM metric_norm m
WHERE metric = 'kv_usage' AND NOT EXISTS (SELECT 1 FROM logs l WHERE l.host = m.host AND l.ts = m.ts)
UNION ALL
SELECT host, ts, max(v) FROM (
    SELECT host, ts, v FROM logs
    UNION ALL
    SELECT m.host, m.ts, m.value FROM metric_norm m SEMI JOIN logs l ON l.host = m.host AND l.ts = m.ts
    WHERE m.metric = 'kv_usage'
)
GROUP BY host, ts;

-- Running requests per host over time, from /metrics and batch-stats lines (grouped
-- only where a log line shares a time with a metric reading, as kv_usage).
-- from_log: the reading came from the log only (servers print batch lines while
-- busy and fall silent at idle, so such a reading goes stale sooner).
CREATE OR REPLACE TABLE activity AS
WITH logs AS (
    SELECT host, ts, running_reqs AS running FROM log_events
    WHERE event = 'batch_stats' AND running_reqs IS NOT NULL
)
SELECT host, ts, value AS running, false AS from_log FROM metric_norm m
WHERE metric = 'running' AND value IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM logs l WHERE l.host = m.host AND l.ts = m.ts)
UNION ALL
SELECT host, ts, max(running), bool_and(from_log) FROM (
    SELECT host, ts, running, true AS from_log FROM logs
    UNION ALL
    SELECT m.host, m.ts, m.value, false FROM metric_norm m SEMI JOIN logs l ON l.host = m.host AND l.ts = m.ts
    WHERE m.metric = 'running' AND m.value IS NOT NULL
)
GROUP BY host, ts;
