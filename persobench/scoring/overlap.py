"""A bounded pipeline for a scoring pass on this machine: while run N is computed, run N+1 is planned
and run N-1 is written (:func:`ahead`).

Each step stays where the pass puts it: the driver (the thread that called
:func:`~persobench.scoring.score_pass.score_runs`) still writes every run under the run's lock, one
at a time; planning only reads the store; the compute step reads nothing. What moves is only *when*
they run: planning and computing run in two threads of their own, each at most ``depth`` items ahead
of the step that consumes them, so a pass never holds more than a few runs' work in memory. The
lexical kernels run in worker processes (:func:`persobench.metrics.lexical.worker_pool`), each run
sent to them as soon as it is planned (:func:`persobench.metrics.lexical.send_ahead`), and reading
and writing Parquet and ``fsync`` release the interpreter's lock, so the steps really overlap.

A failure in a thread reaches the driver as the same exception, at the point where the failed item
would have come; when the driver stops (an error, a signal), :class:`Stop` tells the threads to stop
producing, and they end at their next item.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")

#: How long a blocked thread waits before it checks whether the pass stopped.
_POLL_S = 0.1


class _End:
    """The producer is done (``error``: why it stopped early, re-raised in the consumer)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


class Stop:
    """Shared by the threads of one pass: set when the driver stops consuming."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.threads: list[threading.Thread] = []

    def set(self) -> None:
        self.event.set()

    def join(self, timeout: float = 5.0) -> None:
        """Wait (up to ``timeout`` each) for the threads to end once stopped."""
        for thread in self.threads:
            thread.join(timeout)


def _put(box: "queue.Queue[object]", item: object, stop: Stop) -> bool:
    while not stop.event.is_set():
        try:
            box.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def ahead(items: Iterable[T], stop: Stop, *, depth: int = 2, name: str = "persobench-score") -> Iterator[T]:
    """``items``, produced by a thread of their own up to ``depth`` items ahead of the consumer.

    The thread runs in a copy of the caller's context (the lexical worker pool is a context
    variable). An exception raised while producing is raised here, after the items made before it."""
    box: "queue.Queue[object]" = queue.Queue(maxsize=depth)

    def produce() -> None:
        try:
            for item in items:
                if not _put(box, item, stop):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            _put(box, _End(exc), stop)
            return
        _put(box, _End(), stop)

    thread = threading.Thread(target=contextvars.copy_context().run, args=(produce,), name=name, daemon=True)
    stop.threads.append(thread)
    thread.start()
    while True:
        try:
            item = box.get(timeout=_POLL_S)
        except queue.Empty:
            if stop.event.is_set():
                return
            if not thread.is_alive() and box.empty():
                return  # defensive: the producer ended without its end marker (stopped)
            continue
        if isinstance(item, _End):
            if item.error is not None:
                raise item.error
            return
        yield item  # type: ignore[misc]
