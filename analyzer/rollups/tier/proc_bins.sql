-- proc_bins from the stored tier (finished host-days) and from raw samples (the
-- rest). Bins never cross midnight (the width divides a day), so each comes whole
-- from one side.
CREATE OR REPLACE TABLE proc_bins AS
SELECT * FROM tier_proc_bins
UNION ALL BY NAME
SELECT * FROM proc_bins_rest
