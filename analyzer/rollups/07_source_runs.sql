-- Collector runs per host and source: how many, how many failed, and the last failure's
-- error (of two at one instant, the greater text: the same every run) with its time.
-- Counts and a latest: the stored tier keeps them per host-day, and an analysis adds
-- them up (tier/source_runs.sql) instead of reading every run of the span.
CREATE OR REPLACE TABLE source_runs AS
SELECT host, source,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       count(*) AS runs,
       arg_max(error, (ts, error)) FILTER (WHERE status = 'failed') AS error,
       arg_max(ts, (ts, error)) FILTER (WHERE status = 'failed' AND error IS NOT NULL) AS error_ts
FROM collector_runs
GROUP BY host, source;
