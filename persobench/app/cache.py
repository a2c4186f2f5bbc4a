"""Streamlit caches applied on first call, keyed on the run store's modification state.

Every cached loader takes ``(home, signature)`` first: :func:`store_signature` changes whenever a
run's files change, so a page rerun reuses parsed tables until something changes on disk.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Any, Callable, Mapping

#: Files whose changes invalidate the app's caches.
WATCHED_FILES = ("manifest.json", "generations.parquet", "scores.parquet", "persona_details.parquet")


def cache_data(**kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``st.cache_data`` applied on first call, so importing a module does not import Streamlit."""
    return _lazy_cache("cache_data", kwargs)


def cache_resource(**kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``st.cache_resource`` applied lazily: for large read-only frames (no copy per access)."""
    return _lazy_cache("cache_resource", kwargs)


def _lazy_cache(kind: str, kwargs: Mapping[str, Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        holder: dict[str, Any] = {}

        @functools.wraps(fn)
        def call(*args: Any, **kw: Any) -> Any:
            if "wrapped" not in holder:
                import streamlit as st

                holder["wrapped"] = getattr(st, kind)(**kwargs)(fn)
            return holder["wrapped"](*args, **kw)

        def clear() -> None:
            if "wrapped" in holder:
                holder["wrapped"].clear()

        call.clear = clear  # type: ignore[attr-defined]
        return call

    return decorate


def store_home(home: str | os.PathLike[str] | None = None) -> Path:
    """The run store folder the app shows: ``home``, ``$PERSOBENCH_HOME`` or ``./cache``."""
    from persobench.store import default_home

    return Path(home) if home is not None else default_home()


def run_signature(run_dir: Path) -> tuple[tuple[str, int, int], ...]:
    """(file, mtime_ns, size) of the files of one run that the app reads."""
    entries = []
    for name in WATCHED_FILES:
        try:
            stat = os.stat(run_dir / name)
        except OSError:
            continue
        entries.append((name, stat.st_mtime_ns, stat.st_size))
    if entries and os.path.exists(run_dir / "lock"):  # a killed run changes no file: watch its lock too
        from persobench.generation.lock import lock_holder

        entries.append(("lock", int(lock_holder(run_dir) is not None), 0))
    return tuple(entries)


def store_signature(home: str | os.PathLike[str] | None = None) -> str:
    """A short digest of the store's modification state; changes whenever a run's files change.

    Costs one ``stat`` per watched file (a few milliseconds for hundreds of runs).
    """
    runs_dir = store_home(home) / "runs"
    digest = hashlib.sha1()
    try:
        entries = sorted(os.scandir(runs_dir), key=lambda e: e.name)
    except OSError:
        return "empty"
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        digest.update(entry.name.encode())
        digest.update(repr(run_signature(Path(entry.path))).encode())
    return digest.hexdigest()[:16]


def current_home() -> str:
    """The store folder, resolved now (``$PERSOBENCH_HOME`` may differ between test sessions)."""
    return str(store_home())


def current_state() -> tuple[str, str]:
    """(home, signature): the pair every cached loader is keyed on."""
    home = current_home()
    return home, store_signature(home)
