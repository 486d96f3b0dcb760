"""The ``leakcollect import prometheus`` command (registered in collector/cli.py)."""

from __future__ import annotations

import datetime as dt
import re
import sys

import click

from collector import exitcodes

_DUR = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$")
_SCALE = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def duration(text: str, what: str) -> float:
    m = _DUR.match(text.strip())
    if not m:
        raise click.BadParameter(f"{what} {text!r}: expected a duration like 15s, 1m or 30")
    v = float(m.group(1)) * _SCALE[m.group(2)]
    if v <= 0:
        raise click.BadParameter(f"{what} {text!r}: must be more than zero")
    return v


def moment(text: str, what: str) -> float:
    try:
        t = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{what} {text!r}: expected an ISO time, e.g. 2026-11-23 or 2026-11-23T06:00:00Z"
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.timestamp()


def _headers(raw: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for h in raw:
        name, sep, value = h.partition(":")
        if (
            not sep
            or not name.strip()
            or not re.match(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", name.strip())
        ):
            raise click.BadParameter(f"--header {h!r}: expected 'Name: value'")
        out[name.strip()] = value.strip()
    return out


def _label_names(raw: tuple[str, ...]) -> tuple[str, ...]:
    names = tuple(n.strip() for n in raw if n.strip())
    for n in names:
        if not re.match(r"^[a-zA-Z_][a-zA-Z0-9_]*$", n):
            raise click.BadParameter(f"--replica-label {n!r}: not a Prometheus label name")
    return names


@click.command("prometheus")
@click.option("--url", required=True, help="The Prometheus server, e.g. http://prometheus:9090.")
@click.option("--start", required=True, help="ISO time (UTC unless it says otherwise).")
@click.option("--end", required=True, help="ISO time; a date alone means its midnight.")
@click.option("--bucket", required=True, help="Bucket folder (or s3://...) to write into.")
@click.option("--step", default="15s", show_default=True, help="Resolution: your scrape interval.")
@click.option(
    "--match", default="", help="Extra label matchers for every series, e.g. '{cluster=\"a\"}'."
)
@click.option(
    "--header", "headers", multiple=True, help="'Name: value' sent with every request (repeatable)."
)
@click.option("--host", "hosts", multiple=True, help="Only these hosts (repeatable).")
@click.option(
    "--mapping",
    type=click.Path(exists=True, dir_okay=False),
    help="TOML that extends the built-in metric mapping.",
)
@click.option(
    "--replica-label",
    "replica_labels",
    multiple=True,
    help="A label that tells an HA pair's replicas apart, dropped so each series is read "
    "once (repeatable; replaces the default replica, prometheus_replica, __replica__; "
    "--replica-label '' reads replicas as separate series).",
)
@click.option(
    "--lookback", help="How long a sample stays current [default: 4 steps, at least 60s]."
)
@click.option(
    "--timeout",
    default=60.0,
    show_default=True,
    type=click.FloatRange(1, 3600),
    help="Seconds per request.",
)
@click.option(
    "--retries",
    default=4,
    show_default=True,
    type=click.IntRange(0, 20),
    help="Tries after the first, with backoff.",
)
@click.option(
    "--max-series",
    default=256,
    show_default=True,
    type=click.IntRange(1),
    help="Series per host batch.",
)
@click.option(
    "--points",
    default=400_000,
    show_default=True,
    type=click.IntRange(10_000),
    help="Points per chunk, all series of a host batch together (bounds memory).",
)
@click.option(
    "--concurrency",
    default=4,
    show_default=True,
    type=click.IntRange(1, 32),
    help="Requests in flight (the next chunk is fetched while one is written).",
)
def prometheus(
    url: str,
    start: str,
    end: str,
    bucket: str,
    step: str,
    match: str,
    headers: tuple[str, ...],
    hosts: tuple[str, ...],
    mapping: str | None,
    replica_labels: tuple[str, ...],
    lookback: str | None,
    timeout: float,
    retries: int,
    max_series: int,
    points: int,
    concurrency: int,
) -> None:
    """dcgm-exporter and SGLang/vLLM series from a Prometheus server into the bucket.

    Writes gpu_samples (DCGM_FI_DEV_FB_USED/FREE/RESERVED, GPU_UTIL; host from
    Hostname, else the instance without its port; GPU from gpu/UUID/modelName),
    metric_samples (the engines' series as scraped, and process_resident_memory_bytes
    of the servers) and one collector_runs row per host, partitioned by date and
    host like the collector's own files. Then run `leakreport analyze BUCKET`.

    An HA pair (two Prometheus replicas, or a Thanos/Mimir querier with dedup off)
    holds each series twice, differing in a replica label: those labels are dropped
    and one value kept per series and step (see --replica-label). A window that
    overlaps an earlier import of the same hosts from the same server is refused.

    Exit codes: 0 everything imported; 1 imported with parts skipped (named on
    stderr: the server's sample limit); 2 nothing imported (unreachable, 401/403,
    timeout, not a Prometheus, no matching series, bad options).

    \b
    Example:
      leakcollect import prometheus --url http://prometheus:9090 \\
          --start 2026-11-23 --end 2026-11-30 --bucket /data/traces --match '{cluster="a"}'
    """
    from collector.promapi import PromClient, PromError
    from collector.promimport import Options, run_import
    from collector.promplan import MappingError, load_mapping

    def die(msg: str) -> None:
        click.echo(f"leakcollect import prometheus: {msg}", err=True)
        sys.exit(exitcodes.NOTHING)

    try:
        opts = Options(
            start=moment(start, "--start"),
            end=moment(end, "--end"),
            step=duration(step, "--step"),
            match=match,
            hosts=set(hosts) or None,
            lookback=duration(lookback, "--lookback") if lookback else None,
            max_series=max_series,
            points=points,
            concurrency=concurrency,
        )
        if replica_labels:
            opts.replica_labels = _label_names(replica_labels)
        if opts.end <= opts.start:
            raise click.BadParameter(f"--end {end} is not after --start {start}")
        m = load_mapping(mapping)
        client = PromClient(url, _headers(headers), timeout=timeout, retries=retries)
    except (click.BadParameter, MappingError, PromError) as e:
        die(str(e.message if isinstance(e, click.BadParameter) else e))
        return
    try:
        stats = run_import(client, m, opts, bucket, say=lambda s: click.echo(s, err=True))
    except PromError as e:
        die(str(e))
        return
    except ValueError as e:
        die(str(e))
        return
    except OSError as e:
        die(f"cannot write to {bucket}: {e}")
        return
    rate = stats.samples / stats.seconds if stats.seconds else 0.0
    rows = ", ".join(f"{n:,} {t}" for t, n in sorted(stats.rows.items())) or "no rows"
    click.echo(
        f"imported {stats.hosts} hosts: {rows} in {stats.files} files; {stats.samples:,} samples "
        f"in {stats.seconds:.1f}s ({rate:,.0f}/s, {client.requests} requests)",
        err=True,
    )
    for s in stats.skipped:
        click.echo(f"skipped: {s}", err=True)
    if not stats.rows:
        die("the series matched but held no samples in the window")
    sys.exit(exitcodes.PARTIAL if stats.skipped else exitcodes.OK)


if __name__ == "__main__":
    prometheus(prog_name="leakcollect import prometheus")
