-- KV-cache usage per host for the charts: at most $max_points points. A host with more
-- readings than that has its span cut into $max_points equal slices of time, each giving
-- its first time and highest usage (a slice with no reading gives none, so a gap in the
-- data stays a gap); one with fewer keeps every reading. One row per host, both series
-- as lists in time order. Two hash passes, no sort of the readings.
WITH span AS (
    SELECT host, count(*) AS n, epoch(min(ts)) AS t0,
           (epoch(max(ts)) - epoch(min(ts))) / $max_points AS w
    FROM kv_usage
    GROUP BY host
), points AS (
    SELECT k.host, CAST(epoch(min(k.ts)) AS DOUBLE) AS t, max(k.kv_usage) AS v
    FROM kv_usage k JOIN span s USING (host)
    GROUP BY k.host,
             CASE WHEN s.n <= $max_points THEN epoch(k.ts)
                  ELSE least(floor((epoch(k.ts) - s.t0) / s.w), $max_points - 1) END
)
SELECT host, list(t ORDER BY t), list(v ORDER BY t)
FROM points
GROUP BY host
ORDER BY host
