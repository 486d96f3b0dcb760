-- Per process and GPU, in bins of $proc_bin_s: what NVML and /proc said. The one
-- pass over gpu_processes: lifetimes and every per-process rule read this. A PID
-- comes back (pid_max, restarts): process_start (NULL where the source has none,
-- e.g. nvidia-smi CSV) tells its lifetimes apart.
CREATE OR REPLACE TABLE proc_bins AS
SELECT host, gpu_index, pid, process_start,
       CAST(floor(epoch(ts) / $proc_bin_s) AS BIGINT) AS pb,
       min(ts) AS first_ts, max(ts) AS last_ts, count(*) AS samples,
       min(used_gpu_memory_bytes) AS used_min, avg(used_gpu_memory_bytes) AS used_avg,
       max(used_gpu_memory_bytes) AS used_max, avg(vm_rss_bytes) AS rss_avg
FROM gpu_processes
GROUP BY ALL;

-- Where a server started, from its log: start-up and ready lines (SGLang's
-- ServerArgs dump and "fired up"; vLLM's version / engine-config lines and
-- "Application startup complete"; uvicorn's "Started server process") and the
-- first line of every new "pid=N" prefix (vLLM's process tags).
CREATE OR REPLACE TABLE log_starts AS
SELECT host, ts FROM log_lines
WHERE regexp_matches(text, 'ServerArgs\(|API server version|LLM engine \(v\d|Started server process|fired up and ready|Application startup complete|Uvicorn running on')
UNION ALL
SELECT host, min(ts) FROM (
    SELECT host, ts, regexp_extract(text, '^\((?:APIServer|EngineCore\w*) pid=(\d+)\)', 1) AS pid
    FROM log_lines
) WHERE pid <> '' GROUP BY host, pid;

-- Server lifetimes per GPU. From the process table where the host has one;
-- else inferred: boundaries at start-up lines of the server log and at resets
-- of device memory (a drop of at least $reset_min_drop_mib MiB and
-- $reset_drop_fraction of the card within one bucket: the server exited, or
-- came back at its post-load level), boundaries closer than $lifetime_merge_s
-- merged; a new Kubernetes pod on the GPU starts one too. lifetime_source says
-- which: process table / server log / memory reset / pod change.
-- A process-table lifetime is one (pid, process_start): a reused PID is a new
-- server. A bin without a start, of a PID with known ones, belongs to the one
-- started last before it (else to its first). Of a PID whose start is never
-- known, a silence of more than $lifetime_merge_s between its samples starts a
-- new lifetime. `lifetime` is the id, unique per GPU: process-table lifetimes
-- get 1, 2, ... in order of first sample; inferred ones -1, -2, ... (pid NULL:
-- they are not processes).
CREATE OR REPLACE TABLE gpu_lifetimes AS
WITH per_start AS (
    SELECT host, gpu_index, pid, process_start, min(first_ts) AS first_ts, max(last_ts) AS last_ts,
           max(used_max) AS used_max
    FROM proc_bins
    WHERE gpu_index IS NOT NULL AND process_start IS NOT NULL
    GROUP BY ALL
),
unknown AS (  -- bins whose start is not known
    SELECT u.host, u.gpu_index, u.pid, u.pb, u.first_ts, u.last_ts, u.used_max,
           coalesce(s.process_start,
                    (SELECT min(f.process_start) FROM per_start f
                      WHERE f.host = u.host AND f.gpu_index = u.gpu_index AND f.pid = u.pid)) AS process_start
    FROM (SELECT * FROM proc_bins WHERE gpu_index IS NOT NULL AND process_start IS NULL) u
    ASOF LEFT JOIN per_start s
      ON s.host = u.host AND s.gpu_index = u.gpu_index AND s.pid = u.pid AND s.process_start <= u.first_ts
),
gaps AS (
    SELECT *, sum(CASE WHEN gap IS NULL OR gap > $lifetime_merge_s THEN 1 ELSE 0 END)
                  OVER (PARTITION BY host, gpu_index, pid ORDER BY pb
                        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS k
    FROM (SELECT *, epoch(first_ts) - epoch(lag(last_ts) OVER (PARTITION BY host, gpu_index, pid ORDER BY pb))
                        AS gap
          FROM unknown WHERE process_start IS NULL)
),
proc AS (
    SELECT host, gpu_index,
           row_number() OVER (PARTITION BY host, gpu_index ORDER BY min(first_ts), pid, process_start, k)
               AS lifetime,
           pid, process_start, min(first_ts) AS first_ts, max(last_ts) AS last_ts,
           max(used_max) AS max_used, 'process table' AS lifetime_source
    FROM (SELECT host, gpu_index, pid, process_start, NULL AS k, first_ts, last_ts, used_max FROM per_start
          UNION ALL
          SELECT host, gpu_index, pid, process_start, NULL, first_ts, last_ts, used_max FROM unknown
          WHERE process_start IS NOT NULL
          UNION ALL
          SELECT host, gpu_index, pid, NULL, k, first_ts, last_ts, used_max FROM gaps)
    GROUP BY host, gpu_index, pid, process_start, k
),
bare AS (  -- GPUs of hosts without a process table
    SELECT host, gpu_index, first_ts, last_ts FROM gpu_info g
    WHERE NOT EXISTS (SELECT 1 FROM proc p WHERE p.host = g.host)
),
resets AS (
    SELECT host, gpu_index, b AS ts
    FROM (SELECT host, gpu_index, b, used_min, total,
                 lag(used_max) OVER (PARTITION BY host, gpu_index ORDER BY bi) AS prev_max
          FROM gpu_buckets
          WHERE host IN (SELECT host FROM bare))
    WHERE prev_max - used_min >= greatest($reset_min_drop_mib * 1048576.0,
                                          $reset_drop_fraction * coalesce(total, 0))
),
pod_starts AS (  -- a new Kubernetes pod on the GPU is a new server, memory continuous or not
    SELECT host, gpu_index, min(ts) AS ts FROM gpu_pod_samples
    WHERE pod IS NOT NULL AND host IN (SELECT host FROM bare)
    GROUP BY host, gpu_index, namespace, pod
),
cand AS (
    SELECT b.host, b.gpu_index, s.ts, 1 AS from_log FROM bare b JOIN log_starts s USING (host)
    WHERE s.ts > b.first_ts AND s.ts <= b.last_ts
    UNION ALL
    SELECT host, gpu_index, ts, 0 FROM resets
    UNION ALL
    SELECT b.host, b.gpu_index, p.ts, 2 FROM bare b JOIN pod_starts p USING (host, gpu_index)
    WHERE p.ts > b.first_ts AND p.ts <= b.last_ts
),
grouped AS (
    SELECT *, sum(CASE WHEN gap IS NULL OR gap > $lifetime_merge_s THEN 1 ELSE 0 END)
                  OVER (PARTITION BY host, gpu_index ORDER BY ts) AS k
    FROM (SELECT *, epoch(ts) - epoch(lag(ts) OVER (PARTITION BY host, gpu_index ORDER BY ts)) AS gap
          FROM cand)
),
bounds AS (
    SELECT host, gpu_index, k, min(ts) AS first_ts, max(from_log) AS from_log
    FROM grouped GROUP BY ALL
    UNION ALL  -- the lifetime already running when the data starts
    SELECT host, gpu_index, 0, first_ts,
           CASE WHEN EXISTS (SELECT 1 FROM log_starts s WHERE s.host = bare.host) THEN 1 ELSE 0 END
    FROM bare
),
spans AS (
    SELECT b.host, b.gpu_index, -(b.k + 1) AS lifetime, b.first_ts,
           coalesce(lead(b.first_ts) OVER (PARTITION BY b.host, b.gpu_index ORDER BY b.k), g.last_ts) AS last_ts,
           CASE b.from_log WHEN 2 THEN 'pod change' WHEN 1 THEN 'server log' ELSE 'memory reset' END AS lifetime_source
    FROM bounds b JOIN bare g USING (host, gpu_index)
)
SELECT host, gpu_index, lifetime, pid, process_start, first_ts, last_ts, max_used, lifetime_source
FROM proc
UNION ALL
SELECT s.host, s.gpu_index, s.lifetime, NULL, NULL, s.first_ts, s.last_ts,
       (SELECT max(x.used_max) FROM gpu_buckets x
         WHERE x.host = s.host AND x.gpu_index = s.gpu_index AND x.b >= s.first_ts AND x.b < s.last_ts),
       s.lifetime_source
FROM spans s;
