/*---
id          = "T001"
name        = "fixture.high_memory"
title       = "Memory above a bound in at least two samples"
category    = "memory.threshold"
severity    = "warning"
requires    = ["gpu_samples"]
evidence    = ["samples", "level"]
description = "Test fixture for the mutation check."
remediation = "None: a fixture."
equivalent  = [
  {mutant = "drop WHERE `host <> 'a>=b'` @ AND host <> 'a>=b'", reason = "no case has a host named a>=b; kept to show a listed mutant is not reported"},
  {mutant = "<→<= @ WHERE no_such_line < 1", reason = "stale on purpose: no such mutant"},
]
[params]
min_mib = 100
min_samples = 2
strict = true
---*/
-- a comparison in a comment is not mutated: x >= y
SELECT host, count(*) AS samples,
       CASE WHEN max(memory_used_bytes) > 2 * $min_mib * 1048576 THEN 'high' ELSE 'raised' END AS level,
       -- a guard whose negation fails at run time: killed by an error
       CASE WHEN count(*) < 1000 THEN 0 ELSE error('too many samples: ' || count(*)) END AS guard,
       format('{} samples above the bound', count(*)) AS summary
FROM gpu_samples
WHERE memory_used_bytes >= $min_mib * 1048576
  AND utilization_gpu_pct BETWEEN 0 AND 100
  AND host <> 'a>=b' -- a comparison in a string: >=
GROUP BY host
HAVING count(*) >= $min_samples
