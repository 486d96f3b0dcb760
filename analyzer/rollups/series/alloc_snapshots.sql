-- PyTorch memory snapshots the allocator probe wrote, shown as events.
SELECT host, ts, pid, path FROM allocator_snapshots ORDER BY host, ts
