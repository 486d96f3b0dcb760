"""Exit codes of ``leakreport`` (DESIGN §6), one table for the CLI, README and --help."""

OK = 0  # clean: nothing at or above --fail-on, and everything in scope was checked
FINDINGS = 1  # findings at or above --fail-on
ERROR = 2  # usage or input error (bad option, bucket that is not one, broken pack)
INCOMPLETE = 3  # the analysis could not check everything: errored rules, unreadable
#                 files, or no data in scope; the reasons are on stderr and in the document
INTERRUPTED = 130  # stopped by Ctrl-C (SIGINT), as shells report it; nothing written at --out
TERMINATED = 143  # stopped by SIGTERM (timeout, systemd, kill), 128 + 15; nothing written

TABLE = (
    (
        OK,
        "clean: nothing at or above --fail-on, everything in scope checked that the "
        "collected inputs allow (rules lacking an input are listed per host)",
    ),
    (FINDINGS, "findings at or above --fail-on"),
    (ERROR, "usage or input error (bad option, not a bucket, broken pack)"),
    (
        INCOMPLETE,
        "analysis incomplete: errored rules, unreadable files, idle windows that "
        "cannot be told, or no data in scope (1 wins when there are also findings)",
    ),
    (INTERRUPTED, "stopped by Ctrl-C: nothing written at --out"),
    (TERMINATED, "stopped by SIGTERM (timeout, systemd): nothing written at --out"),
)


# `leakreport fleet` writes a page whatever it finds: it has no --fail-on
FLEET_TABLE = (
    (OK, "page written; the week checked in full"),
    (ERROR, "usage or input error (bad option or week, not a bucket, broken pack)"),
    (
        INCOMPLETE,
        "page written, but the week has no data or could not be checked in full, or a "
        "host with leak findings the week before has none now (the page and stderr say what)",
    ),
    (INTERRUPTED, "stopped by Ctrl-C: nothing written at --out"),
    (TERMINATED, "stopped by SIGTERM (timeout, systemd): nothing written at --out"),
)


def help_text(table: tuple[tuple[int, str], ...] = TABLE) -> str:
    """An exit-code table as one paragraph for click help (\b keeps the lines)."""
    lines = "\n".join(f"  {code}  {text}" for code, text in table)
    return f"\b\nExit codes:\n{lines}"
