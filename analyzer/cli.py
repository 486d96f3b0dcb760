"""``leakreport``: simulate, analyze, report. A thin click layer.

Machine output goes to stdout (or --out), progress and diagnostics to stderr.
Heavy modules are imported inside the commands that need them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from analyzer import __version__, exitcodes
from analyzer.categories import SEVERITIES

FAIL_ON = [*SEVERITIES, "never"]


def _err(msg: str) -> None:
    click.echo(msg, err=True)


def _die(msg: str, code: int = exitcodes.ERROR) -> NoReturn:
    _err(f"leakreport: {msg}")
    sys.exit(code)


def _date(ctx: click.Context, param: click.Parameter, value: str | None) -> dt.date | None:
    if value is None:
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a date (YYYY-MM-DD)") from None


def _write_out(text: str, out: str | None) -> None:
    if out is None or out == "-":
        click.echo(text, nl=not text.endswith("\n"))
        return
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    _err(f"wrote {path}")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="leakreport")
def cli() -> None:
    """Tell whether LLM inference servers leak GPU/host memory or only cache it.

    Typical use: `leakreport analyze BUCKET` over traces written by
    `leakcollect`, then `leakreport report BUCKET --out report.html`.
    Exit codes: 0 nothing at or above --fail-on, 1 findings at or above it,
    2 error (usage, bucket, pack).
    """


@cli.command()
@click.option("--scenario", default="all", show_default=True, help="Scenario name, or 'all'.")
@click.option(
    "--out", "out", required=True, type=click.Path(file_okay=False), help="Bucket folder to write."
)
@click.option(
    "--hosts", default=4, show_default=True, type=click.IntRange(1, 10_000), help="Number of hosts."
)
@click.option(
    "--hours",
    default=6.0,
    show_default=True,
    type=click.FloatRange(0.1, 24 * 31),
    help="Trace length.",
)
@click.option(
    "--seed", default=7, show_default=True, type=int, help="Random seed (output is deterministic)."
)
@click.option(
    "--labels", "labels_path", type=click.Path(dir_okay=False), help="Write expected findings here."
)
@click.option("--list", "list_only", is_flag=True, help="List the scenarios and exit.")
def simulate(
    scenario: str,
    out: str,
    hosts: int,
    hours: float,
    seed: int,
    labels_path: str | None,
    list_only: bool,
) -> None:
    """Write a simulated fleet (labelled scenarios) into a bucket."""
    from analyzer.sim.generate import simulate as run_sim
    from analyzer.sim.scenarios import SCENARIOS

    if list_only:
        for s in SCENARIOS.values():
            click.echo(f"{s.name:28} {s.description}")
        return
    try:
        plans = run_sim(
            scenario,
            out,
            hosts=hosts,
            hours=hours,
            seed=seed,
            labels_path=labels_path,
            progress=_err,
        )
    except KeyError as e:
        _die(str(e.args[0]))
    _err(f"simulated {len(plans)} hosts x {hours:g} h into {out}")


def _load_packs(pack_dirs: tuple[str, ...], no_builtin: bool = False) -> list[Any]:
    from analyzer.packs import PackError, load_packs

    try:
        packs = load_packs(list(pack_dirs), builtin=not no_builtin)
    except PackError as e:
        _die(str(e))
    for p in packs:
        for rule_err in p.errors:
            _err(f"leakreport: rule error: {rule_err}")
    return packs


def _run_analysis(
    bucket: str,
    since: dt.date | None,
    until: dt.date | None,
    hosts: tuple[str, ...],
    pack_dirs: tuple[str, ...],
    params: tuple[str, ...],
    quiet: bool = False,
    executor: str = "local",
    scheduler: str | None = None,
    workers: int = 2,
    memory_limit: str | None = None,
    batch_hosts: int = 32,
) -> Any:
    from analyzer.bucket import BucketError, Scope
    from analyzer.packs import parse_param_overrides

    packs = _load_packs(pack_dirs)
    try:
        overrides = parse_param_overrides(list(params))
    except ValueError as e:
        _die(str(e))
    known = {r.id: r for p in packs for r in p.rules}
    for rule_id, kv in overrides.items():
        if rule_id == "rollup":
            continue
        if rule_id not in known:
            _die(f"--param: no rule {rule_id!r} (see `leakreport rules list`)")
        for k in kv:
            if k not in known[rule_id].params:
                _die(
                    f"--param: rule {rule_id} has no parameter {k!r} (it has: {', '.join(known[rule_id].params)})"
                )
    scope = Scope(since, until, list(hosts))
    try:
        if executor == "dask":
            from analyzer.fanout import analyze_fanout, dask_executor

            if not bucket.startswith("s3://") and not Path(bucket).is_dir():
                raise BucketError(f"{bucket}: no such bucket folder")
            pool, closer = dask_executor(scheduler, workers)
            try:
                if not quiet:
                    _err(
                        f"fanning out per host on Dask ({scheduler or f'local cluster, {workers} workers'})"
                    )
                return analyze_fanout(
                    bucket,
                    packs,
                    pool,
                    scope=scope,
                    overrides=overrides,
                    memory_limit=memory_limit,
                    hosts_per_task=batch_hosts,
                    progress=None if quiet else _err,
                )
            finally:
                closer.close()
        from analyzer.fanout import analyze_local

        return analyze_local(
            bucket,
            packs,
            scope=scope,
            overrides=overrides,
            progress=None if quiet else _err,
            memory_limit=memory_limit,
            batch_hosts=batch_hosts,
        )
    except (BucketError, ValueError, RuntimeError, OSError) as e:
        _die(str(e))


def _table(doc: Any) -> str:
    lines = [
        f"{len(doc.findings)} findings over {len(doc.hosts)} hosts ({doc.run.data_start} .. {doc.run.data_end})"
    ]
    for f in doc.findings:
        where = f.host + (f" gpu{f.gpu}" if f.gpu is not None else "")
        lines.append(f"{f.severity.upper():9} {f.rule_id:7} {f.category:32} {where:28} {f.summary}")
    bad = [r for r in doc.run.rules if r.status in ("errored", "skipped")]
    for r in bad:
        lines.append(f"{r.status.upper():9} {r.rule_id:7} {r.reason}")
    return "\n".join(lines) + "\n"


_COMMON = [
    click.option(
        "--executor",
        type=click.Choice(["local", "dask"]),
        default="local",
        show_default=True,
        help="local: one DuckDB connection in-process; dask: one task per host.",
    ),
    click.option(
        "--scheduler",
        metavar="ADDRESS",
        help="Dask scheduler (tcp://host:8786); default a local cluster.",
    ),
    click.option(
        "--workers",
        default=2,
        show_default=True,
        type=click.IntRange(1, 256),
        help="Workers of the local Dask cluster.",
    ),
    click.option(
        "--memory-limit",
        metavar="SIZE",
        help="DuckDB memory limit per connection (e.g. 1GB); past it DuckDB spills to disk.",
    ),
    click.option(
        "--batch-hosts",
        default=32,
        show_default=True,
        type=click.IntRange(1),
        help="Local runs over more hosts than this analyse them in batches of this many, "
        "one connection at a time: memory stays bounded, findings are the same.",
    ),
    click.option("--since", callback=_date, help="First date (YYYY-MM-DD, UTC) to read."),
    click.option("--until", callback=_date, help="Last date (YYYY-MM-DD, UTC) to read."),
    click.option("--host", "hosts", multiple=True, help="Only this host (repeatable)."),
    click.option(
        "--pack",
        "packs",
        multiple=True,
        type=click.Path(file_okay=False),
        help="Extra rule pack folder.",
    ),
    click.option(
        "--param",
        "params",
        multiple=True,
        metavar="RULE.key=value",
        help="Override a rule parameter.",
    ),
]


def _common(f: Any) -> Any:
    for opt in reversed(_COMMON):
        f = opt(f)
    return f


def _exit_for(doc: Any, fail_on: str) -> int:
    if fail_on == "never":
        return exitcodes.OK
    return exitcodes.FINDINGS if doc.count_at_or_above(fail_on) else exitcodes.OK


@cli.command()
@click.argument("bucket", type=click.Path())
@_common
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "markdown"]),
    default="table",
    show_default=True,
    help="table for people, json (the findings document), markdown for a chat message or ticket.",
)
@click.option("--out", type=click.Path(dir_okay=False), help="Write output here instead of stdout.")
@click.option(
    "--textfile",
    type=click.Path(dir_okay=False),
    help="Also write Prometheus textfile-collector metrics (*.prom, atomically) for node_exporter.",
)
@click.option(
    "--fail-on",
    type=click.Choice(FAIL_ON),
    default="warning",
    show_default=True,
    help="Exit 1 when a finding is at or above this severity.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
def analyze(
    bucket: str,
    since: Any,
    until: Any,
    hosts: tuple[str, ...],
    packs: tuple[str, ...],
    params: tuple[str, ...],
    executor: str,
    scheduler: str | None,
    workers: int,
    memory_limit: str | None,
    batch_hosts: int,
    fmt: str,
    out: str | None,
    textfile: str | None,
    fail_on: str,
    quiet: bool,
) -> None:
    """Run the rule packs over BUCKET and print the findings."""
    from analyzer import outputs

    doc = _run_analysis(
        bucket,
        since,
        until,
        hosts,
        packs,
        params,
        quiet,
        executor,
        scheduler,
        workers,
        memory_limit,
        batch_hosts,
    )
    if fmt == "json":
        text = doc.to_json()
    elif fmt == "markdown":
        text = outputs.markdown(doc)
    else:
        text = _table(doc)
    _write_out(text, out)
    if textfile:
        try:
            outputs.write_atomic(textfile, outputs.textfile(doc))
        except (OSError, ValueError) as e:
            _die(f"--textfile: {e}")
    sys.exit(_exit_for(doc, fail_on))


@cli.command()
@click.argument("source")
@_common
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="HTML file to write.")
@click.option("--fail-on", type=click.Choice(FAIL_ON), default="never", show_default=True)
def report(
    source: str,
    since: Any,
    until: Any,
    hosts: tuple[str, ...],
    packs: tuple[str, ...],
    params: tuple[str, ...],
    executor: str,
    scheduler: str | None,
    workers: int,
    memory_limit: str | None,
    batch_hosts: int,
    out: str,
    fail_on: str,
) -> None:
    """Write a self-contained HTML report from a bucket or a findings JSON file."""
    from analyzer.findings import FindingsDocument

    path = Path(source)
    if not source.startswith("s3://") and not path.exists():
        _die(f"{source}: no such findings file or bucket")
    if path.is_file():
        try:
            doc = FindingsDocument.from_json(path.read_text(encoding="utf-8"))
        except (ValueError, KeyError, TypeError) as e:
            _die(f"{path}: not a findings document: {e}")
    else:
        doc = _run_analysis(
            source,
            since,
            until,
            hosts,
            packs,
            params,
            False,
            executor,
            scheduler,
            workers,
            memory_limit,
            batch_hosts,
        )
    from reports.render import write_report

    written = write_report(doc, out)
    click.echo(str(Path(written).resolve()))
    sys.exit(_exit_for(doc, fail_on))


@cli.command()
@click.argument("bucket")
@click.option("--week", required=True, help="ISO week, e.g. 2026-W48.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="HTML file to write.")
@click.option(
    "--pack",
    "packs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Extra rule pack folder.",
)
@click.option(
    "--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True
)
@click.option("--scheduler", metavar="ADDRESS", help="Dask scheduler address.")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 256))
@click.option("--memory-limit", metavar="SIZE", help="DuckDB memory limit per connection.")
@click.option("--batch-hosts", default=32, show_default=True, type=click.IntRange(1))
def fleet(
    bucket: str,
    week: str,
    out: str,
    packs: tuple[str, ...],
    executor: str,
    scheduler: str | None,
    workers: int,
    memory_limit: str | None,
    batch_hosts: int,
) -> None:
    """Weekly fleet report: GPUs ranked by leak rate, cohorts, and changes since last week."""
    from analyzer import fleet as fleet_mod
    from reports.fleet import write_fleet

    try:
        start, end = fleet_mod.week_range(week)
        p_start, p_end = fleet_mod.week_range(fleet_mod.previous_week(week))
    except ValueError as e:
        _die(str(e))
    opts = (executor, scheduler, workers, memory_limit, batch_hosts)
    cur = _run_analysis(bucket, start, end, (), packs, (), True, *opts)
    prev = _run_analysis(bucket, p_start, p_end, (), packs, (), True, *opts)
    view = fleet_mod.build(week, cur, prev if prev.hosts else None)
    click.echo(str(write_fleet(view, out, generated_at=cur.run.generated_at).resolve()))


@cli.command()
@click.argument("bucket", type=click.Path())
@click.option(
    "--before", callback=_date, help="Compact days before this date (default: before today, UTC)."
)
def compact(bucket: str, before: dt.date | None) -> None:
    """Merge each finished day's small per-run files into one file per table/date/host.

    BUCKET is a folder or s3://bucket/prefix. Safe while others read: a reader
    sees the old files or the new one, never both; originals are deleted only
    after the new file's row count checks out.
    """
    from analyzer.compact import CompactError
    from analyzer.compact import compact as run_compact

    try:
        res = run_compact(bucket, before, progress=_err)
    except (CompactError, OSError) as e:
        _die(str(e))
    click.echo(
        f"{res.folders} folders: {res.files_before} files -> {res.files_after} ({res.rows} rows rewritten)"
    )


@cli.group()
def rules() -> None:
    """Inspect and test rule packs."""


@rules.command("list")
@click.option(
    "--pack",
    "packs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Extra rule pack folder.",
)
def rules_list(packs: tuple[str, ...]) -> None:
    """List the loaded rules (and rules that failed to load)."""
    loaded = _load_packs(packs)
    for p in loaded:
        for r in p.rules:
            click.echo(f"{r.id:8} {r.severity:8} {r.category:32} {r.name:40} [{p.name}] {r.title}")
        for e in p.errors:
            click.echo(f"{e.rule_id:8} ERROR    {e}")
    if any(p.errors for p in loaded):
        sys.exit(exitcodes.ERROR)


@rules.command("test")
@click.option(
    "--pack", "packs", multiple=True, type=click.Path(file_okay=False), help="Pack folder to test."
)
@click.option("--no-builtin", is_flag=True, help="Test only the --pack folders.")
def rules_test(packs: tuple[str, ...], no_builtin: bool) -> None:
    """Run the rule test cases shipped in each pack's tests/ folder."""
    from analyzer.ruletest import collect_cases, run_case

    loaded = _load_packs(packs, no_builtin)
    failed = total = 0
    for case in collect_cases(loaded):
        total += 1
        problems = run_case(case, loaded)
        status = "ok" if not problems else "FAIL"
        click.echo(f"{status:4} {case.id}")
        for p in problems:
            click.echo(f"     {p}")
        failed += bool(problems)
    click.echo(f"{total - failed} passed, {failed} failed")
    errors = sum(len(p.errors) for p in loaded)
    sys.exit(exitcodes.ERROR if failed or errors or total == 0 else exitcodes.OK)


