"""The ``leakreport`` command: a thin click layer above ``analyzer`` and ``reports``.

One module per command group (``cmd_*.py``); what they share (analysis options,
output, progress, exit codes) lives in ``common``. Heavy modules are imported
inside the commands that use them.
"""

import signal as _signal
from types import FrameType


class Sigint:
    """Whether Ctrl-C (SIGINT) came. Python drops a KeyboardInterrupt raised inside some
    callbacks (an import's module-lock cleanup prints "Exception ignored in ..." and goes
    on), so the signal is remembered too, and checked before anything is written."""

    seen = False

    @classmethod
    def check(cls) -> None:
        """KeyboardInterrupt if Ctrl-C came, even where its exception was swallowed."""
        if cls.seen:
            raise KeyboardInterrupt


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    Sigint.seen = True
    _signal.default_int_handler(signum, frame)


try:  # as early as can be: this package is imported before the command's heavy modules
    if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
        _signal.signal(_signal.SIGINT, _on_sigint)
except ValueError:  # imported outside the main thread: Python's handler stays
    pass
