-- Engine metrics normalised to one vocabulary, whatever the engine, version
-- or gateway prefix: kv_usage (0-1), running, queued, requests_total,
-- rss_bytes, latency_sum / latency_count. Per-rank series are aggregated:
-- max across tensor/pipeline ranks of one replica, then sum across replicas
-- (max for usage), never "last sample wins".
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
)
SELECT host, ts, metric,
       CASE WHEN metric = 'kv_usage' THEN max(value) ELSE sum(value) END AS value
FROM per_replica
GROUP BY host, ts, metric;

-- Requests served, cumulative per host, across counter resets (restarts).
CREATE OR REPLACE TABLE requests AS
WITH c AS (
    SELECT host, ts, value,
           value - lag(value) OVER (PARTITION BY host ORDER BY ts) AS d
    FROM metric_norm WHERE metric = 'requests_total'
)
SELECT host, ts, sum(CASE WHEN d IS NULL THEN 0 WHEN d < 0 THEN value ELSE d END)
                 OVER (PARTITION BY host ORDER BY ts) AS cum_requests
FROM c;

-- KV-cache usage per host over time (metrics, else batch-stats log lines).
CREATE OR REPLACE TABLE kv_usage AS
SELECT host, ts, max(v) AS kv_usage
FROM (
    SELECT host, ts, value AS v FROM metric_norm WHERE metric = 'kv_usage'
    UNION ALL
    SELECT host, ts, kv_usage_ratio FROM log_events WHERE event = 'batch_stats' AND kv_usage_ratio IS NOT NULL
)
GROUP BY ALL;

-- Running requests per host over time, from /metrics and batch-stats lines.
-- from_log: the reading came from the log only (servers print batch lines while
-- busy and fall silent at idle, so such a reading goes stale sooner).
CREATE OR REPLACE TABLE activity AS
SELECT host, ts, max(running) AS running, bool_and(from_log) AS from_log
FROM (
    SELECT host, ts, value AS running, false AS from_log FROM metric_norm WHERE metric = 'running'
    UNION ALL
    SELECT host, ts, running_reqs, true FROM log_events WHERE event = 'batch_stats'
)
WHERE running IS NOT NULL
GROUP BY host, ts;
