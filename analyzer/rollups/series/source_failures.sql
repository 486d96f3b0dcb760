-- Collector sources that failed, per host: failed and total runs, the last error.
SELECT host, source, count(*) FILTER (WHERE status = 'failed') AS n, count(*) AS total,
       arg_max(error, ts) FILTER (WHERE status = 'failed') AS err
FROM collector_runs
GROUP BY host, source
HAVING n > 0
ORDER BY host, source
