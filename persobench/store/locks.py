"""The two locks of a run folder, both ``flock`` on a file in it, released by the operating system
however the holder ends (SIGKILL included), so no lock is ever left stale:

- the **state lock** (:data:`STATE_LOCK`), held for milliseconds by every process around a
  read-merge-write of a run's manifest or tables (:func:`hold_state_lock`);
- the **run lock** (:data:`RUN_LOCK`), held by the process generating a run for as long as it runs
  (:mod:`persobench.generation.lock`); :func:`lock_holder` says who holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from persobench.errors import StoreBusy
from persobench.store.files import write_refused

#: The file every process holds (``flock``, exclusive) while it reads, merges and writes a run's
#: manifest or tables, so no change is ever computed from a stale copy and written over a newer one.
STATE_LOCK = "state.lock"
#: How long a state change waits for another process's change to the same run before giving up.
STATE_LOCK_TIMEOUT_S = 120.0
#: The file a generating process holds with ``flock`` for as long as it runs (its pid inside):
#: :mod:`persobench.generation.lock`.
RUN_LOCK = "lock"


def read_pid(handle: Any) -> int | None:
    try:
        handle.seek(0)
        return int(handle.read().strip() or 0) or None
    except (OSError, ValueError):
        return None


def lock_holder(run_path: str | os.PathLike[str]) -> int | None:
    """The pid holding the run's generation lock (0 when it cannot be read), or ``None`` when nobody does."""
    try:
        handle = open(Path(run_path) / RUN_LOCK, encoding="ascii")
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return read_pid(handle) or 0
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        return None


#: In-process re-entrancy of the state lock: ``flock`` on a second descriptor of the same file would
#: block the process against itself, so nested holders in one process share the first descriptor.
_HELD: dict[str, tuple[threading.RLock, list[Any]]] = {}
_HELD_GUARD = threading.Lock()


@contextlib.contextmanager
def hold_state_lock(run_path: str | os.PathLike[str], *, timeout: float = STATE_LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold ``run_path``'s state lock (:data:`STATE_LOCK`) for the ``with`` block.

    Every process that changes a run (generation, scoring, import, the app) takes it around its
    read-merge-write, so changes are serialised and each starts from what is on disk. Holders wait
    their turn (a change takes milliseconds); after ``timeout`` seconds :class:`StoreBusy`."""
    key = str(Path(run_path).resolve())
    with _HELD_GUARD:
        local, state = _HELD.setdefault(key, (threading.RLock(), [None, 0]))
    with local:
        if state[1] == 0:
            try:
                handle = open(Path(run_path) / STATE_LOCK, "a+b")
            except OSError as exc:
                raise write_refused(Path(run_path) / STATE_LOCK, exc) from exc
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        handle.close()
                        raise StoreBusy(f"{Path(run_path) / STATE_LOCK}: another process kept this run busy for "
                                        f"{timeout:.0f} s; try again when it has finished") from None
                    time.sleep(0.01)
            state[0] = handle
        state[1] += 1
        try:
            yield
        finally:
            state[1] -= 1
            if state[1] == 0:
                state[0].close()  # closing releases the flock
                state[0] = None
