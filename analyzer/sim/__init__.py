"""Compatibility: the simulator moved to the top-level package ``simulator``.

An editable install made before that package existed does not map it yet;
until it is reinstalled, the package is found beside ``analyzer``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("simulator") is None:  # pragma: no cover - install-dependent
    sys.path.append(str(Path(__file__).resolve().parents[2]))
