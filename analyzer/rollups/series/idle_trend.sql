-- Idle-baseline trend lines (three or more idle windows) drawn over each GPU's series.
SELECT host, gpu_index, t0, t1, intercept_bytes, slope_bps
FROM idle_trend
WHERE n >= 3
ORDER BY host, gpu_index, t0
