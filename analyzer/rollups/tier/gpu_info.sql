-- gpu_info from the stored tier (finished host-days) and from raw samples (the
-- rest): the same figures as one pass over every raw sample.
CREATE OR REPLACE TABLE gpu_info AS
SELECT host, gpu_index,
       min(gpu_name) AS gpu_name,
       min(gpu_uuid) AS gpu_uuid,
       max(total) AS total,
       min(first_ts) AS first_ts,
       max(last_ts) AS last_ts,
       sum(samples)::BIGINT AS samples,
       sum(util_samples)::BIGINT AS util_samples
FROM (SELECT * FROM tier_gpu_info UNION ALL BY NAME SELECT * FROM gpu_info_rest)
GROUP BY host, gpu_index
