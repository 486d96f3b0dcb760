-- The span the device samples cover: the run's data_start and data_end.
SELECT min(b), max(b_end) FROM gpu_buckets
