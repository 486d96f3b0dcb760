"""One writer at a time on a bucket folder: `leakreport compact` and `rollup`.

Two of them at once never double-count (every file is written whole and readers skip
what a newer file replaces), but they undo each other's work: both derive the same
host-days, one packs a week while the other deletes the files it reads, and the bucket
is left with doubled files. A daily cron that overran into the next one does exactly
that. The lock is ``flock`` on a file at the bucket's top: the kernel releases it when
its holder ends, however it ends, so it is never stale. An S3 bucket has no such lock:
run one maintenance job per bucket there.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
from collections.abc import Iterator

from collector.store import is_s3

LOCK = ".leakreport-writer.lock"


class BucketBusy(Exception):
    """Another compact or rollup holds the bucket."""


@contextlib.contextmanager
def held(bucket: str | os.PathLike[str], what: str) -> Iterator[None]:
    """Hold the bucket folder's writer lock for ``what`` (e.g. "leakreport rollup");
    BucketBusy naming the holder when another process has it. Nothing on S3."""
    if is_s3(bucket) or not os.path.isdir(bucket):
        yield  # not a folder: the command says what is wrong with it
        return
    path = os.path.join(bucket, LOCK)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "a process that wrote no name"
            raise BucketBusy(
                f"{path}: held by {holder}; one compact or rollup at a time on a bucket. "
                "Nothing done"
            ) from None
        f.seek(0)
        f.truncate()
        since = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        f.write(f"{what} (pid {os.getpid()}, since {since})\n")
        f.flush()
        try:
            yield
        finally:
            f.truncate(0)  # the holder's name goes with it; the lock goes when f closes
