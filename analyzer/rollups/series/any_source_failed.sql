-- Whether any collector source failed at all: a filter the Parquet reader can push
-- down, so a clean bucket skips source_failures.sql's full count.
SELECT count(*) FROM (SELECT 1 FROM collector_runs WHERE status = 'failed' LIMIT 1)
