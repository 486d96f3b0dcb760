-- Server log lines shown as chart events: the last $max_events of each host and
-- signature, for the signatures in $signatures (per signature, so that one that repeats
-- - OOMs every few minutes - leaves the others their place), in time order (lines of one
-- read instant and offset in other files: by text, then signature, the only columns shown).
SELECT host, ts, signature, text FROM (
    SELECT *, row_number() OVER (PARTITION BY host, signature ORDER BY ts DESC, "offset" DESC, text DESC) AS r
    FROM log_lines
    WHERE list_contains($signatures, signature))
WHERE r <= $max_events
ORDER BY host, ts, "offset", text, signature
