"""`import persobench` and the CLI's start-up stay light: heavy libraries load only in the stage using them."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "pandas", "numpy", "openai", "anthropic", "streamlit", "datasets", "bert_score", "nltk")


def test_top_level_imports_load_no_heavy_dependency() -> None:
    code = (
        "import sys\n"
        "import persobench, persobench.records, persobench.core.registry, persobench.prompts.templates, persobench.store.run_store\n"
        "import persobench.datasets, persobench.cli\n"
        "persobench.cli.build_parser()\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"heavy modules imported at start-up: {result.stdout.strip()}"


def test_make_bytecode_compiles_every_module_of_the_project(tmp_path: Path) -> None:
    """`make install`/`run`/`test` compile the project's modules ahead (`make bytecode`), so a fresh
    process under PYTHONDONTWRITEBYTECODE reads them instead of compiling ~200 modules again."""
    root = Path(__file__).resolve().parents[1]
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    # A copy of the package: the test must not depend on what the checkout's __pycache__ holds.
    copy = tmp_path / "repo"
    shutil.copytree(root / "persobench", copy / "persobench", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("Makefile", "app.py"):
        shutil.copy(root / name, copy / name)
    (copy / "pages").mkdir()
    (copy / "benchmarks").mkdir()
    venv = copy / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / ".installed").touch()
    (copy / "requirements.txt").touch()
    os.utime(venv / ".installed", (time.time() + 60, time.time() + 60))  # the venv is newer than requirements.txt
    done = subprocess.run(["make", "-s", "bytecode"], cwd=copy, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    sources = sorted((copy / "persobench").rglob("*.py"))
    missing = [str(s.relative_to(copy)) for s in sources if not Path(importlib.util.cache_from_source(str(s))).is_file()]
    assert len(sources) > 100 and not missing, missing[:5]
