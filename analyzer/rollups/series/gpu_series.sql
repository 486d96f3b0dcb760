-- Device memory per GPU for the charts: at most $max_points points, each one a chunk's
-- first bucket time, highest used_max and lowest used_min, so spikes survive. A chunk
-- is a run of `step` buckets from the GPU's first sample: fine chunks of about
-- 2 x $max_points over its span (fine_step buckets), taken ceil(fine chunks /
-- $max_points) at a time. A chunk with no bucket gives no point, so a gap in the data
-- stays a gap. One pass over the buckets; one row per GPU, in (host, gpu_index) order,
-- the three series as lists in time order. The GPUs are numbered (gid) so that the pass
-- groups and sorts on integers.
WITH fine AS (
    SELECT i.host, i.gpu_index, row_number() OVER (ORDER BY i.host, i.gpu_index) AS gid,
           p.first_bi AS bi0, p.last_bi AS bi1,
           CAST(greatest(1, ceil((epoch(i.last_ts) - epoch(i.first_ts))
                                 / s.bucket_s / (2 * $max_points))) AS BIGINT) AS fine_step
    FROM gpu_info i JOIN gpu_span p USING (host, gpu_index), rollup_settings s
), span AS (
    SELECT *, fine_step * CAST(ceil(((bi1 - bi0) // fine_step + 1) / $max_points) AS BIGINT) AS step
    FROM fine
), narrow AS (
    SELECT span.gid, CAST(epoch(min(g.b)) AS DOUBLE) AS t,
           max(g.used_max) AS used_max, min(g.used_min) AS used_min
    FROM gpu_buckets g JOIN span USING (host, gpu_index)
    GROUP BY span.gid, (g.bi - span.bi0) // span.step
), lists AS (
    SELECT gid, list(t ORDER BY t) AS t, list(used_max ORDER BY t) AS used_max,
           list(used_min ORDER BY t) AS used_min
    FROM narrow
    GROUP BY gid
)
SELECT span.host, span.gpu_index, lists.t, lists.used_max, lists.used_min
FROM lists JOIN span USING (gid)
ORDER BY gid
