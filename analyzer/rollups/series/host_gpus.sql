-- Per host: how many GPUs, their model, and the first and last device sample.
SELECT host, count(*), any_value(gpu_name), min(first_ts), max(last_ts)
FROM gpu_info
GROUP BY host
