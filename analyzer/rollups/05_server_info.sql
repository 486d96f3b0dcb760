-- The latest known configuration of every server process, per host: each field's
-- latest value (a row can lack a field another has). Of log lines read at one instant
-- (a collector run reads many), the one later in its file is the latest.
-- First from the process table alone, per host and process: each field's latest value
-- and its key (o: time, log file, offset), which the stored tier keeps per host-day;
-- and the largest tp_size (SK001: was the host's server ever tensor-parallel).
CREATE OR REPLACE TABLE server_parts AS
SELECT host, pid,
       arg_max(engine, o) AS engine, max(o) FILTER (WHERE engine IS NOT NULL) AS engine_o,
       arg_max(engine_version, o) AS engine_version, max(o) FILTER (WHERE engine_version IS NOT NULL) AS engine_version_o,
       arg_max(model, o) AS model, max(o) FILTER (WHERE model IS NOT NULL) AS model_o,
       arg_max(cmdline, o) AS cmdline, max(o) FILTER (WHERE cmdline IS NOT NULL) AS cmdline_o,
       arg_max(mem_fraction_static, o) AS mem_fraction_static, max(o) FILTER (WHERE mem_fraction_static IS NOT NULL) AS mem_fraction_static_o,
       arg_max(gpu_memory_utilization, o) AS gpu_memory_utilization, max(o) FILTER (WHERE gpu_memory_utilization IS NOT NULL) AS gpu_memory_utilization_o,
       arg_max(disable_fast_image_processor, o) AS disable_fast_image_processor, max(o) FILTER (WHERE disable_fast_image_processor IS NOT NULL) AS disable_fast_image_processor_o,
       arg_max(tp_size, o) AS tp_size, max(o) FILTER (WHERE tp_size IS NOT NULL) AS tp_size_o,
       arg_max(flags_json, o) AS flags_json, max(o) FILTER (WHERE flags_json IS NOT NULL) AS flags_json_o,
       min(ts) AS first_ts, max(ts) AS last_ts,
       max(tp_size) AS tp_max  -- the largest ever seen (a reused PID can have had another)
FROM (SELECT *, {'ts': ts, 'file': CAST(NULL AS VARCHAR), 'offset': CAST(NULL AS BIGINT)} AS o
      FROM processes
      WHERE engine IS NOT NULL)
GROUP BY host, pid;

-- Then with the servers' own log lines (logs state flags, not command lines): the
-- latest of each field.
CREATE OR REPLACE TABLE server_info AS
SELECT host, pid,
       arg_max(engine, engine_o) AS engine,
       arg_max(engine_version, engine_version_o) AS engine_version,
       arg_max(model, model_o) AS model,
       arg_max(cmdline, cmdline_o) AS cmdline,
       arg_max(mem_fraction_static, mem_fraction_static_o) AS mem_fraction_static,
       arg_max(gpu_memory_utilization, gpu_memory_utilization_o) AS gpu_memory_utilization,
       arg_max(disable_fast_image_processor, disable_fast_image_processor_o) AS disable_fast_image_processor,
       arg_max(tp_size, tp_size_o) AS tp_size,
       arg_max(flags_json, flags_json_o) AS flags_json,
       min(first_ts) AS first_ts, max(last_ts) AS last_ts
FROM (SELECT * FROM server_parts
      UNION ALL BY NAME
      SELECT host, pid,
             engine, CASE WHEN engine IS NOT NULL THEN o END AS engine_o,
             engine_version, CASE WHEN engine_version IS NOT NULL THEN o END AS engine_version_o,
             model, CASE WHEN model IS NOT NULL THEN o END AS model_o,
             mem_fraction_static, CASE WHEN mem_fraction_static IS NOT NULL THEN o END AS mem_fraction_static_o,
             gpu_memory_utilization, CASE WHEN gpu_memory_utilization IS NOT NULL THEN o END AS gpu_memory_utilization_o,
             disable_fast_image_processor, CASE WHEN disable_fast_image_processor IS NOT NULL THEN o END AS disable_fast_image_processor_o,
             tp_size, CASE WHEN tp_size IS NOT NULL THEN o END AS tp_size_o,
             flags_json, CASE WHEN flags_json IS NOT NULL THEN o END AS flags_json_o,
             ts AS first_ts, ts AS last_ts
      FROM (SELECT *, {'ts': ts, 'file': CAST(log_file AS VARCHAR), 'offset': CAST(log_offset AS BIGINT)} AS o
            FROM log_server_info
            WHERE engine IS NOT NULL))
GROUP BY host, pid;

CREATE OR REPLACE MACRO version_key(v) AS
    list_transform(
        list_filter(string_split(regexp_replace(coalesce(v, ''), '[^0-9]+', '.', 'g'), '.'), lambda x: x <> ''),
        lambda x: TRY_CAST(x AS BIGINT));
