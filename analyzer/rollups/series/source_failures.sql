-- Collector sources that failed, per host: failed and total runs, the last error (of two
-- at one instant, the greater text: the same every run).
SELECT host, source, count(*) FILTER (WHERE status = 'failed') AS n, count(*) AS total,
       arg_max(error, (ts, error)) FILTER (WHERE status = 'failed') AS err
FROM collector_runs
GROUP BY host, source
HAVING n > 0
ORDER BY host, source
