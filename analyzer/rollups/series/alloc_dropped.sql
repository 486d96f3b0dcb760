-- Allocator probe records dropped while its spool was full (each count rides on the next
-- record the probe could write), per host: a hole in the allocator's series.
SELECT host, sum(dropped) AS n, count(DISTINCT pid) AS procs
FROM allocator_samples
WHERE dropped > 0
GROUP BY host
ORDER BY host
