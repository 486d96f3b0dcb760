-- The span the device samples cover: the run's data_start and data_end (the first
-- bucket's start and the last one's end, from gpu_info: no pass over the buckets).
SELECT to_timestamp(floor(epoch(min(i.first_ts)) / min(s.bucket_s)) * min(s.bucket_s)),
       to_timestamp((floor(epoch(max(i.last_ts)) / min(s.bucket_s)) + 1) * min(s.bucket_s))
FROM gpu_info i, rollup_settings s
