"""``python -m persobench demo``: cached, so a second call is a fast no-op."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_demo_is_cached_second_call_is_a_fast_no_op(tmp_path):
    home = tmp_path / "demo"
    command = [sys.executable, "-m", "persobench", "--home", str(home), "demo", "--no-local", "--limit", "3",
               "--no-progress"]
    first = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "demo ready" in first.stdout
    from persobench.store import RunStore

    runs = RunStore(home).runs()
    assert {(r.manifest.model_label, r.manifest.mode) for r in runs} == {
        ("baseline:reference", "vanilla"), ("baseline:reference", "cot"),
        ("baseline:persona-echo", "vanilla"), ("baseline:persona-echo", "cot")}
    assert all("offline" in r.manifest.extra["scores"] for r in runs)
    def snapshot() -> dict[str, int]:
        return {str(p.relative_to(home)): p.stat().st_mtime_ns for p in (home / "runs").rglob("*") if p.is_file()}

    before = snapshot()
    assert before
    second = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0 and "demo ready (cached)" in second.stdout
    assert snapshot() == before  # a no-op: no run, table or manifest was rewritten


