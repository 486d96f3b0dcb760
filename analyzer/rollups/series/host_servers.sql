-- Per host: the inference server as last seen (engine, version, model, memory flags); of
-- processes last seen at one instant (tensor-parallel ranks), the greatest value.
SELECT host, arg_max(engine, (last_ts, engine)), arg_max(engine_version, (last_ts, engine_version)),
       arg_max(model, (last_ts, model)),
       arg_max(mem_fraction_static, (last_ts, mem_fraction_static)),
       arg_max(gpu_memory_utilization, (last_ts, gpu_memory_utilization)),
       arg_max(disable_fast_image_processor, (last_ts, disable_fast_image_processor)),
       arg_max(tp_size, (last_ts, tp_size))
FROM server_info
GROUP BY host
