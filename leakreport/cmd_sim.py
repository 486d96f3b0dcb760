"""``leakreport simulate`` and ``eval``: the labelled scenario fleet and the score on it."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import click

from analyzer import exitcodes
from analyzer.progress import plural
from collector.clikit import tz_option
from leakreport.common import console, die, err, verbosity_options, writable_out, write_out


@click.command()
@click.option(
    "--scenario",
    default="all",
    show_default=True,
    help="Scenario name (see --list), or 'all'.",
)
@click.option("--out", "out", type=click.Path(file_okay=False), help="Bucket folder to write.")
@click.option(
    "--hosts",
    type=click.IntRange(1, 10_000),
    help="Number of hosts, spread over the scenarios round-robin "
    "(default: one per scenario; at least one per scenario).",
)
@click.option(
    "--hours",
    default=6.0,
    show_default=True,
    type=click.FloatRange(0.1, 24 * 31),
    help="Trace length in hours.",
)
@click.option(
    "--seed",
    default=7,
    show_default=True,
    type=click.IntRange(0, 2**32 - 1),
    help="Random seed (output is deterministic).",
)
@click.option(
    "--labels",
    "labels_path",
    type=click.Path(dir_okay=False),
    help="Write the expected finding categories per host and GPU (JSON) here.",
)
@click.option("--list", "list_only", is_flag=True, help="List the scenarios and exit.")
@click.option(
    "--shape",
    type=click.Choice(["native", "nvidia-smi-csv", "memory-log", "logs-only"]),
    default="native",
    show_default=True,
    help="native: the collector's tables; the others write each host's files as nvidia-smi and "
    "the server would (under OUT-files/) and import them with the collector's importers.",
)
@tz_option("Local time zone of those files.", "UTC")
@verbosity_options
def simulate(
    scenario: str,
    out: str | None,
    hosts: int | None,
    hours: float,
    seed: int,
    labels_path: str | None,
    list_only: bool,
    shape: str,
    tz: str,
) -> None:
    """Write a simulated fleet of labelled scenarios into a bucket.

    \b
    Examples:
      leakreport simulate --list
      leakreport simulate --out /tmp/fleet --labels /tmp/labels.json
      leakreport simulate --scenario fast-image-processor-leak --hosts 3 --hours 12 --out B
    """
    from simulator.generate import simulate as run_sim
    from simulator.scenarios import SCENARIOS

    if list_only:
        for s in SCENARIOS.values():
            click.echo(f"{s.name:28} {s.description}")
        return
    if not out:
        die("simulate: --out BUCKET is required (or --list)")
    n_scen = len(SCENARIOS) if scenario == "all" else 1
    if scenario != "all" and scenario not in SCENARIOS:
        die(f"simulate: no scenario {scenario!r} (see `leakreport simulate --list`)")
    if hosts is not None and hosts < n_scen:
        die(
            f"simulate: --hosts {hosts} is fewer than the {n_scen} scenarios (one host each at least)"
        )
    _finite(hours)
    writable_out(labels_path, "--labels")  # before the fleet is written, not after
    if labels_path:
        _folder(str(Path(labels_path).parent), "--labels")
    _folder(out)
    _not_simulated_yet(out, scenario, hosts or n_scen, seed)
    _say_if_future(scenario, hours)
    say = console()
    plans = run_sim(
        scenario,
        out,
        hosts=hosts or n_scen,
        hours=hours,
        seed=seed,
        labels_path=labels_path,
        progress=say,
        shape=shape,
        tz=tz,
    )
    say(f"simulated {plural(len(plans), 'host')} x {hours:g} h into {out}")


def _finite(hours: float) -> None:
    if math.isnan(hours):  # click's range lets NaN through: it compares false either way
        die("--hours nan: not a number of hours")


def _folder(out: str, what: str = "--out") -> None:
    """Make an output folder now (exit 2 naming why it cannot be), not a traceback later."""
    if out.startswith("s3://"):
        return
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        die(f"{what} {out}: cannot make the folder: {e.strerror or e}")
    if not os.access(out, os.W_OK | os.X_OK):
        die(f"{what} {out}: cannot write: no permission")


def _say_if_future(scenario: str, hours: float) -> None:
    """The fleet starts on a fixed day (the output is the same every run): a trace long
    enough to run past now is analysed with its future samples quarantined, a line each."""
    import datetime as dt

    from analyzer.timesanity import FUTURE_MARGIN
    from simulator.generate import DEFAULT_START
    from simulator.scenarios import SCENARIOS

    names = list(SCENARIOS) if scenario == "all" else [scenario]
    longest = max([hours] + [SCENARIOS[n].min_hours for n in names])
    end = DEFAULT_START + dt.timedelta(hours=longest)
    now = dt.datetime.now(dt.UTC)
    if end > now:
        margin = FUTURE_MARGIN.total_seconds() / 60
        err(
            f"leakreport: warning: the trace runs to {end:%Y-%m-%d %H:%M} UTC, past now "
            f"({now:%Y-%m-%d %H:%M}); analyses quarantine samples more than {margin:g} minutes "
            f"in the future (give --hours {max((now - DEFAULT_START).total_seconds() // 3600, 0.1):g} "
            "or less)"
        )


def _not_simulated_yet(out: str, scenario: str, hosts: int, seed: int) -> None:
    """Refuse a bucket that has data of a host this simulation writes: two traces of one
    host (another seed, another length) mixed into one, and the analysis read both. Other
    hosts' data (another scenario simulated into the same bucket) is fine."""
    from collector import layout
    from collector.schema import TABLES
    from collector.store import is_s3, root_of, s3_filesystem
    from simulator.generate import plan_fleet

    fs = s3_filesystem() if is_s3(out) else None
    if fs is None and not Path(out).is_dir():
        return
    try:
        there = set(layout.hosts_in(root_of(out, fs), TABLES, fs))
    except OSError as e:
        die(f"simulate: {out}: cannot list it: {e}")
    again = sorted(there & {p.host for p in plan_fleet(scenario, hosts, seed)})
    if again:
        die(
            f"simulate: {out} already has data of host {again[0]}"
            + (f" (and {len(again) - 1} more)" if len(again) > 1 else "")
            + ": simulating it again would mix two traces of one host; use another --out, "
            "or delete it first"
        )


