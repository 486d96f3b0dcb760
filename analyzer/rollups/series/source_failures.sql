-- Collector sources that failed, per host: failed and total runs, the last error
-- (source_runs, 07_source_runs.sql).
SELECT host, source, failed AS n, runs AS total, error AS err
FROM source_runs
WHERE failed > 0
ORDER BY host, source
