"""`import persobench` and the CLI's start-up stay light: heavy libraries load only in the stage using them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "pandas", "openai", "anthropic", "streamlit", "datasets", "bert_score", "nltk")


def test_top_level_imports_load_no_heavy_dependency() -> None:
    code = (
        "import sys\n"
        "import persobench, persobench.records, persobench.registry, persobench.prompts, persobench.store\n"
        "import persobench.datasets, persobench.cli\n"
        "persobench.cli.build_parser()\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"heavy modules imported at start-up: {result.stdout.strip()}"
