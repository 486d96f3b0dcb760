-- Server log lines shown as chart events: the last $max_events of each host whose
-- signature is one of $signatures, in time order (lines of one read instant and offset in
-- other files: by text, then signature, the only columns shown).
SELECT host, ts, signature, text FROM (
    SELECT *, row_number() OVER (PARTITION BY host ORDER BY ts DESC, "offset" DESC, text DESC, signature DESC) AS r
    FROM log_lines
    WHERE list_contains($signatures, signature))
WHERE r <= $max_events
ORDER BY host, ts, "offset", text, signature
