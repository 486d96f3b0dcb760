-- metric_norm from the stored tier (finished host-days) and from raw samples (the
-- rest). Rows are per host, timestamp and metric: each comes whole from one side.
CREATE OR REPLACE TABLE metric_norm AS
SELECT * FROM tier_metric_norm
UNION ALL BY NAME
SELECT * FROM metric_norm_rest
