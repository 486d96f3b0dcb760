-- idle_segments from the stored tier (host-days it covers, listed in idle_cover)
-- and from this run (the rest: 03_idle_windows.sql leaves out covered host-days).
CREATE OR REPLACE VIEW idle_segments AS
SELECT * FROM tier_idle_segments
UNION ALL BY NAME
SELECT * FROM idle_segments_rest
