-- proc_bins from the stored tier (finished host-days) and from raw samples (the
-- rest). Bins never cross midnight (the width divides a day), so each comes whole
-- from one side.
-- A view: the stored files are read where the rollups and rules use them, not
-- held in memory for the whole analysis (a month of them is most of the budget).
CREATE OR REPLACE VIEW proc_bins AS
SELECT * FROM tier_proc_bins
UNION ALL BY NAME
SELECT * FROM proc_bins_rest
