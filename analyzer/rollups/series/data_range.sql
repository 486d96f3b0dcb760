-- The span the device samples cover: the run's data_start and data_end (the first
-- bucket's start and the last one's end, from gpu_span: no pass over the buckets).
SELECT min(first_b), max(last_end) FROM gpu_span
