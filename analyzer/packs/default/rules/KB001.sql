/*---
id          = "KB001"
name        = "known_bug.sglang_fast_image_processor"
title       = "SGLang fast image processor leak (known bug)"
category    = "known_bug.fast_image_processor"
severity    = "warning"
requires    = ["processes|log_lines"]
missing_hint = "the server's configuration: `leakcollect run` on the host (process table), or the server log with its ServerArgs dump; `pip show sglang` gives the version"
evidence    = ["engine_version", "model", "fast_image_processor", "flag_source", "growth_mib_per_h",
               "confidence", "settle_with"]
description = """
SGLang up to $max_affected_version serving a vision-language model with the fast
image processor (the default) leaks GPU memory on image requests: temporary
GPU buffers stay in the caching allocator and vision-token KV pages are not
released. Critical when this host's GPU memory is also seen growing.
The configuration comes from the process table or, without one, from the
server log (ServerArgs dump, version line). With the version unknown, a vision
model with the fast processor on whose memory grows is named as a suspect
(low confidence) with the command that settles it.
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
equivalent  = [  # mutants that cannot change the result (leakreport rules test --mutate)
  {mutant = "=→<> @ arg_max(model_path, (ts, file, \"offset\")) FILTER (WHERE event = 'server_args' AND model_path IS NOT NULL) AS model,", reason = "l.model is never read when it has a value: every server_args event with a model is also a log_server_info row in server_info, so p.model (first in the coalesce) is already non-NULL"},
  {mutant = "drop WHERE `engine_version IS NOT NULL` @ arg_max(engine_version, (last_ts, pid)) FILTER (WHERE engine_version IS NOT NULL) AS engine_version,", reason = "arg_max skips rows whose value is NULL, so these rows never change the result"},
  {mutant = "drop WHERE `event = 'engine_version'` @ arg_max(version, (ts, file, \"offset\")) FILTER (WHERE event = 'engine_version' AND version IS NOT NULL) AS engine_version,", reason = "only these events carry the field (logformats.FIELDS; logparse keeps a field on its own event alone), and the IS NOT NULL conjunct keeps just those rows"},
  {mutant = "drop WHERE `version IS NOT NULL` @ arg_max(version, (ts, file, \"offset\")) FILTER (WHERE event = 'engine_version' AND version IS NOT NULL) AS engine_version,", reason = "arg_max skips rows whose value is NULL, so these rows never change the result"},
  {mutant = "drop WHERE `event = 'server_args'` @ arg_max(model_path, (ts, file, \"offset\")) FILTER (WHERE event = 'server_args' AND model_path IS NOT NULL) AS model,", reason = "only these events carry the field (logformats.FIELDS; logparse keeps a field on its own event alone), and the IS NOT NULL conjunct keeps just those rows"},
  {mutant = "drop WHERE `model_path IS NOT NULL` @ arg_max(model_path, (ts, file, \"offset\")) FILTER (WHERE event = 'server_args' AND model_path IS NOT NULL) AS model,", reason = "arg_max skips rows whose value is NULL, so these rows never change the result"},
  {mutant = "drop WHERE `event = 'server_args'` @ FILTER (WHERE event = 'server_args' AND disable_fast_image_processor IS NOT NULL) AS from_args,", reason = "only these events carry the field (logformats.FIELDS; logparse keeps a field on its own event alone), and the IS NOT NULL conjunct keeps just those rows"},
  {mutant = "drop WHERE `disable_fast_image_processor IS NOT NULL` @ FILTER (WHERE event = 'server_args' AND disable_fast_image_processor IS NOT NULL) AS from_args,", reason = "arg_max skips rows whose value is NULL, so these rows never change the result"},
  {mutant = "drop WHERE `event = 'fast_image_processor'` @ arg_max(enabled, (ts, file, \"offset\")) FILTER (WHERE event = 'fast_image_processor' AND enabled IS NOT NULL) AS from_msg", reason = "only these events carry the field (logformats.FIELDS; logparse keeps a field on its own event alone), and the IS NOT NULL conjunct keeps just those rows"},
  {mutant = "drop WHERE `enabled IS NOT NULL` @ arg_max(enabled, (ts, file, \"offset\")) FILTER (WHERE event = 'fast_image_processor' AND enabled IS NOT NULL) AS from_msg", reason = "arg_max skips rows whose value is NULL, so these rows never change the result"},
]
[params]
max_affected_version = "0.4.9.post6"
vision_model_regex = '(?i)(-vl\b|vl-|vision|llava|internvl|pixtral|minicpm-v|qwen[0-9.]*-?vl|idefics|molmo|gemma-3)'
min_growth_mib_per_h = 16.0
---*/
WITH procs AS (
    SELECT host, arg_max(pid, (last_ts, pid)) AS pid, min(first_ts) AS start, max(last_ts) AS "end",
           arg_max(engine, (last_ts, pid)) AS engine,
           arg_max(engine_version, (last_ts, pid)) FILTER (WHERE engine_version IS NOT NULL) AS engine_version,
           arg_max(model, (last_ts, pid)) AS model,
           NOT bool_or(disable_fast_image_processor) AS fast_from_cmdline
    FROM server_info GROUP BY host
),
logged AS (
    -- the ServerArgs dump states the flag even when the cmdline was not readable;
    -- image-processor messages are the weaker evidence
    SELECT host, min(ts) AS start, max(ts) AS "end",
           arg_max(version, (ts, file, "offset")) FILTER (WHERE event = 'engine_version' AND version IS NOT NULL) AS engine_version,
           arg_max(model_path, (ts, file, "offset")) FILTER (WHERE event = 'server_args' AND model_path IS NOT NULL) AS model,
           arg_max(NOT disable_fast_image_processor, (ts, file, "offset"))
               FILTER (WHERE event = 'server_args' AND disable_fast_image_processor IS NOT NULL) AS from_args,
           arg_max(enabled, (ts, file, "offset")) FILTER (WHERE event = 'fast_image_processor' AND enabled IS NOT NULL) AS from_msg
    FROM log_events
    GROUP BY host
),
growth AS (
    SELECT host, max(slope_bps) * 3600 / 1048576 AS mib_per_h
    FROM idle_trend WHERE n >= 3 GROUP BY host
),
hit AS (
    SELECT coalesce(p.host, l.host) AS host, p.pid,
           coalesce(least(p.start, l.start), p.start, l.start) AS start,
           coalesce(greatest(p."end", l."end"), p."end", l."end") AS "end",
           p.engine,  -- a logged configuration reaches server_info too (log_server_info)
           coalesce(p.engine_version, l.engine_version) AS engine_version,
           coalesce(p.model, l.model) AS model,
           CASE WHEN l.from_args IS NOT NULL THEN 'server log (ServerArgs)'
                WHEN p.fast_from_cmdline IS NOT NULL THEN 'command line'
                WHEN l.from_msg IS NOT NULL THEN 'server log (image processor message)' END AS flag_source,
           coalesce(l.from_args, p.fast_from_cmdline, l.from_msg) AS fast_on,
           coalesce(g.mib_per_h, 0) AS mib_per_h
    FROM procs p
    FULL OUTER JOIN logged l USING (host)
    LEFT JOIN growth g ON g.host = coalesce(p.host, l.host)
),
judged AS (
    SELECT *,
           CASE WHEN engine_version IS NULL THEN 'low' ELSE 'high' END AS confidence
    FROM hit
    WHERE engine = 'sglang' AND fast_on
      AND regexp_matches(coalesce(model, ''), $vision_model_regex)
      AND ((engine_version IS NOT NULL AND version_key(engine_version) <= version_key($max_affected_version))
           -- version unknown: a suspect only when the memory is seen growing
           OR (engine_version IS NULL AND mib_per_h >= $min_growth_mib_per_h))
)
SELECT host, NULL AS gpu, pid, start, "end",
       CASE WHEN engine_version IS NULL THEN 'warning'
            WHEN mib_per_h >= $min_growth_mib_per_h THEN 'critical' ELSE 'warning' END AS severity,
       engine_version, model, fast_on AS fast_image_processor, flag_source,
       round(mib_per_h, 1) AS growth_mib_per_h, confidence,
       CASE WHEN engine_version IS NULL THEN 'pip show sglang' END AS settle_with,
       CASE WHEN engine_version IS NULL
            THEN format('{} runs {} on SGLang of unknown version with the fast image processor on, and its GPU '
                        'memory grows about {:.0f} MiB/h: suspect the known fast-image-processor leak '
                        '(SGLang <= {}); `pip show sglang` on the host settles it.',
                        host, model, mib_per_h, $max_affected_version)
            ELSE format('{} runs SGLang {} with {} and the fast image processor on (known leak){}.',
                        host, engine_version, model,
                        CASE WHEN mib_per_h >= $min_growth_mib_per_h
                             THEN format('; its GPU memory grows about {:.0f} MiB/h', mib_per_h)
                             ELSE '; no growth seen yet' END) END AS summary
FROM judged
ORDER BY host
