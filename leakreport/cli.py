"""``leakreport``: simulate, analyze, report, fleet, compact, rules, logs, eval."""

from __future__ import annotations

import contextlib
import os
import signal
import sys

import click

from analyzer import __version__, exitcodes
from leakreport import Sigint, on_sigterm
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
    Sigint.begin()


for command in (simulate, analyze, report, fleet, compact, rollup, rules, logs, eval_cmd):
    cli.add_command(command)


def main() -> None:
    """The command line, with Ctrl-C (SIGINT) ending in exit 130 wherever it lands."""
    with contextlib.suppress(ValueError):  # (not the main thread: Python's handling stays)
        signal.signal(signal.SIGTERM, on_sigterm)
    try:
        if Sigint.count:  # Ctrl-C while starting up, its exception swallowed: stop here
            raise KeyboardInterrupt
        code = cli.main(prog_name="leakreport", standalone_mode=False)
        Sigint.check()  # a Ctrl-C whose exception Python swallowed still ends in 130
        with contextlib.suppress(ValueError):  # done: a SIGTERM in the interpreter's
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # teardown (handlers reset) killed it
    except (KeyboardInterrupt, click.exceptions.Abort) as e:
        if isinstance(e, click.exceptions.Abort) and not isinstance(
            e.__cause__, KeyboardInterrupt
        ):  # end of input at a prompt, as click's own main says it
            click.echo("Aborted!", err=True)
            sys.exit(1)
        how = "terminated (SIGTERM)" if Sigint.terminated else "interrupted (Ctrl-C)"
        click.echo(f"leakreport: {how}: nothing written at --out", err=True)
        from analyzer.staging import remove_temp

        remove_temp()  # S3 objects staged locally: atexit would, but it is skipped below
        with contextlib.suppress(OSError):  # a closed pipe must not bring the teardown back
            sys.stdout.flush()
            sys.stderr.flush()
        # every `with` and `finally` has run on the way here, and the staged objects are gone;
        # the interpreter's own teardown is skipped: a DuckDB database stopped mid-query
        # can abort the process in it (SIGABRT, "exception not rethrown")
        os._exit(exitcodes.TERMINATED if Sigint.terminated else exitcodes.INTERRUPTED)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
