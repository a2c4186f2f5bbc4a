"""Fewer passes of Python's cyclic garbage collector while a scoring pass runs, and memory given
back to the system between the datasets of a pass (:func:`give_back_memory`).

A pass builds millions of short-lived containers (a lexical pass over the 58 published runs: an
item and a value tuple per reply, the n-gram tables of 56,075 replies), and at Python's
default pace (a young-generation collection every 700 allocations) the collector walked every live
object of the process again and again: a quarter of the ``score`` process's CPU, and 8% of a
kernel worker's. None of those objects form reference cycles, so collecting them less often frees
nothing later than their reference counts already do; the cycles pandas and pyarrow make are still
collected, every :data:`PASS_THRESHOLD` allocations instead of 700.

Stdlib only: the lexical worker processes import it with :mod:`persobench.core.ngram_kernels` alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import threading
from typing import Iterator

__all__ = ["PASS_THRESHOLD", "fewer_collections", "give_back_memory", "pace_this_process"]

#: Allocations between two young-generation collections during a pass (Python's default is 700).
PASS_THRESHOLD = 50_000

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, ...] | None = None


@contextlib.contextmanager
def fewer_collections(threshold: int = PASS_THRESHOLD) -> Iterator[None]:
    """Run the block with the young generation collected every ``threshold`` allocations (never
    more often than it already was); the previous pace is restored when the last of the blocks
    that overlap (threads of one process, nested passes) ends, even on an error."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(max(threshold, _saved[0]), *_saved[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                _saved = None


def pace_this_process(threshold: int = PASS_THRESHOLD) -> None:
    """For a worker process that only scores (the lexical pool's): collect at the pass's pace for
    the rest of its life."""
    current = gc.get_threshold()
    gc.set_threshold(max(threshold, current[0]), *current[1:])


def give_back_memory() -> None:
    """Collect what is left in cycles, then have the C allocator return its free pages to the
    system (glibc's ``malloc_trim``; nothing elsewhere). A pass frees a dataset's embeddings and
    tables when it moves on, but the allocator kept the pages: the next dataset's peak stacked
    on top of them."""
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
