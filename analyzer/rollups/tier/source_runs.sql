-- source_runs from the stored tier (finished host-days) and from raw runs (the rest):
-- counts add up; the last error is the one of the latest (time, text) of the days.
CREATE OR REPLACE TABLE source_runs AS
SELECT host, source,
       sum(failed)::BIGINT AS failed,
       sum(runs)::BIGINT AS runs,
       arg_max(error, (error_ts, error)) AS error,
       max(error_ts) AS error_ts
FROM (SELECT * FROM tier_source_runs UNION ALL BY NAME SELECT * FROM source_runs_rest)
GROUP BY host, source
