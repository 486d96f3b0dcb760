"""``leakreport analyze``, ``report`` and ``fleet``: findings from a bucket."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import Any

import click

from analyzer import exitcodes
from analyzer.outputs import data_span
from analyzer.progress import plural
from leakreport import Sigint
from leakreport.common import (
    EPILOG_EXIT,
    EPILOG_FLEET,
    Console,
    bucket_path,
    console,
    die,
    err,
    exit_code,
    run_analysis,
    verbosity_options,
    writable_out,
    write_out,
)
from leakreport.options import (
    AnalysisOptions,
    analysis_options,
    fail_on_option,
    given_analysis_options,
)
from reports import TOP


def table(doc: Any) -> str:
    """Findings for people: a header line, one row per finding, then what was not checked."""
    head = (
        f"{plural(len(doc.findings), 'finding')} over {plural(len(doc.hosts), 'host')}"
        f" ({data_span(doc, '..')})"
    )
    lines = [head]
    if doc.findings:
        lines.append(f"{'SEVERITY':9} {'RULE':7} {'CATEGORY':32} {'WHERE':28} SUMMARY")
        for f in doc.findings:
            where = f.host + (f" gpu{f.gpu}" if f.gpu is not None else "")
            lines.append(
                f"{f.severity.upper():9} {f.rule_id:7} {f.category:32} {where:28} {f.summary}"
            )
    counts = {s: sum(1 for r in doc.run.rules if r.status == s) for s in ("fired", "clean")}
    counts |= {s: sum(1 for r in doc.run.rules if r.status == s) for s in ("skipped", "errored")}
    if not doc.has_data():  # the incomplete reason says which filter emptied the scope
        return "\n".join(lines) + "\n"
    lines.append("rules: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    for r in doc.run.rules:
        if r.status in ("errored", "skipped"):
            lines.append(f"  {r.status:8} {r.rule_id:7} {r.reason}")
    return "\n".join(lines) + "\n"


@click.command(epilog=EPILOG_EXIT)
@click.argument("bucket")
@analysis_options()
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
    help="Also write Prometheus textfile-collector metrics (*.prom, atomically) for "
    "node_exporter, with a last-run timestamp and a success gauge.",
)
@fail_on_option("warning")
@verbosity_options
def analyze(
    bucket: str,
    opts: AnalysisOptions,
    fmt: str,
    out: str | None,
    textfile: str | None,
    fail_on: str,
) -> None:
    """Run the rule packs over BUCKET (a folder or s3://bucket/prefix) and print the findings.

    \b
    Examples:
      leakreport analyze /data/traces
      leakreport analyze /data/traces --since 2026-11-30 --host gpu-node-7 --format json | jq
      leakreport analyze s3://traces/prod --format markdown --fail-on critical
    """
    from analyzer import outputs

    writable_out(out)
    writable_out(textfile, "--textfile")
    if textfile:
        try:
            outputs.check_textfile_name(textfile)
        except ValueError as e:
            die(f"--textfile: {e}")
    doc = run_analysis(bucket, opts)
    if fmt == "json":
        text = doc.to_json()
    elif fmt == "markdown":
        text = outputs.markdown(doc)
    else:
        text = table(doc)
    write_out(text, out)
    if textfile:
        try:
            Sigint.check()
            outputs.write_atomic(textfile, outputs.textfile(doc))
        except (OSError, ValueError) as e:
            die(f"--textfile: {e}")
    sys.exit(exit_code(doc, fail_on))


@click.command(epilog=EPILOG_EXIT)
@click.argument("source")
@analysis_options()
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="HTML file to write.")
@fail_on_option("never")
@verbosity_options
def report(source: str, opts: AnalysisOptions, out: str, fail_on: str) -> None:
    """Write a self-contained HTML report from a findings JSON file or a bucket.

    SOURCE is the output of `leakreport analyze --format json`, or a bucket (then
    the analysis runs first, with the analysis options). The page needs no network.

    \b
    Examples:
      leakreport analyze /data/traces --format json --out findings.json
      leakreport report findings.json --out report.html
      leakreport report /data/traces --host gpu-node-7 --out gpu-node-7.html
    """
    from analyzer.findings import FindingsDocument
    from reports.render import render_report

    path = Path(source)
    writable_out(out)
    if path.is_file():
        given = given_analysis_options()
        if given:  # a findings document is the analysis already made: they would do nothing
            die(f"{', '.join(given)}: only for a bucket; {path} is a findings document")
        try:
            doc = FindingsDocument.from_json(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            die(f"{path}: not a findings document: {e}")
    elif not source.startswith("s3://") and not path.exists():
        die(f"{source}: no such findings file or bucket folder")
    else:
        doc = run_analysis(source, opts)
    write_out(render_report(doc), out, what="--out")
    click.echo(str(Path(out).resolve()))
    sys.exit(exit_code(doc, fail_on))


@click.command(epilog=EPILOG_FLEET)
@click.argument("bucket")
@click.option("--week", required=True, help="ISO week, e.g. 2026-W48 (Monday to Sunday, UTC).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="HTML file to write.")
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=TOP,
    show_default=True,
    help="Rows of the soonest-OOM and leak-rate tables (week over week: four times as "
    "many; cohorts: all); the rest are counted (0: every row).",
)
@analysis_options(scope=False)
@verbosity_options
def fleet(bucket: str, week: str, out: str, top: int, opts: AnalysisOptions) -> None:
    """Weekly fleet report: soonest OOMs, cohorts, GPUs ranked by leak rate, week over week.

    A week with no data writes a page that says so and exits 3. A finished week's
    findings stored by `leakreport rollup` are used while they are current (same
    trace files, code, packs and options); other weeks are analysed. Nothing is written
    to the bucket.

    \b
    Example:
      leakreport fleet /data/traces --week 2026-W48 --out fleet-2026-W48.html
    """
    from analyzer import fleet as fleet_mod

    try:
        start, end = fleet_mod.week_range(week)
    except ValueError as e:
        die(f"--week: {e}")
    week = fleet_mod.week_of(start)  # as stored and titled: 2026-W48, whatever was typed
    writable_out(out)
    bucket_path(bucket)
    html, cur, view = fleet_page(bucket, week, opts, console(), top=top)
    write_out(html, out)
    click.echo(str(Path(out).resolve()))
    if not cur.hosts:
        click.echo(f"leakreport: incomplete: no data for week {week} ({start} .. {end})", err=True)
        sys.exit(exitcodes.INCOMPLETE)
    silent = view.silent_hosts
    for host in silent:  # leaked the week before, no data now: not checked, and said so
        click.echo(
            f"leakreport: incomplete: {host} had leak findings in {view.previous_week} "
            f"and no data in {week}",
            err=True,
        )
    sys.exit(exitcodes.INCOMPLETE if silent else exit_code(cur, "never"))


def fleet_page(
    bucket: str, week: str, opts: AnalysisOptions, say: Console, *, top: int = TOP
) -> tuple[str, Any, Any]:
    """The fleet page of ``week`` (a valid ISO week) and its findings document: the
    week's and the week before's findings, stored where current, else analysed.
    ``top``: rows of each table on the page (0: every row)."""
    from analyzer import fleet as fleet_mod
    from reports.fleet import render_fleet

    cur, cur_from = week_findings(bucket, week, opts, say)
    prev, _ = week_findings(bucket, fleet_mod.previous_week(week), opts, say, skip_empty=True)
    assert cur is not None
    view = fleet_mod.build(week, cur, prev if prev is not None and prev.hosts else None)
    stamp = cur.run.generated_at
    if cur_from == "stored findings":
        stamp += " (findings stored by leakreport rollup)"
    return render_fleet(view, generated_at=stamp, top=top or sys.maxsize), cur, view


def week_findings(
    bucket: str, week: str, opts: AnalysisOptions, say: Console, *, skip_empty: bool = False
) -> tuple[Any, str]:
    """A week's findings (stored by `leakreport rollup` where current, else analysed) and
    where they came from, said on stderr. ``skip_empty``: a week with no trace file dated in it is not analysed (None)."""
    import dataclasses

    from analyzer import weekstore

    def analyse(since: dt.date, until: dt.date) -> Any:
        return run_analysis(bucket, dataclasses.replace(opts, since=since, until=until), say)

    try:
        doc, source = weekstore.findings_for(
            bucket, week, analyse, weekstore.settings(opts), err, skip_empty=skip_empty
        )
    except OSError as e:
        die(f"{bucket}: cannot list the trace files: {e}")
    say(f"week {week}: {source}")
    return doc, source
