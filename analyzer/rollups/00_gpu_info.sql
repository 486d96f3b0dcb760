-- One row per GPU: its name, UUID (the least, should a card be swapped at one index:
-- the same every run), size and when it was seen. The only
-- aggregate over raw samples that carries strings; it also sizes the buckets
-- (rollup.build picks $bucket_s or $long_bucket_s from the span it finds).
-- util_samples: those with a utilisation reading (none: a plain memory log, a MIG slice;
-- then only request activity can tell idle minutes, see analyzer/coverage.py).
CREATE OR REPLACE TABLE gpu_info AS
SELECT host, gpu_index,
       min(gpu_name) AS gpu_name,
       min(gpu_uuid) AS gpu_uuid,
       max(memory_total_bytes) AS total,
       min(ts) AS first_ts,
       max(ts) AS last_ts,
       count(*) AS samples,
       count(utilization_gpu_pct) AS util_samples
FROM gpu_samples
WHERE memory_used_bytes IS NOT NULL
GROUP BY host, gpu_index;
