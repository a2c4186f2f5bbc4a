"""Finding runs in a store by what a user types: an id or a unique prefix of one (every front end
and the scoring pass take runs this way)."""

from __future__ import annotations

import os
from typing import Sequence

from persobench.errors import ConfigurationError, StoreError
from persobench.store.run_store import Run, RunStore


def open_store(home: str | os.PathLike[str] | None = None, store: RunStore | None = None) -> RunStore:
    """``store`` itself, or the store at ``home`` (default ``$PERSOBENCH_HOME`` or ``./cache``)."""
    return store if store is not None else RunStore(home)


def resolve_runs(store: RunStore, names: Sequence[str] | None, *, runs: Sequence[Run] | None = None) -> list[Run]:
    """Runs by id or unique id prefix; every readable run with generations when ``names`` is empty
    (of ``runs``, the store's readable runs when the caller has just listed them, else listed here)."""
    if not names:
        return [r for r in (store.runs() if runs is None else runs) if r.has_table("generations")]
    return [resolve_run(store, name) for name in names]


def resolve_run(store: RunStore, name: str) -> Run:
    """A run by id or unique id prefix (:class:`ConfigurationError` naming the candidates otherwise)."""
    try:
        return store.get(name)
    except StoreError:
        if _run_folder_exists(store, name):  # the run is there but unreadable: say so, not "no run"
            raise
    matches = [r for r in store.runs() if r.run_id.startswith(name)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ConfigurationError(f"no run {name!r} in {store.runs_dir}")
    raise ConfigurationError(f"{name!r} matches {len(matches)} runs: {', '.join(r.run_id for r in matches[:5])}")


def _run_folder_exists(store: RunStore, name: str) -> bool:
    try:
        return bool(store.run_path(name).is_dir())
    except StoreError:  # not even a valid run id
        return False
