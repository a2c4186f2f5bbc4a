"""Per-page render time of the Streamlit app with the paper's published runs imported.

    python benchmarks/app.py [--repeats 3] [--home DIR] [--reference DIR]

1. Builds (once; reused on later calls) a run store with every published run of the paper
   imported by :func:`persobench.importer.import_persobench` from ``$PERSOBENCH_REFERENCE``
   (default ``../shared/persobench-reference``), about 52,000 replies, scored with the offline
   profile's lexical metrics (BLEU, ROUGE, Distinct, IDF overlap: no model needed). The store lives
   in ``$PERSOBENCH_BENCH_HOME`` (default ``cache/bench-app``).
2. Renders every page with Streamlit's AppTest, in the same process:
   * **uncached**: the page's first render after ``st.cache_data`` / ``st.cache_resource`` are
     cleared (the baseline: what the first visitor after a store change waits);
   * **cached**: the median of ``--repeats`` renders in fresh sessions (new browser tabs), once the
     data is cached.
   It prints both, their ratio, and whether the cached render meets the 2-second target.
3. **Cold landing**: a fresh Python process (a just-started app) imports Streamlit's AppTest and
   renders an empty script (the server's own start-up, untimed), then times the first render of
   ``app.py``: every library the
   landing page imports and every table it reads is paid here. Target: under 2 s.

Exit status 1 when a page raises or misses the target.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

APP = str(ROOT / "app.py")
PAGES = ["pages/leaderboard.py", "pages/new_run.py", "pages/explore.py", "pages/failures.py",
         "pages/compare.py", "pages/data.py", "pages/metrics.py"]
TARGET_S = 2.0


def build_store(home: Path, reference: Path) -> tuple[int, int]:
    """Import and score the published runs (skipped when already done); (runs, replies)."""
    from persobench.importer import import_persobench
    from persobench.metrics import metric_names, score_run
    from persobench.store import RunStore

    lexical = metric_names(needs="none")  # the metrics that need no model
    store = RunStore(home)
    started = time.perf_counter()
    report = import_persobench(store, reference)
    created = sum(1 for r in report.runs if r.action != "unchanged")
    print(f"import: {len(report.runs)} runs ({created} new or updated) in {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    samples_cache: dict[str, dict] = {}
    from persobench.importer import samples_for_run

    scored = 0
    for run in store.runs():
        entry = ((run.manifest.extra or {}).get("scores") or {}).get("offline") or {}
        if all(m in (entry.get("metrics") or {}) for m in lexical):
            continue
        key = run.manifest.dataset
        if key not in samples_cache:
            samples_cache[key] = samples_for_run(run)
        score_run(run, samples_cache[key], profile="offline", metrics=lexical)
        scored += 1
    if scored:
        print(f"scored {scored} runs with the lexical metrics in {time.perf_counter() - started:.1f} s")
    runs = store.runs()
    replies = sum(len(r.manifest.sample_ids) for r in runs)
    return len(runs), replies


def clear_caches() -> None:
    import streamlit as st

    st.cache_data.clear()
    st.cache_resource.clear()


def render(page: str, *, clear: bool) -> float:
    """Seconds to render ``page`` in a fresh session (after clearing the caches when ``clear``)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=600)
    at.run()  # the landing page; sessions always start there
    if at.exception:
        raise RuntimeError(f"app.py: {at.exception[0].message}")
    if clear:
        clear_caches()
    started = time.perf_counter()
    at.switch_page(page).run()
    elapsed = time.perf_counter() - started
    if at.exception:
        raise RuntimeError(f"{page}: {at.exception[0].message}")
    return elapsed


COLD_LANDING = """
import logging, sys, time
logging.disable(logging.WARNING)
from streamlit.testing.v1 import AppTest
AppTest.from_string("import streamlit", default_timeout=600).run()  # Streamlit's own start-up (component scan)
at = AppTest.from_file(sys.argv[1], default_timeout=600)
started = time.perf_counter()
at.run()
elapsed = time.perf_counter() - started
print(elapsed if not at.exception else f"error: {at.exception[0].message}")
"""


def cold_landing() -> float:
    """Seconds of the first render of the landing page in a fresh process."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", COLD_LANDING, APP], capture_output=True, text=True, cwd=ROOT,
                         check=True).stdout.strip().splitlines()[-1]
    if out.startswith("error"):
        raise RuntimeError(f"app.py: {out}")
    return float(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="cached renders per page (median reported)")
    parser.add_argument("--home", default=os.environ.get("PERSOBENCH_BENCH_HOME") or str(ROOT / "cache" / "bench-app"))
    parser.add_argument("--reference", default=os.environ.get("PERSOBENCH_REFERENCE")
                        or str(ROOT.parent / "shared" / "persobench-reference"))
    args = parser.parse_args(argv)
    reference = Path(args.reference)
    if not (reference / "Prompts").is_dir():
        print(f"skipped: the paper's published data is not at {reference} (set PERSOBENCH_REFERENCE)")
        return 0
    logging.disable(logging.WARNING)  # AppTest outside a server logs harmless warnings
    home = Path(args.home)
    os.environ["PERSOBENCH_HOME"] = str(home)
    os.environ.setdefault("PERSOBENCH_REFERENCE", str(reference))
    n_runs, n_replies = build_store(home, reference)
    print(f"store: {home} with {n_runs} runs, {n_replies:,} replies")

    print(f"load average: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    cold = cold_landing()
    print(f"cold landing page (fresh process, first render): {cold:.2f} s  "
          f"{'ok' if cold < TARGET_S else 'SLOW'} (target < {TARGET_S:.0f} s)")
    failed = cold >= TARGET_S

    render(PAGES[0], clear=True)  # warm-up: imports (plotly, scipy, pyarrow) are not a cache effect
    print(f"\n{'page':<14} {'uncached (s)':>12} {'cached (s)':>11} {'ratio':>7}  target < {TARGET_S:.0f} s")
    for page in PAGES:
        try:
            uncached = render(page, clear=True)
            cached = statistics.median(render(page, clear=False) for _ in range(args.repeats))
        except RuntimeError as exc:
            print(f"{Path(page).stem:<14} error: {exc}")
            failed = True
            continue
        ok = cached < TARGET_S
        failed |= not ok
        print(f"{Path(page).stem:<14} {uncached:>12.2f} {cached:>11.2f} {uncached / cached:>6.1f}x  "
              f"{'ok' if ok else 'SLOW'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
