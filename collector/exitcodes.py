"""Exit codes of ``leakcollect`` (DESIGN §6)."""

OK = 0  # every source written
PARTIAL = 1  # some sources failed (recorded in collector_runs)
NOTHING = 2  # nothing written (usage error, lock held, bucket unwritable)
