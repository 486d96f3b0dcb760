-- gpu_buckets from the stored tier (finished host-days) and from raw samples
-- (the rest). Buckets never cross midnight (the width divides a day), so each
-- bucket comes whole from one side.
-- A view: the stored files are read where the rollups and rules use them, not
-- held in memory for the whole analysis (a month of them is most of the budget).
CREATE OR REPLACE VIEW gpu_buckets AS
SELECT * FROM tier_gpu_buckets
UNION ALL BY NAME
SELECT * FROM gpu_buckets_rest
