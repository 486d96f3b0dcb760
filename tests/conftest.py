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
def sim_doc(sim_bucket):
    from analyzer.packs import load_packs
    from analyzer.runner import analyze

    return analyze(sim_bucket[0], load_packs())
