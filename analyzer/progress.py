"""Progress of long work, as the library reports it.

Library code takes one ``progress`` callable (a line of text). A caller that can draw
a bar (the command layer on a terminal) passes an object that also has
``step(done, total, unit)``; :func:`step` uses it where present and falls back to a
plain line otherwise, so library code never cares which it got.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Progress = Callable[[str], None]


def step(progress: Any, done: int, total: int, unit: str, detail: str = "") -> None:
    """Report that ``done`` of ``total`` ``unit`` are finished."""
    if progress is None:
        return
    fn = getattr(progress, "step", None)
    if callable(fn):
        fn(done, total, unit, detail)
    else:
        progress(f"{unit} {done}/{total} done" + (f" ({detail})" if detail else ""))


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 finding', '3 findings', '0 findings'."""
    return f"{n} {word if n == 1 else (many or word + 's')}"
