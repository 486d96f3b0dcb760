-- gpu_buckets wider than the stored tier's: the tier's buckets ($tier_bucket_s, a
-- divisor of $bucket_s) regrouped, and raw samples (the rest) bucketed at $bucket_s.
-- Exact: min of mins, max of maxes, sums of whole-byte sums and counts; and neither
-- width crosses midnight, so each bucket comes whole from one side.
CREATE OR REPLACE TABLE gpu_buckets AS
SELECT host, gpu_index, bi,
       to_timestamp(bi * $bucket_s) AS b,
       to_timestamp((bi + 1) * $bucket_s) AS b_end,
       used_min, used_max, used_sum / n AS used_avg, used_sum, total, util_max, n
FROM (
    SELECT host, gpu_index,
           CAST(floor(bi * $tier_bucket_s / $bucket_s) AS BIGINT) AS bi,
           min(used_min) AS used_min,
           max(used_max) AS used_max,
           sum(used_sum) AS used_sum,
           max(total) AS total,
           max(util_max) AS util_max,
           sum(n) AS n
    FROM tier_gpu_buckets
    GROUP BY ALL
)
UNION ALL BY NAME
SELECT * FROM gpu_buckets_rest
