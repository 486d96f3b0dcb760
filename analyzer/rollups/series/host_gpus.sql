-- Per host: how many GPUs, their model (of mixed models, the least name: the same every
-- run), and the first and last device sample.
SELECT host, count(*), min(gpu_name), min(first_ts), max(last_ts)
FROM gpu_info
GROUP BY host
