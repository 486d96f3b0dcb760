-- Per host: the inference server as last seen (engine, version, model, memory flags).
SELECT host, arg_max(engine, last_ts), arg_max(engine_version, last_ts), arg_max(model, last_ts),
       arg_max(mem_fraction_static, last_ts), arg_max(gpu_memory_utilization, last_ts),
       arg_max(disable_fast_image_processor, last_ts), arg_max(tp_size, last_ts)
FROM server_info
GROUP BY host
