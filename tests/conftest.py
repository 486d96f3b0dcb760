from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest_plugins = ["skip_policy"]  # in CI a skip fails unless allowed_skips.txt lists it
REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "corpus"


@pytest.fixture(scope="session")
def sim_bucket(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """Every scenario, one host each, 6 simulated hours (shared, read-only)."""
    from simulator.generate import simulate

    root = tmp_path_factory.mktemp("sim")
    bucket, labels = root / "bucket", root / "labels.json"
    simulate("all", bucket, hosts=4, hours=6, seed=7, labels_path=labels)
    return bucket, json.loads(labels.read_text())


@pytest.fixture(scope="session")
def two_weeks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One host leaking in ISO weeks 2026-W47 and W48 (6 h each, the same PIDs: the
    simulator reuses them, as the OS does) and a caching one in W48 (shared, read-only:
    copy it to change it)."""
    import datetime as dt

    from simulator.generate import simulate

    out = tmp_path_factory.mktemp("two-weeks") / "bucket"
    for scenario, day, seed in (
        ("fast-image-processor-leak", 18, 4),
        ("fast-image-processor-leak", 25, 5),
        ("cache-warmup", 25, 6),
    ):
        start = dt.datetime(2026, 11, day, tzinfo=dt.UTC)
        simulate(scenario, out, hosts=1, hours=6, seed=seed, start=start)
    return out


@pytest.fixture(scope="session")
def sim_doc(sim_bucket):
    from analyzer.packs import load_packs
    from analyzer.runner import analyze

    return analyze(sim_bucket[0], load_packs())
