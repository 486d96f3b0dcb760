-- The bucket width chosen for this trace, for rules that bucket other tables alike
-- (and the buckets per block of gpu_blocks, for the charts that read it).
CREATE OR REPLACE TABLE rollup_settings AS
SELECT CAST($bucket_s AS DOUBLE) AS bucket_s, CAST($proc_bin_s AS DOUBLE) AS proc_bin_s,
       CAST($chart_block AS BIGINT) AS chart_block;

-- Each GPU's first and last bucket (their starts), from its first and last sample in
-- gpu_info: where a rule or chart starts from a GPU's latest data, no pass over the
-- buckets to find it. The one place this formula lives.
-- first_bi, last_bi: their bucket numbers, as gpu_buckets.bi.
CREATE OR REPLACE TABLE gpu_span AS
SELECT host, gpu_index, first_bi, last_bi,
       to_timestamp(first_bi * bucket_s) AS first_b,
       to_timestamp(last_bi * bucket_s) AS last_b,
       to_timestamp((last_bi + 1) * bucket_s) AS last_end
FROM (
    SELECT i.host, i.gpu_index, s.bucket_s,
           CAST(floor(epoch(i.first_ts) / s.bucket_s) AS BIGINT) AS first_bi,
           CAST(floor(epoch(i.last_ts) / s.bucket_s) AS BIGINT) AS last_bi
    FROM gpu_info i, rollup_settings s
);

-- Device memory per GPU in fixed buckets: the one pass over raw samples that
-- every memory rule builds on. bi is the bucket number (epoch / width).
CREATE OR REPLACE TABLE gpu_buckets AS
SELECT host, gpu_index, bi,
       to_timestamp(bi * $bucket_s) AS b,
       to_timestamp((bi + 1) * $bucket_s) AS b_end,
       used_min, used_max, used_avg, total, util_max, n
FROM (
    SELECT host, gpu_index,
           CAST(floor(epoch(ts) / $bucket_s) AS BIGINT) AS bi,
           min(memory_used_bytes) AS used_min,
           max(memory_used_bytes) AS used_max,
           avg(memory_used_bytes) AS used_avg,
           max(memory_total_bytes) AS total,
           max(utilization_gpu_pct) AS util_max,
           count(*) AS n
    FROM gpu_samples
    WHERE memory_used_bytes IS NOT NULL
    GROUP BY ALL
);

-- Device memory per GPU in blocks of $chart_block buckets (bi // $chart_block), for the
-- charts of long spans (rollups/series/gpu_series.sql), whose points are whole blocks:
-- a month's chart groups a fifth of the buckets. bi: the block's first bucket with data.
CREATE OR REPLACE TABLE gpu_blocks AS
SELECT host, gpu_index, min(bi) AS bi, max(used_max) AS used_max, min(used_min) AS used_min
FROM gpu_buckets
GROUP BY host, gpu_index, bi // $chart_block;
