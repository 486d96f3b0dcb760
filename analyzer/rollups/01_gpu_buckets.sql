-- Device memory per GPU in fixed buckets: the one pass over raw samples.
CREATE OR REPLACE TABLE gpu_buckets AS
SELECT
    host,
    gpu_index,
    to_timestamp(floor(epoch(ts) / $bucket_s) * $bucket_s) AS b,
    to_timestamp(floor(epoch(ts) / $bucket_s) * $bucket_s + $bucket_s) AS b_end,
    min(memory_used_bytes) AS used_min,
    max(memory_used_bytes) AS used_max,
    avg(memory_used_bytes) AS used_avg,
    max(memory_total_bytes) AS total,
    max(utilization_gpu_pct) AS util_max,
    any_value(gpu_name) AS gpu_name,
    any_value(gpu_uuid) AS gpu_uuid,
    count(*) AS n
FROM gpu_samples
WHERE memory_used_bytes IS NOT NULL
GROUP BY ALL;
