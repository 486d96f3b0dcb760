-- Device memory per GPU for the charts: at most $max_points points, each one a chunk's
-- first bucket time, highest used_max and lowest used_min, so spikes survive.
-- Pass 1: fixed chunks of `step` buckets from the GPU's first sample, about
-- 2 x $max_points of them over its span. Pass 2: of the n chunks that hold data, the
-- i-th (in time order, from 0) goes to chunk i // ceil(n / $max_points). One row per
-- GPU, in (host, gpu_index) order, the three series as lists in time order. The GPUs
-- are numbered (gid) so that the passes group and sort on integers.
WITH span AS (
    SELECT i.host, i.gpu_index, row_number() OVER (ORDER BY i.host, i.gpu_index) AS gid,
           CAST(floor(epoch(i.first_ts) / s.bucket_s) AS BIGINT) AS bi0,
           CAST(greatest(1, ceil((epoch(i.last_ts) - epoch(i.first_ts))
                                 / s.bucket_s / (2 * $max_points))) AS BIGINT) AS step
    FROM gpu_info i, rollup_settings s
), wide AS (
    SELECT span.gid, (g.bi - span.bi0) // span.step AS k, min(g.b) AS b,
           max(g.used_max) AS used_max, min(g.used_min) AS used_min
    FROM gpu_buckets g JOIN span USING (host, gpu_index)
    GROUP BY span.gid, k
), numbered AS (
    SELECT *, (row_number() OVER (PARTITION BY gid ORDER BY b) - 1)
              // greatest(1, CAST(ceil(count(*) OVER (PARTITION BY gid) / $max_points)
                                  AS BIGINT)) AS chunk
    FROM wide
), narrow AS (
    SELECT gid, CAST(epoch(min(b)) AS DOUBLE) AS t,
           max(used_max) AS used_max, min(used_min) AS used_min
    FROM numbered
    GROUP BY gid, chunk
), lists AS (
    SELECT gid, list(t ORDER BY t) AS t, list(used_max ORDER BY t) AS used_max,
           list(used_min ORDER BY t) AS used_min
    FROM narrow
    GROUP BY gid
)
SELECT span.host, span.gpu_index, lists.t, lists.used_max, lists.used_min
FROM lists JOIN span USING (gid)
ORDER BY gid
