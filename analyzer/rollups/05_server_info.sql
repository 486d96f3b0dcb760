-- The latest known configuration of every server process, per host.
CREATE OR REPLACE TABLE server_info AS
SELECT host, pid, arg_max(engine, ts) AS engine, arg_max(engine_version, ts) AS engine_version,
       arg_max(model, ts) AS model, arg_max(cmdline, ts) AS cmdline,
       arg_max(mem_fraction_static, ts) AS mem_fraction_static,
       arg_max(gpu_memory_utilization, ts) AS gpu_memory_utilization,
       arg_max(disable_fast_image_processor, ts) AS disable_fast_image_processor,
       arg_max(tp_size, ts) AS tp_size, arg_max(flags_json, ts) AS flags_json,
       min(ts) AS first_ts, max(ts) AS last_ts
FROM (SELECT * FROM processes UNION ALL BY NAME SELECT * FROM log_server_info)  -- logs state flags too
WHERE engine IS NOT NULL
GROUP BY host, pid;

CREATE OR REPLACE MACRO version_key(v) AS
    list_transform(
        list_filter(string_split(regexp_replace(coalesce(v, ''), '[^0-9]+', '.', 'g'), '.'), lambda x: x <> ''),
        lambda x: TRY_CAST(x AS BIGINT));
