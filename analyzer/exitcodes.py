"""Exit codes of ``leakreport`` (DESIGN §6)."""

OK = 0  # nothing at or above --fail-on
FINDINGS = 1  # findings at or above --fail-on
ERROR = 2  # usage, bucket or pack error
