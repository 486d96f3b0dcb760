"""Compatibility: use ``simulator.scenarios``."""

from __future__ import annotations

import analyzer.sim  # noqa: F401 - makes ``simulator`` importable
from simulator.scenarios import SCENARIOS, Scenario, resolve

__all__ = ["SCENARIOS", "Scenario", "resolve"]
