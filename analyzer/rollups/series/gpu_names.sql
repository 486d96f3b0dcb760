-- Each GPU's model name and memory size, for its series.
SELECT host, gpu_index, gpu_name, total FROM gpu_info
