-- gpu_buckets from the stored tier (finished host-days) and from raw samples
-- (the rest). Buckets never cross midnight (the width divides a day), so each
-- bucket comes whole from one side.
CREATE OR REPLACE TABLE gpu_buckets AS
SELECT * FROM tier_gpu_buckets
UNION ALL BY NAME
SELECT * FROM gpu_buckets_rest
