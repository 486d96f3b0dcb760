"""HTML reports built from a findings document (never from the bucket)."""

TOP = 50  # rows of each table of the fleet page by default; the rest are counted
