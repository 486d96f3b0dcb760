"""Compatibility: use ``simulator.generate``."""

from __future__ import annotations

import analyzer.sim  # noqa: F401 - makes ``simulator`` importable
from simulator.generate import DEFAULT_START, HostPlan, labels, plan_fleet, simulate

__all__ = ["DEFAULT_START", "HostPlan", "labels", "plan_fleet", "simulate"]
