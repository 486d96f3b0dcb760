/*---
id          = "KB001"
name        = "known_bug.sglang_fast_image_processor"
title       = "SGLang fast image processor leak (known bug)"
category    = "known_bug.fast_image_processor"
severity    = "warning"
requires    = ["processes"]
evidence    = ["engine_version", "model", "fast_image_processor", "flag_source", "growth_mib_per_h"]
description = """
SGLang up to $max_affected_version serving a vision-language model with the fast
image processor (the default) leaks GPU memory on image requests: temporary
GPU buffers stay in the caching allocator and vision-token KV pages are not
released. Critical when this host's GPU memory is also seen growing.
"""
remediation = """
A. Restart with --disable-fast-image-processor: image preprocessing moves to the
   CPU; costs about 50 ms more per image (about 5-10 % end to end; one report on
   Qwen3-VL saw it more than 2x slower). Stops the leak.
B. Lower --mem-fraction-static (e.g. 0.7 -> 0.5) and schedule restarts: turns
   "OOM in 20 minutes" into hours between restarts, at the cost of restart
   windows and a smaller KV cache.
C. Upgrade SGLang to a release with the fixes (sglang PRs #21532 and #18010).
"""
references  = [
    "https://github.com/sgl-project/sglang/issues/9365",
    "https://github.com/sgl-project/sglang/issues/6082",
    "https://github.com/sgl-project/sglang/pull/21532",
    "https://github.com/sgl-project/sglang/pull/18010",
]
[params]
max_affected_version = "0.4.9.post6"
vision_model_regex = '(?i)(-vl\b|vl-|vision|llava|internvl|pixtral|minicpm-v|qwen[0-9.]*-?vl|idefics|molmo|gemma-3)'
min_growth_mib_per_h = 16.0
---*/
WITH srv AS (
    SELECT * FROM server_info
    WHERE engine = 'sglang'
      AND engine_version IS NOT NULL
      AND version_key(engine_version) <= version_key($max_affected_version)
      AND regexp_matches(coalesce(model, ''), $vision_model_regex)
),
logged AS (
    -- the ServerArgs dump states the flag even when the cmdline was not readable;
    -- image-processor messages are the weaker evidence
    SELECT host,
           arg_max(NOT disable_fast_image_processor, ts)
               FILTER (WHERE event = 'server_args' AND disable_fast_image_processor IS NOT NULL) AS from_args,
           arg_max(enabled, ts) FILTER (WHERE event = 'fast_image_processor' AND enabled IS NOT NULL) AS from_msg
    FROM log_events
    GROUP BY host
),
growth AS (
    SELECT host, max(slope_bps) * 3600 / 1048576 AS mib_per_h
    FROM idle_trend WHERE n >= 3 GROUP BY host
),
hit AS (
    SELECT s.host, arg_max(s.pid, s.last_ts) AS pid, min(s.first_ts) AS start, max(s.last_ts) AS "end",
           arg_max(s.engine_version, s.last_ts) AS engine_version, arg_max(s.model, s.last_ts) AS model,
           CASE WHEN any_value(l.from_args) IS NOT NULL THEN 'server log (ServerArgs)'
                WHEN bool_or(s.disable_fast_image_processor IS NOT NULL) THEN 'command line'
                WHEN any_value(l.from_msg) IS NOT NULL THEN 'server log (image processor message)' END AS flag_source,
           coalesce(any_value(l.from_args), NOT bool_or(s.disable_fast_image_processor), any_value(l.from_msg))
               AS fast_on,
           coalesce(any_value(g.mib_per_h), 0) AS mib_per_h
    FROM srv s
    LEFT JOIN logged l USING (host)
    LEFT JOIN growth g USING (host)
    GROUP BY s.host
)
SELECT host, NULL AS gpu, pid, start, "end",
       CASE WHEN mib_per_h >= $min_growth_mib_per_h THEN 'critical' ELSE 'warning' END AS severity,
       engine_version, model, fast_on AS fast_image_processor, flag_source,
       round(mib_per_h, 1) AS growth_mib_per_h,
       format('{} runs SGLang {} with {} and the fast image processor on (known leak){}.',
              host, engine_version, model,
              CASE WHEN mib_per_h >= $min_growth_mib_per_h
                   THEN format('; its GPU memory grows about {:.0f} MiB/h', mib_per_h)
                   ELSE '; no growth seen yet' END) AS summary
FROM hit
WHERE fast_on
ORDER BY host
