-- Each GPU's model name, memory size and last sample (epoch seconds), for its series.
SELECT host, gpu_index, gpu_name, total, CAST(epoch(last_ts) AS DOUBLE) FROM gpu_info
