"""The tool as users install it: the built wheel in a clean venv, run from elsewhere.

An editable install reads data files straight from the checkout, so only this test
notices a file the wheel leaves out (rollup SQL, packs, templates, the probe hook,
the Prometheus mapping, the chart library).
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def sh(*args: str | Path, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bin/ of a fresh venv holding only the wheel and its declared dependencies."""
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    r = sh(sys.executable, "-m", "build", "--wheel", "--outdir", dist, REPO, cwd=root)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    wheels = list(dist.glob("leakreport-*.whl"))
    assert len(wheels) == 1, wheels
    assert "BuildBackendWarning" not in r.stderr, "setuptools warns on every install"
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    r = sh(env_dir / "bin" / "python", "-m", "pip", "install", "-q", wheels[0], cwd=root)
    assert r.returncode == 0, r.stderr[-3000:]
    return env_dir / "bin"


def test_the_installed_wheel_runs_the_whole_path(installed: Path, tmp_path: Path) -> None:
    work = tmp_path / "elsewhere"  # not the checkout: nothing importable from the cwd
    work.mkdir()
    lr, lc = installed / "leakreport", installed / "leakcollect"
    probe = sh(
        installed / "python",
        "-c",
        "import analyzer, leakreport; print(analyzer.__file__, leakreport.__file__)",
        cwd=work,
    )
    assert "site-packages" in probe.stdout and str(REPO) not in probe.stdout, probe.stdout

    def ok(*args: str | Path, codes: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        r = sh(*args, cwd=work)
        assert r.returncode in codes, (
            f"{args}: rc={r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        )
        assert "Traceback" not in r.stderr, r.stderr
        return r

    ok(lr, "simulate", "--scenario", "fast-image-processor-leak", "--hours", "3", "--out", "b")
    ok(lr, "simulate", "--scenario", "healthy-static", "--hours", "3", "--out", "b", "-q")
    r = ok(
        lr,
        "analyze",
        "b",
        "--format",
        "json",
        "--out",
        "f.json",
        "--fail-on",
        "warning",
        codes=(1,),
    )
    import json

    doc = json.loads((work / "f.json").read_text())
    statuses = {x["status"] for x in doc["run"]["rules"]}
    assert "errored" not in statuses and "fired" in statuses, doc["run"]["rules"]
    assert any(f["category"].startswith("leak.") for f in doc["findings"])
    ok(lr, "report", "f.json", "--out", "r.html")
    html = (work / "r.html").read_text()
    assert "fast-image-processor-leak-00" in html and "<svg" in html
    ok(lr, "fleet", "b", "--week", "2026-W48", "--out", "fleet.html")
    r = ok(lr, "rules", "test")
    assert " 0 failed" in r.stdout
    log = work / "server.log"
    log.write_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. "
        "GPU 0 has a total capacity of 79.19 GiB of which 3.12 MiB is free.\n"
    )
    r = ok(lr, "logs", "parse", str(log))
    assert '"oom"' in r.stdout
    r = ok(lc, "run", "--once", "--no-gpu", "--bucket", "cb", "--state-dir", "st", "--log", log)
    assert list((work / "cb" / "collector_runs").rglob("*.parquet"))
    ok(lc, "probe", "env", "--spool", "sp")
