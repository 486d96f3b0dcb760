-- Allocator probe records dropped while its spool was full (each count rides on the next
-- record the probe could write), per host: a hole in the allocator's series. Probes before
-- the count went on one record wrote it on every device's record of that sample: one per
-- process and time.
SELECT host, sum(n) AS n, count(DISTINCT (pid_ns, pid)) AS procs
FROM (SELECT host, pid_ns, pid, ts, max(dropped) AS n
      FROM allocator_samples
      WHERE dropped > 0
      GROUP BY host, pid_ns, pid, ts)
GROUP BY host
ORDER BY host
