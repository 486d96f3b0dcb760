-- metric_norm from the stored tier (finished host-days) and from raw samples (the
-- rest). Rows are per host, timestamp and metric: each comes whole from one side.
-- A view: the stored files are read where the rollups and rules use them, not
-- held in memory for the whole analysis (a month of them is most of the budget).
CREATE OR REPLACE VIEW metric_norm AS
SELECT * FROM tier_metric_norm
UNION ALL BY NAME
SELECT * FROM metric_norm_rest
