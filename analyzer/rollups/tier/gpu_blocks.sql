-- gpu_blocks from the stored tier (finished host-days) and from this run's gpu_buckets
-- of the rest. The blocks of the charts group whole buckets and take their peaks and
-- troughs (and first bucket): a block that met both sides would give two rows, which
-- the charts group alike. A view: read where the charts use it.
CREATE OR REPLACE VIEW gpu_blocks AS
SELECT * FROM tier_gpu_blocks
UNION ALL BY NAME
SELECT * FROM gpu_blocks_rest
