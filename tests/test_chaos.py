"""The fault suite in short form (``make chaos`` runs it with 200 cycles).

Real collector processes are SIGKILLed at random while a writer process rotates
its log by rename, copytruncate and copy + delete + create; real HTTP servers
on 127.0.0.1 hang, trickle and flood; a 1 MiB tmpfs fills up.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "chaos", Path(__file__).resolve().parent.parent / "bench" / "chaos.py"
)
assert _SPEC and _SPEC.loader
chaos = importlib.util.module_from_spec(_SPEC)
sys.modules["chaos"] = chaos
_SPEC.loader.exec_module(chaos)

CYCLES = int(os.environ.get("LEAKREPORT_CHAOS_CYCLES", "18"))


def test_kills_and_rotations_lose_and_repeat_no_line(tmp_path: Path) -> None:
    fig = chaos.log_chaos(tmp_path, CYCLES, seed=16)
    print(fig)
    assert fig["lines_written"] > 100 and fig["kills"] > 0
    assert fig["rename"] + fig["copytruncate"] + fig["recreate"] > 3
    assert fig["lost"] == 0 and fig["duplicated"] == 0 and fig["unreadable_files"] == []
    assert fig["lines_found"] == fig["lines_written"]


def test_misbehaving_endpoints_are_named_and_do_not_hold_the_run(tmp_path: Path) -> None:
    fig = chaos.endpoint_chaos(tmp_path)
    assert all(fig["each_bad_endpoint_named"].values()), fig
    assert fig["too_large_said"] and fig["good_samples"] >= 3, fig
    assert fig["run_seconds"] < fig["run_limit_seconds"] + 1.0, fig


def test_a_full_bucket_fails_cleanly_and_the_next_run_catches_up(tmp_path: Path) -> None:
    fig = chaos.full_fs_chaos(tmp_path)
    if "skipped" in fig:
        pytest.skip(fig["skipped"])
    # the log lines did not fit; the run's record did: that source failed (exit 1), its lines wait
    assert fig["full_exit"] == 1 and "No space left" in fig["full_said"], fig
    assert fig["cursor_kept"] and fig["after_room_exit"] == 0, fig
    assert fig["lost"] == 0 and fig["duplicated"] == 0 and fig["unreadable_files"] == [], fig
