"""Listing a bucket beyond one local folder: the S3 prefixes worth a full listing, and
data at the bucket's top that no table of this version reads.

Part of the bucket layout (:mod:`collector.layout`, which names the folders and files);
split out so that module stays about naming. Imports pyarrow only, lazily.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from collector.layout import (
    ANY,
    MISPLACED,
    DateOk,
    HostOk,
    _bad_in_scope,
    _hidden,
    _is_trace,
    _listdir,
    _value,
    decode_host,
    parse_day,
)


def s3_prefixes(
    fs: Any, base: str, date_ok: DateOk, host_ok: HostOk, bad: list[tuple[str, str]]
) -> list[str]:
    """The prefixes under a table to list in full: the table's own where most of its days
    are in scope, else its ``date=`` folders in scope, or their ``host=`` folders in scope
    where few hosts are. One delimiter listing a level decides, so a few days of a long
    history cost a few requests, not the whole table's keys (1,000 a request). A host
    filter alone lists the table at once: a listing per day would cost more. What those
    listings show outside the layout goes into ``bad``, as a full listing would find it."""
    if date_ok is ANY:
        return [base]
    odd: list[tuple[str, str]] = []  # what a full listing of a prefix kept finds itself
    days = [(parse_day(v), d) for v, d in _s3_dirs(fs, base, "date", odd)]
    keep = [d for day, d in days if day is not None and date_ok(day)]
    odd += [(d, MISPLACED) for day, d in days if day is None]
    if 2 * len(keep) > len(days):
        return [base]
    bad += odd
    if host_ok is ANY:
        return keep
    out: list[str] = []
    for d in keep:
        odd = []
        hosts = _s3_dirs(fs, d, "host", odd)
        mine = [h for v, h in hosts if host_ok(decode_host(v))]
        whole = 2 * len(mine) > len(hosts)
        out += [d] if whole else mine
        bad += [] if whole else odd
    return out


def _s3_dirs(fs: Any, prefix: str, key: str, bad: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(value, path) of the ``key=value`` folders right under ``prefix``; any other folder,
    or a Parquet object, there goes into ``bad`` (hidden names are passed over)."""
    from pyarrow.fs import FileSelector, FileType

    sel = FileSelector(prefix, recursive=False, allow_not_found=True)
    out = []
    for info in fs.get_file_info(sel):
        v = _value(info.base_name, key) if info.type == FileType.Directory else None
        if v is not None:
            out.append((v, info.path))
        elif _hidden(info.base_name):
            continue
        elif _is_trace(info.base_name) or (
            info.type == FileType.Directory and _s3_holds_data(fs, info.path)
        ):
            bad.append((info.path, MISPLACED))
    return out


def _s3_holds_data(fs: Any, prefix: str) -> bool:
    """Is there a Parquet object under ``prefix`` (hidden names passed over), as
    :func:`_holds_data` asks of a folder? One listing of it: such folders are rare."""
    from pyarrow.fs import FileSelector, FileType

    sel = FileSelector(prefix, recursive=True, allow_not_found=True)
    return any(
        i.type == FileType.File
        and _is_trace(i.base_name)
        and not any(map(_hidden, i.path[len(prefix) + 1 :].split("/")))
        for i in fs.get_file_info(sel)
    )


FOREIGN = (
    "a table this version does not read (a misspelt folder, or a newer collector's table): "
    "its Parquet data is not checked"
)


def foreign_tables(
    root: str,
    known: Callable[[str], bool],
    fs: Any = None,
    date_ok: DateOk = ANY,
    host_ok: HostOk = ANY,
) -> list[str]:
    """Folders at the top of the bucket that ``known`` does not name, holding Parquet data
    in scope (as far as ``date=``/``host=`` folders inside them tell): data no view reads,
    which the analysis names rather than passing over. One listing of the top, and one of
    each such folder (rare). A Parquet file loose at the top is named too."""
    if fs is not None:
        from pyarrow.fs import FileSelector, FileType

        top = fs.get_file_info(FileSelector(root.strip("/"), allow_not_found=True))
        dirs = [i.path for i in top if i.type == FileType.Directory]
        out = [i.path for i in top if i.type == FileType.File and _is_trace(i.base_name)]
    else:
        dirs = [os.path.join(root, n) for n in _listdir(root)]
        out = [d for d in dirs if not os.path.isdir(d) and _is_trace(os.path.basename(d))]
        dirs = [d for d in dirs if os.path.isdir(d)]
    out = [f for f in out if not _hidden(f.rsplit("/", 1)[-1])]  # loose at the top
    for d in dirs:
        name = d.rstrip("/").rsplit("/", 1)[-1]
        if _hidden(name) or known(name):
            continue
        if fs is not None:
            from pyarrow.fs import FileSelector, FileType

            infos = fs.get_file_info(FileSelector(d, recursive=True, allow_not_found=True))
            rels = [i.path[len(d) + 1 :] for i in infos if i.type == FileType.File]
        else:
            rels = []
            for w, sub, files in os.walk(d):
                sub[:] = [x for x in sub if not _hidden(x)]
                rels += [os.path.relpath(os.path.join(w, f), d) for f in files]
        if any(
            _is_trace(r.rsplit("/", 1)[-1])
            and not any(map(_hidden, r.replace(os.sep, "/").split("/")))
            and _bad_in_scope(r, date_ok, host_ok)
            for r in rels
        ):
            out.append(d)
    return sorted(out)
