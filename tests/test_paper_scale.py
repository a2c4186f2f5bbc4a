"""benchmarks/paper_scale.py end to end at a tiny scale: its printed figures agree with the store it
leaves, with the fake servers' counts and with each other (the benchmark measures; this checks it
measures what it says)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

from persobench.store import RunStore

ROOT = Path(__file__).resolve().parents[1]


def test_paper_scale_smoke_run_is_consistent(tmp_path: Path, reference_dir: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "PERSOBENCH_REFERENCE": str(reference_dir)}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "paper_scale.py"), "--scale", "0.002",
                           "--models", "2", "--datasets", "1", "--home", str(home)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    # 0 or 1 (a tiny grid is all start-up, far above the limits' minimum); 2 would be inconsistent
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    gen, check = out["generation"], out["consistency"]

    # the grid: 2 models x focus x 2 modes, ceil(1000 x 0.002) = 2 samples a run, all in the store
    runs = RunStore(home).runs()
    assert out["runs"] == 4 and len(runs) == 4
    assert {(r.manifest.dataset, r.manifest.mode) for r in runs} == {("focus", "vanilla"), ("focus", "cot")}
    assert len({r.manifest.model["label"] for r in runs}) == 2
    assert all(r.manifest.status == "completed" and r.has_table("scores") for r in runs)
    rows = sum(len(r.read_table("generations")) for r in runs)
    assert rows == 4 * math.ceil(1000 * 0.002) == check["samples_planned"] == check["samples_stored"]

    # requests: planned == counted by the runs == answered by the fake servers (one per model)
    assert check["requests_planned"] == check["requests_in_manifests"] == check["replies_from_servers"] == rows
    assert gen["replies"] == rows and gen["requests"] == gen["replies"] + gen["refused"]
    assert len(gen["bounds_s"]) == 2 and gen["bound_s"] == max(gen["bounds_s"]) > 0
    assert check["consistent"] and check["runs_scored"] == 4 and check["landing_built"]

    # the figures agree with each other
    assert gen["wall_s"] >= gen["bound_s"] and math.isclose(gen["ratio"], gen["wall_s"] / gen["bound_s"])
    assert math.isclose(gen["cpu_ms_per_request"], 1000 * gen["cpu_s"] / gen["replies"])
    assert math.isclose(gen["cpu_s"], gen["user_s"] + gen["system_s"])
    for phase in ("generation", "score", "leaderboard", "landing"):
        figures = out[phase]
        assert figures["returncode"] == 0 and figures["wall_s"] > 0 and figures["cpu_s"] > 0
        assert 20 < figures["peak_rss_mb"] < 4000 and figures["largest_process_mb"] > 20
    # lanes: two `run` processes at once, under the shell
    assert gen["peak_processes"] >= 2
    assert "consistent" in done.stdout and "limit-implied minimum" in done.stdout
