"""Replies the response cache could not store (full disk, file size limit), kept for the next run.

A paid reply is never dropped: when the cache refuses a write, the reply is appended to a recovery
file, ``<run folder>/recovered.jsonl``, or, when the run's disk refuses that too, to
``<temp dir>/persobench-recovered-<run id>.jsonl`` (usually another file system). The next
``run`` of the same configuration moves every recovered reply into the cache before planning, so
it is not requested again, then deletes the file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Iterator

from persobench.llm.response_cache import ResponseCache
from persobench.providers.base import Completion

RECOVERY_FILE = "recovered.jsonl"


def recovery_paths(run_path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Where a run's unsaved replies go: in its folder first, then in the temp dir."""
    run_path = Path(run_path)
    return run_path / RECOVERY_FILE, Path(tempfile.gettempdir()) / f"persobench-recovered-{run_path.name}.jsonl"


def keep_reply(run_path: str | os.PathLike[str], key: str, completion: Completion, latency: float) -> Path | None:
    """Append one reply to the first recovery file that accepts it; its path, or ``None`` when no
    disk accepted it."""
    line = json.dumps({"key": key, "completion": completion.to_dict(), "latency": latency},
                      ensure_ascii=False) + "\n"
    for path in recovery_paths(run_path):
        try:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())
            return path
        except OSError:
            continue
    return None


def _entries(path: Path) -> Iterator[tuple[str, Completion, float]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return
    for line in lines:
        try:
            data = json.loads(line)
            yield str(data["key"]), Completion.from_dict(data["completion"]), float(data.get("latency") or 0.0)
        except (ValueError, KeyError, TypeError):
            continue  # a line cut by the full disk: that reply was not kept


def restore_replies(run_path: str | os.PathLike[str], cache_dir: str | os.PathLike[str]) -> int:
    """Move the run's recovered replies into the response cache; how many. A recovery file is
    deleted only once all its replies are in the cache."""
    restored = 0
    for path in recovery_paths(run_path):
        if not path.exists():
            continue
        with ResponseCache(cache_dir) as cache:
            for key, completion, latency in _entries(path):
                if key not in cache:
                    cache.set(key, completion, latency=latency)
                    restored += 1
        path.unlink(missing_ok=True)
    return restored
