-- Running requests per host over time, from /metrics (any engine, any rank:
-- max across series) and from batch-stats log lines.
CREATE OR REPLACE TABLE activity AS
SELECT host, ts, max(running) AS running
FROM (
    SELECT host, ts, value AS running
    FROM metric_samples
    WHERE name IN (
        'sglang:num_running_reqs', 'sglang_num_running_reqs',
        'sglang:num_requests_running', 'vllm:num_requests_running'
    )
    UNION ALL
    SELECT host, ts,
           TRY_CAST(coalesce(
               nullif(regexp_extract(text, '#running[-_]req: *(\d+)', 1), ''),
               nullif(regexp_extract(text, 'Running: *(\d+) reqs', 1), '')
           ) AS DOUBLE) AS running
    FROM log_lines
    WHERE signature = 'batch_stats'
)
WHERE running IS NOT NULL
GROUP BY host, ts;
