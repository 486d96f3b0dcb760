-- KV-cache usage per host: the chunks of gpu_series.sql's second pass (row i of a
-- host's n goes to chunk i // ceil(n / $max_points)), each its first time and highest
-- usage; one row per host, both series as lists in time order.
SELECT host, list(t ORDER BY t), list(v ORDER BY t) FROM (
    SELECT host, CAST(epoch(min(ts)) AS DOUBLE) AS t, max(kv_usage) AS v FROM (
        SELECT host, ts, kv_usage,
               (row_number() OVER (PARTITION BY host ORDER BY ts) - 1)
               // greatest(1, CAST(ceil(count(*) OVER (PARTITION BY host) / $max_points)
                                   AS BIGINT)) AS chunk
        FROM kv_usage)
    GROUP BY host, chunk)
GROUP BY host
ORDER BY host
