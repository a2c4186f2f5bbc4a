"""Forward passes in streams: on a CPU, several single-threaded passes of an embedding model at
once instead of one pass split over every core (:class:`~persobench.metrics.encoders.encoder.TextEncoder`
runs its fixed-shape batches through :func:`run_in_streams`).

Why: a model of MiniLM's size (6 layers, 384 wide, batches of 32 x 8-64 tokens) does not give
torch's intra-op threads enough work per operation; they wait for each other at every step. Two
single-threaded passes on 2 cores gave 1.13-1.21x the tokens per second of one two-threaded pass,
and while they run the calling thread tokenizes the next batches and matches the finished ones.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator

from persobench.metrics.backends import BackendUnavailable


def forward_streams(device: str) -> int:
    """How many forward passes the encoder runs at once on ``device``: on a CPU, one per thread
    torch would use (``torch.get_num_threads()``), each single-threaded; the values are the same
    bits as one pass at a time (``tests/test_metrics_encoder.py``). On an accelerator, one: it is
    one device. ``PERSOBENCH_ENCODER_STREAMS`` sets the number (1: one pass at a time)."""
    override = os.environ.get("PERSOBENCH_ENCODER_STREAMS", "").strip()
    if override:
        try:
            return max(1, int(override))
        except ValueError:
            raise BackendUnavailable(f"PERSOBENCH_ENCODER_STREAMS={override!r}: expected a whole number "
                                     "of forward passes to run at once") from None
    if not str(device).startswith("cpu"):
        return 1
    import torch

    return max(1, torch.get_num_threads())


def run_in_streams(batches: Iterable[tuple[int, list[Any]]], inputs: Callable[[int, list[Any]], Any],
                   run: Callable[[Any], Any], streams: int) -> Iterator[tuple[int, list[Any], Any]]:
    """``(length, chunk, run(inputs(length, chunk)))`` in the order of ``batches``, ``run`` in
    ``streams`` threads with torch's intra-op threads set to one while they work (torch releases
    the interpreter lock inside its kernels, so the threads run in parallel); at most two batches
    per stream are in flight. torch's thread count is restored when the passes end or stop."""
    import torch

    _single_threaded_enter(torch)
    pool = ThreadPoolExecutor(max_workers=streams, thread_name_prefix="persobench-encoder")
    pending: deque = deque()
    try:
        for length, chunk in batches:
            pending.append((length, chunk, pool.submit(run, inputs(length, chunk))))
            if len(pending) >= 2 * streams:
                length, chunk, future = pending.popleft()
                yield length, chunk, future.result()
        while pending:
            length, chunk, future = pending.popleft()
            yield length, chunk, future.result()
    finally:
        for _length, _chunk, future in pending:
            future.cancel()
        pool.shutdown(wait=True)
        _single_threaded_exit(torch)


# torch's thread count is one setting for the process, and two encoders' passes may overlap (the
# scoring thread may embed a leftover text while the encoder thread embeds the next dataset): the
# first to start sets it, the last to finish restores it.
_THREADS_LOCK = threading.Lock()
_threads_state = {"users": 0, "before": 1}


def _single_threaded_enter(torch: Any) -> None:
    with _THREADS_LOCK:
        if _threads_state["users"] == 0:
            _threads_state["before"] = torch.get_num_threads()
            torch.set_num_threads(1)
        _threads_state["users"] += 1


def _single_threaded_exit(torch: Any) -> None:
    with _THREADS_LOCK:
        _threads_state["users"] -= 1
        if _threads_state["users"] == 0:
            torch.set_num_threads(_threads_state["before"])
