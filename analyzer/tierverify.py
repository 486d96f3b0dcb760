"""``leakreport rollup --verify``: every row of the stored rollup tier decoded, and each
file whose rows cannot be read deleted, so that the rollup that follows derives its
host-days again from their raw samples.

A tier file's footer is checked whenever it is listed; its rows are read only by an
analysis, which leaves a damaged file out and names it (:mod:`analyzer.rowcheck`) but
never writes. Without this step the file stays until someone deletes it, and every
analysis is incomplete meanwhile. Its cost is a read of the whole tier (on S3, a download
of it): 0.33-0.37 s for the 8 week files (100 MB) of a 125-host week, in the page cache;
more from disk or S3. So it is a flag, for a weekly cron
or for when an analysis names a damaged tier file, not part of every rollup.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable

from analyzer import rowcheck, tier
from collector import layout
from collector.store import remove, root_of


def repair(bucket: str, progress: Callable[[str], None] | None = None) -> list[str]:
    """Delete each stored tier file (day or week) whose rows cannot all be decoded; one
    line per file deleted, naming it and why."""
    from analyzer.bucket import _shown, check_bucket
    from analyzer.staging import stage

    fs = check_bucket(bucket)
    root = root_of(bucket, fs)
    paths = [e.path for t in tier.STORED for e in layout.list_entries(root, t, fs)]
    if progress:
        progress(f"verify: decoding the rows of {len(paths)} stored tier files")
    with tempfile.TemporaryDirectory(prefix="leakreport-verify-") as folder:
        local = stage(fs, paths, folder) if fs is not None else paths
        bad = rowcheck.unreadable(local, progress)
        origin = dict(zip(local, paths, strict=True))
    out = []
    for path, why in sorted((origin[p], why) for p, why in bad.items()):
        remove(path, fs)
        out.append(
            f"{_shown(root, path, fs)}: {why}; a file of the stored rollup tier: deleted, "
            "its host-days are derived again"
        )
    return out
