-- gpu_buckets from the stored tier (finished host-days) and from raw samples
-- (the rest). Buckets never cross midnight (the width divides a day), so each
-- bucket comes whole from one side. tier_rows: the tier table of the analysis's
-- width (tier_gpu_buckets per minute, tier_gpu_buckets_coarse per five minutes);
-- every file here reads the one chosen (analyzer/tier.py) under that name.
CREATE OR REPLACE TABLE gpu_buckets AS
SELECT * FROM tier_rows
UNION ALL BY NAME
SELECT * FROM gpu_buckets_rest