@click.command("eval", epilog="Exit codes: 0 every target met, 1 a target missed, 2 usage error.")
@click.option(
    "--out",
    "out_dir",
    default="out/eval",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Folder for eval.json, eval.md and the scratch bucket.",
)
@click.option(
    "--hosts-per-scenario",
    default=1,
    show_default=True,
    type=click.IntRange(1, 100),
    help="Simulated hosts per scenario.",
)
@click.option(
    "--hours",
    default=6.0,
    show_default=True,
    type=click.FloatRange(0.5, 168),
    help="Trace length per scenario.",
)
@click.option(
    "--seed", default=11, show_default=True, type=click.IntRange(0, 2**32 - 1), help="Random seed."
)
@click.option(
    "--step-minutes",
    default=10,
    show_default=True,
    type=click.IntRange(1, 600),
    help="Prefix step for the time-to-detection analysis.",
)
@verbosity_options
def eval_cmd(
    out_dir: str, hosts_per_scenario: int, hours: float, seed: int, step_minutes: int
) -> None:
    """Score the analyzer on the labelled scenario suite (confusion table, time to detection).

    \b
    Example:
      leakreport eval --out out/eval      # then read out/eval/eval.md
    """
    from analyzer.evaluate import markdown, run_eval

    _finite(hours)
    _folder(out_dir)
    out = Path(out_dir)
    res = run_eval(
        out,
        hosts_per_scenario=hosts_per_scenario,
        hours=hours,
        seed=seed,
        step_min=step_minutes,
        progress=console(),
    )
    write_out(json.dumps(res.to_dict(), indent=2) + "\n", str(out / "eval.json"))
    md = markdown(res)
    write_out(md, str(out / "eval.md"))
    click.echo(md)
    sys.exit(exitcodes.OK if res.targets_met() else exitcodes.FINDINGS)
