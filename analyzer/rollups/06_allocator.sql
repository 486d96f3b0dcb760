-- The allocator probe: per process and device, the floor (minimum) of what
-- PyTorch's caching allocator holds (allocated) and has taken from the driver
-- (reserved) in fixed bins, beside NVML's figure for the same process. A
-- floor over a bin that contains idle moments is the persistent part.
-- A process is (host, pid, process_start): a PID the OS hands out again is a new
-- process. Probes older than process_start wrote none: such a sample belongs to the
-- process-table lifetime of its PID that started last before it, where there is one.
-- A view: the raw samples are read, never held (a month of them is GBs).
CREATE OR REPLACE VIEW alloc_samples AS
SELECT s.* REPLACE (coalesce(s.process_start, l.process_start) AS process_start)
FROM allocator_samples s
ASOF LEFT JOIN (SELECT DISTINCT host, pid, process_start FROM gpu_lifetimes
                WHERE process_start IS NOT NULL) l
       ON l.host = s.host AND l.pid = s.pid AND s.ts >= l.process_start;

-- Values that should be one per group (a process's GPU, its role) are taken with
-- min(), not any_value(): the pick is the same every run.
CREATE OR REPLACE TABLE alloc_devices AS
SELECT a.host, a.pid, a.process_start, a.device, min(a.gpu_uuid) AS gpu_uuid,
       coalesce(
           min(u.gpu_index),
           -- no UUID match: the process's only GPU, if NVML saw it on exactly one
           (SELECT CASE WHEN count(DISTINCT p.gpu_index) = 1 THEN min(p.gpu_index) END
              FROM gpu_lifetimes p WHERE p.host = a.host AND p.pid = a.pid
               -- the probe reads its start once, the collector at every run: a clock
               -- step in between moves one of them, never by minutes
               AND (a.process_start IS NULL OR p.process_start IS NULL
                    OR abs(epoch(p.process_start) - epoch(a.process_start)) < 60))
       ) AS gpu_index
FROM (SELECT DISTINCT host, pid, process_start, device, gpu_uuid FROM alloc_samples) a
LEFT JOIN (SELECT host, gpu_index, gpu_uuid FROM gpu_info WHERE gpu_uuid IS NOT NULL) u
       ON u.host = a.host AND u.gpu_uuid = a.gpu_uuid
GROUP BY a.host, a.pid, a.process_start, a.device;

CREATE OR REPLACE TABLE alloc_bins AS
WITH a AS (
    SELECT host, pid, process_start, device,
           to_timestamp(floor(epoch(ts) / $alloc_bin_s) * $alloc_bin_s) AS b,
           min(role) AS role,
           min(allocated_bytes) AS alloc_floor,
           max(allocated_bytes) AS alloc_peak,
           min(reserved_bytes) AS reserved_floor,
           max(reserved_bytes) AS reserved_peak,
           max(max_allocated_bytes) AS max_allocated,
           max(alloc_retries) AS alloc_retries,
           max(ooms) AS ooms,
           max(inactive_split_bytes) AS inactive_split,
           count(*) AS samples
    FROM alloc_samples
    GROUP BY host, pid, process_start, device, b
),
n AS (
    SELECT host, pid, gpu_index,
           to_timestamp(floor(epoch(first_ts) / $alloc_bin_s) * $alloc_bin_s) AS b,
           min(used_min) AS nvml_floor
    FROM proc_bins
    WHERE pid IN (SELECT pid FROM alloc_devices)
    GROUP BY ALL
)
SELECT a.*, d.gpu_index, n.nvml_floor
FROM a
JOIN alloc_devices d
  ON d.host = a.host AND d.pid = a.pid AND d.device = a.device
 AND d.process_start IS NOT DISTINCT FROM a.process_start
LEFT JOIN n ON n.host = a.host AND n.pid = a.pid AND n.gpu_index = d.gpu_index AND n.b = a.b;

-- Per process and device: medians of the floors in each quarter of its life
-- (q1..q4), so one spike or one busy bin moves nothing.
CREATE OR REPLACE TABLE alloc_trend AS
WITH q AS (
    SELECT *, epoch(b) AS t,
           ntile(4) OVER (PARTITION BY host, pid, process_start, device ORDER BY b) AS quarter,
           count(*) OVER (PARTITION BY host, pid, process_start, device) AS bins
    FROM alloc_bins
)
SELECT host, pid, process_start, device, min(gpu_index) AS gpu_index, min(role) AS role,
       min(b) AS start, max(b) + to_seconds($alloc_bin_s) AS "end", max(bins) AS bins,
       median(alloc_floor) FILTER (WHERE quarter = 1) AS a1,
       median(alloc_floor) FILTER (WHERE quarter = 2) AS a2,
       median(alloc_floor) FILTER (WHERE quarter = 3) AS a3,
       median(alloc_floor) FILTER (WHERE quarter = 4) AS a4,
       median(reserved_floor) FILTER (WHERE quarter = 1) AS r1,
       median(reserved_floor) FILTER (WHERE quarter = 2) AS r2,
       median(reserved_floor) FILTER (WHERE quarter = 3) AS r3,
       median(reserved_floor) FILTER (WHERE quarter = 4) AS r4,
       median(nvml_floor - reserved_floor) FILTER (WHERE quarter = 1) AS o1,
       median(nvml_floor - reserved_floor) FILTER (WHERE quarter = 3) AS o3,
       median(nvml_floor - reserved_floor) FILTER (WHERE quarter = 4) AS o4,
       median(nvml_floor) FILTER (WHERE quarter = 1) AS n1,
       median(nvml_floor) FILTER (WHERE quarter = 4) AS n4,
       median(t) FILTER (WHERE quarter = 1) AS t1,
       median(t) FILTER (WHERE quarter = 4) AS t4,
       max(alloc_peak) AS alloc_peak,
       max(max_allocated) AS max_allocated,
       max(alloc_retries) - min(alloc_retries) AS new_retries,
       max(ooms) - min(ooms) AS new_ooms,
       arg_max(inactive_split, b) AS inactive_split,
       arg_max(reserved_floor, b) - arg_max(alloc_floor, b) AS cached_last
FROM q
GROUP BY host, pid, process_start, device;
