"""The ``leakreport`` command: a thin click layer above ``analyzer`` and ``reports``.

One module per command group (``cmd_*.py``); what they share (analysis options,
output, progress, exit codes) lives in ``common``. Heavy modules are imported
inside the commands that use them.
"""

import signal as _signal
from types import FrameType


class Sigint:
    """Ctrl-C (SIGINT) seen. Python drops a KeyboardInterrupt raised inside some callbacks
    (an import's module-lock cleanup prints "Exception ignored in ..." and goes on), so
    the signal is counted too, and checked before anything is written. Only signals since
    the command began count (:meth:`begin`): one a caller handled before is not pending."""

    count = 0
    mark = 0
    terminated = False  # the signal was SIGTERM (a timeout, systemd): ends alike, exit 143

    @classmethod
    def begin(cls) -> None:
        """A command starts: any earlier Ctrl-C was dealt with."""
        cls.mark = cls.count

    @classmethod
    def check(cls) -> None:
        """KeyboardInterrupt if Ctrl-C came since :meth:`begin`, even where its exception
        was swallowed (said once)."""
        if cls.count > cls.mark:
            cls.mark = cls.count
            raise KeyboardInterrupt


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    Sigint.count += 1
    _signal.default_int_handler(signum, frame)


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM ends a command as Ctrl-C does (every ``finally`` runs: staged S3 copies
    are removed), with its own exit code."""
    Sigint.count += 1
    Sigint.terminated = True
    raise KeyboardInterrupt


try:  # as early as can be: this package is imported before the command's heavy modules
    if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
        _signal.signal(_signal.SIGINT, _on_sigint)
except ValueError:  # imported outside the main thread: Python's handler stays
    pass
