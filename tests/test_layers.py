"""Dependency direction (DESIGN §2), checked in fresh interpreters."""

from __future__ import annotations

import subprocess
import sys

import pytest


def loaded_after(stmt: str) -> set[str]:
    code = f"import sys; {stmt}; print(' '.join(sorted(m.split('.')[0] for m in sys.modules)))"
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return set(r.stdout.split())


@pytest.mark.parametrize(
    "module",
    [
        "collector",
        "collector.schema",
        "collector.writer",
        "collector.logsig",
        "collector.metrics",
        "collector.procinfo",
        "collector.cli",
        "collector.run",
        "collector.nvml",
        "collector.procfs",
        "collector.importers",
        "collector.memlog",
        "collector.logimport",
        "collector.datelines",
    ],
)
def test_collector_stays_light(module: str) -> None:
    assert not loaded_after(f"import {module}") & {
        "duckdb",
        "polars",
        "jinja2",
        "analyzer",
        "reports",
    }


def test_findings_model_is_light() -> None:
    assert not loaded_after("import analyzer.findings") & {"duckdb", "polars", "pyarrow", "jinja2"}


def test_cli_imports_heavy_things_lazily() -> None:
    assert not loaded_after("import leakreport.cli") & {"duckdb", "polars", "jinja2"}


def test_analyzer_never_imports_the_command_layer_or_reports() -> None:
    """The command layer sits above analyzer and reports; nothing below imports it."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    for pkg in ("analyzer", "reports", "collector", "simulator"):
        for f in (root / pkg).rglob("*.py"):
            text = f.read_text(encoding="utf-8")
            assert "from leakreport" not in text and "import leakreport" not in text, f
            if pkg == "analyzer" and f.name != "cli.py":
                assert "from reports" not in text and "import reports" not in text, f


def test_parquet_is_read_in_one_place() -> None:
    """Every DuckDB read of Parquet goes through ``analyzer.views.parquet``, which leaves
    out the columns DuckDB would make of the folder names (``host=`` is not the host)."""
    from pathlib import Path

    root = Path(__file__).parent.parent
    readers = [
        str(p.relative_to(root))
        for d in ("analyzer", "reports", "leakreport")
        for p in sorted((root / d).rglob("*"))
        if p.suffix in (".py", ".sql") and "read_parquet(" in p.read_text(encoding="utf-8")
    ]
    assert readers == ["analyzer/views.py"]
