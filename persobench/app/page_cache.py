"""Streamlit caches applied on first call, keyed on the run store's modification state.

Every cached loader takes ``(home, signature)`` first: :func:`store_signature` changes whenever a
run's files change, so a page rerun reuses parsed tables until something changes on disk.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Callable, Mapping
from persobench.store import default_home
from persobench.store import RunStore

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

    return Path(home) if home is not None else default_home()


def store_signature(home: str | os.PathLike[str] | None = None) -> str:
    """The store's fingerprint (:meth:`persobench.store.run_store.RunStore.fingerprint`, the same one the
    aggregate's disk cache keys on): it changes whenever a run's files change."""

    return RunStore(store_home(home)).fingerprint()


def current_home() -> str:
    """The store folder, resolved now (``$PERSOBENCH_HOME`` may differ between test sessions)."""
    return str(store_home())


def current_state() -> tuple[str, str]:
    """(home, signature): the pair every cached loader is keyed on."""
    home = current_home()
    return home, store_signature(home)
