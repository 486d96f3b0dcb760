"""Starts leakreport's allocator probe in every Python process that has this
folder on ``PYTHONPATH`` (see ``leakcollect probe env``), then runs the
``sitecustomize`` this one shadows, if there is one further down the path."""

import importlib.util
import os
import sys


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        if os.path.isfile(os.path.join(entry, "leakprobe.py")):
            continue  # another copy of this hook (an older install): it would run us again
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location(
                "_leakprobe_next_sitecustomize", candidate
            )
            if spec and spec.loader:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


try:
    import leakprobe

    leakprobe.start()
except Exception as e:  # never break the host process
    sys.stderr.write(f"leakprobe: not started: {e!r}\n")
try:
    _chain()
except Exception as e:
    sys.stderr.write(f"leakprobe: the next sitecustomize failed: {e!r}\n")
