-- Allocator-probe floors per process and device, whole, in time order (series.py keeps
-- every ceil(n / max_points)-th bin).
SELECT host, pid, device, any_value(gpu_index), any_value(role),
       list(epoch(b) ORDER BY b), list(alloc_floor ORDER BY b),
       list(reserved_floor ORDER BY b), list(nvml_floor ORDER BY b)
FROM alloc_bins
GROUP BY host, pid, device
ORDER BY host, pid, device
