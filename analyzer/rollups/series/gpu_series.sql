-- Device memory per GPU for the charts: at most $max_points points, each one a chunk's
-- first bucket time, highest used_max and lowest used_min, so spikes survive. A chunk
-- is a run of `step` buckets. Over a short span, from the GPU's first sample: fine
-- chunks of about 2 x $max_points over its span (fine_step buckets), taken ceil(fine
-- chunks / $max_points) at a time. Where that step would be a block of gpu_blocks
-- (chart_block buckets) or more, a chunk is whole blocks instead: the fewest that keep
-- to $max_points chunks, from the first sample's block, read from gpu_blocks (a fifth of
-- the rows). A chunk with no bucket gives no point, so a gap in the data stays a gap. One
-- pass over the buckets or the blocks; one row per GPU, in (host, gpu_index) order, the
-- three series as lists in time order. The GPUs are numbered (gid) so that the pass
-- groups and sorts on integers.
WITH fine AS (
    SELECT i.host, i.gpu_index, row_number() OVER (ORDER BY i.host, i.gpu_index) AS gid,
           p.first_bi, p.last_bi, s.chart_block AS k,
           CAST(greatest(1, ceil((epoch(i.last_ts) - epoch(i.first_ts))
                                 / s.bucket_s / (2 * $max_points))) AS BIGINT) AS fine_step
    FROM gpu_info i JOIN gpu_span p USING (host, gpu_index), rollup_settings s
), steps AS (
    SELECT *, fine_chunks_step >= k AS in_blocks, first_bi // k * k AS block0
    FROM (SELECT *, fine_step * CAST(ceil(((last_bi - first_bi) // fine_step + 1) / $max_points) AS BIGINT)
                        AS fine_chunks_step
          FROM fine)
), span AS (
    SELECT *, CASE WHEN in_blocks THEN block0 ELSE first_bi END AS bi0,
           CASE WHEN in_blocks
                THEN k * CAST(ceil((last_bi - block0 + 1) / (k * $max_points)) AS BIGINT)
                ELSE fine_chunks_step END AS step
    FROM steps
), narrow AS (
    SELECT span.gid, min(g.bi) AS bi, max(g.used_max) AS used_max, min(g.used_min) AS used_min
    FROM gpu_blocks g JOIN span USING (host, gpu_index)
    WHERE span.in_blocks
    GROUP BY span.gid, (g.bi - span.bi0) // span.step
    UNION ALL
    SELECT span.gid, min(g.bi) AS bi, max(g.used_max) AS used_max, min(g.used_min) AS used_min
    FROM gpu_buckets g JOIN span USING (host, gpu_index)
    WHERE NOT span.in_blocks
    GROUP BY span.gid, (g.bi - span.bi0) // span.step
), lists AS (
    SELECT gid, list(t ORDER BY t) AS t, list(used_max ORDER BY t) AS used_max,
           list(used_min ORDER BY t) AS used_min
    FROM (SELECT n.*, CAST(epoch(to_timestamp(n.bi * s.bucket_s)) AS DOUBLE) AS t
          FROM narrow n, rollup_settings s)
    GROUP BY gid
)
SELECT span.host, span.gpu_index, lists.t, lists.used_max, lists.used_min
FROM lists JOIN span USING (gid)
ORDER BY gid
