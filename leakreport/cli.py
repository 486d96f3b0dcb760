"""``leakreport``: simulate, analyze, report, fleet, compact, rules, logs, eval."""

from __future__ import annotations

import click

from analyzer import __version__
from leakreport.cmd_analyze import analyze, fleet, report
from leakreport.cmd_bucket import compact, rollup
from leakreport.cmd_logs import logs
from leakreport.cmd_rules import rules
from leakreport.cmd_sim import eval_cmd, simulate
from leakreport.common import EPILOG_EXIT


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EPILOG_EXIT)
@click.version_option(__version__, prog_name="leakreport")
def cli() -> None:
    """Tell whether LLM inference servers leak GPU/host memory or only cache it.

    \b
    Examples:
      leakreport simulate --out /tmp/fleet              # a labelled, simulated fleet
      leakreport analyze /tmp/fleet                     # findings as a table
      leakreport report /tmp/fleet --out report.html    # one self-contained page
      leakreport fleet /tmp/fleet --week 2026-W48 --out fleet.html
    The traces come from `leakcollect` on each GPU host (or its importers).
    """


for command in (simulate, analyze, report, fleet, compact, rollup, rules, logs, eval_cmd):
    cli.add_command(command)


def main() -> None:
    cli(prog_name="leakreport")


if __name__ == "__main__":
    main()
