"""What checking a kept prompt table costs (issue 39 item 8): reading the paper's prompt tables back
from ``<home>/samples`` with the checksum verified, against decoding the same JSON unchecked (what
the read did before), in the same process.

    .venv/bin/python benchmarks/parsed_tables.py [--reference DIR] [--repeats 5]

Each table of ``$PERSOBENCH_REFERENCE/Prompts`` (default ../shared/persobench-reference) is parsed
once into a scratch folder; then, per repeat and table, the kept file is read the way a ``score``
pass reads it (:func:`persobench.datasets.parsed_tables.table_samples` in a fresh process state) and
decoded without the check. Prints the best time of each, the ratio, and a parse of the table for
scale. Exits 1 when the reference data is missing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scoring import reference_dir  # noqa: E402 - the same lookup of the published data

TABLES = {"Blended Skill Talk.csv": "blended-skill-talk", "FoCus.csv": "focus", "IT-ConvAI2.csv": "it-convai2",
          "PEC.csv": "pec"}


def main(argv: list[str] | None = None) -> int:
    from persobench.datasets import parse_all, parsed_tables

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", default=None, help="the paper's data (default $PERSOBENCH_REFERENCE)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    reference = reference_dir(args.reference)
    if reference is None or not (reference / "Prompts").is_dir():
        print("no prompt tables: set PERSOBENCH_REFERENCE (or --reference) to the paper's data")
        return 1
    prompts = reference / "Prompts"
    total = {"checked": 0.0, "unchecked": 0.0, "parse": 0.0}
    with tempfile.TemporaryDirectory() as scratch:
        cache = Path(scratch)
        for name, dataset in TABLES.items():
            table = prompts / name
            started = time.perf_counter()
            parse_all(dataset, source=str(table))
            parse = time.perf_counter() - started
            parsed_tables.table_samples(dataset, table, cache)
            kept = cache / f"{parsed_tables._key(table, dataset)}.json"
            checked, unchecked = [], []
            for _ in range(args.repeats):
                parsed_tables._LOADED.clear()  # as a new process: read from the file
                started = time.perf_counter()
                parsed_tables.table_samples(dataset, table, cache)
                checked.append(time.perf_counter() - started)
                started = time.perf_counter()
                body = kept.read_bytes().partition(b"\n")[2]
                parsed_tables._decode(body, dataset)
                unchecked.append(time.perf_counter() - started)
            best = min(checked), min(unchecked)
            total["checked"] += best[0]
            total["unchecked"] += best[1]
            total["parse"] += parse
            print(f"{name:24s} {kept.stat().st_size / 1e6:6.2f} MB  checked {best[0] * 1000:7.1f} ms  "
                  f"unchecked {best[1] * 1000:7.1f} ms  ratio {best[0] / best[1]:.3f}  parse {parse * 1000:7.1f} ms")
    print(f"{'all tables':24s}            checked {total['checked'] * 1000:7.1f} ms  unchecked "
          f"{total['unchecked'] * 1000:7.1f} ms  ratio {total['checked'] / total['unchecked']:.3f}  "
          f"parse {total['parse'] * 1000:7.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
