-- The idle windows drawn under each GPU's series: start, end (epoch seconds), baseline.
SELECT host, gpu_index, epoch(start), epoch("end"), baseline
FROM idle_windows
ORDER BY host, gpu_index, start
