-- server_parts from the stored tier (finished host-days) and from raw process rows (the
-- rest): each host-day holds its own latest value and key of every field, and
-- server_info takes the latest of those. A view: read once, where server_info is made.
CREATE OR REPLACE VIEW server_parts AS
SELECT * FROM tier_server_parts
UNION ALL BY NAME
SELECT * FROM server_parts_rest