@cli.command("eval")
@click.option(
    "--out", "out_dir", default="out/eval", show_default=True, type=click.Path(file_okay=False)
)
@click.option("--hosts-per-scenario", default=1, show_default=True, type=click.IntRange(1, 100))
@click.option("--hours", default=6.0, show_default=True, type=click.FloatRange(0.5, 168))
@click.option("--seed", default=11, show_default=True, type=int)
@click.option(
    "--step-minutes",
    default=10,
    show_default=True,
    type=click.IntRange(1, 600),
    help="Prefix step for the time-to-detection analysis.",
)
def eval_cmd(
    out_dir: str, hosts_per_scenario: int, hours: float, seed: int, step_minutes: int
) -> None:
    """Score the analyzer on the labelled scenario suite (confusion table, time to detection).

    Writes eval.json and eval.md into --out; exits 1 when a target is missed.
    """
    import shutil

    from analyzer.evaluate import markdown, run_eval

    out = Path(out_dir)
    if (out / "bucket").exists():
        shutil.rmtree(out / "bucket")
    out.mkdir(parents=True, exist_ok=True)
    res = run_eval(
        out,
        hosts_per_scenario=hosts_per_scenario,
        hours=hours,
        seed=seed,
        step_min=step_minutes,
        progress=_err,
    )
    _write_out(json.dumps(res.to_dict(), indent=2) + "\n", str(out / "eval.json"))
    md = markdown(res)
    _write_out(md, str(out / "eval.md"))
    click.echo(md)
    sys.exit(exitcodes.OK if res.targets_met() else exitcodes.FINDINGS)


