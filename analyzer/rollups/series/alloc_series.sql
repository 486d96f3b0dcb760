-- Allocator-probe floors per process and device, whole, in time order (series.py keeps
-- every ceil(n / max_points)-th bin); a reused PID's processes apart. A process whose bins
-- name two GPUs or roles: the least.
SELECT host, pid, device, min(gpu_index), min(role),
       list(epoch(b) ORDER BY b), list(alloc_floor ORDER BY b),
       list(reserved_floor ORDER BY b), list(nvml_floor ORDER BY b)
FROM alloc_bins
GROUP BY host, pid, process_start, device
ORDER BY host, pid, process_start, device
