-- The latest known configuration of every server process, per host. Of log lines read at
-- one instant (a collector run reads many), the one later in its file is the latest.
CREATE OR REPLACE TABLE server_info AS
SELECT host, pid, arg_max(engine, o) AS engine, arg_max(engine_version, o) AS engine_version,
       arg_max(model, o) AS model, arg_max(cmdline, o) AS cmdline,
       arg_max(mem_fraction_static, o) AS mem_fraction_static,
       arg_max(gpu_memory_utilization, o) AS gpu_memory_utilization,
       arg_max(disable_fast_image_processor, o) AS disable_fast_image_processor,
       arg_max(tp_size, o) AS tp_size, arg_max(flags_json, o) AS flags_json,
       min(ts) AS first_ts, max(ts) AS last_ts
FROM (SELECT *, (ts, log_file, log_offset) AS o
      FROM (SELECT * FROM processes UNION ALL BY NAME SELECT * FROM log_server_info))  -- logs state flags too
WHERE engine IS NOT NULL
GROUP BY host, pid;

CREATE OR REPLACE MACRO version_key(v) AS
    list_transform(
        list_filter(string_split(regexp_replace(coalesce(v, ''), '[^0-9]+', '.', 'g'), '.'), lambda x: x <> ''),
        lambda x: TRY_CAST(x AS BIGINT));