@cli.group()
def logs() -> None:
    """Read server logs the way the analyzer does."""


@logs.command("parse")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--engine", type=click.Choice(["auto", "sglang", "vllm"]), default="auto", show_default=True
)
@click.option(
    "--format", "fmt", type=click.Choice(["jsonl", "table"]), default="jsonl", show_default=True
)
@click.option("--year", type=int, help="Year for timestamps that carry none (vLLM's MM-DD).")
@click.option("--out", type=click.Path(dir_okay=False), help="Write output here instead of stdout.")
def logs_parse(file: str, engine: str, fmt: str, year: int | None, out: str | None) -> None:
    """One JSON object per recognised event in FILE: {line, event, engine, ts, fields}.

    Events: batch_stats, kv_leak_check, oom, server_args, fast_image_processor,
    engine_version, kv_capacity. Unrecognised lines produce nothing.
    """
    import time

    from analyzer import logparse

    t0 = time.perf_counter()
    try:
        lines = logparse.read_lines(file)
    except OSError as e:
        _die(f"{file}: {e}")
    frame = logparse.parse_frame(lines, engine, year)
    if fmt == "jsonl":
        text = logparse.to_jsonl(frame)
    else:
        rows = [
            f"{e['line']:>8} {e['event']:22} {e['engine'] or '-':7} {e['ts'] or '-':20} "
            + " ".join(f"{k}={v}" for k, v in e["fields"].items())
            for e in logparse.events(frame)
        ]
        text = "\n".join(rows) + ("\n" if rows else "")
    _write_out(text, out)
    _err(f"{file}: {lines.len()} lines, {frame.height} events in {time.perf_counter() - t0:.2f}s")


def main() -> None:
    cli(prog_name="leakreport")


if __name__ == "__main__":
    main()
