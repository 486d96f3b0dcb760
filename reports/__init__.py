"""HTML reports built from a findings document (never from the bucket)."""
