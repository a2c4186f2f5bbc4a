"""The response cache: every reply received is stored before anything else happens to it.

One on-disk :mod:`diskcache` store (SQLite underneath, one committed transaction per reply) shared
by all providers and runs, at ``<home>/responses`` by default. It never evicts: diskcache's default
policy silently drops entries once the store passes 1 GB, which would make a resumed run pay again.

The key is the sha256 of canonical JSON of exactly what determines the reply:

* provider, model, base URL (trailing "/" ignored) and the output-affecting model options;
* the messages;
* every decoding parameter (temperature, max tokens, top_p, seed, stop);
* the sample id when temperature > 0 (each sample is its own draw) or when the provider reads the
  sample itself (baselines).

Timeouts, retry settings, concurrency, headers and the API key are not in the key: changing them
must not cost a new request, and a key must never reach the disk. Errors are never stored.

:class:`GroupCommitCache` is the same store for many replies arriving at once (generation at
concurrency K): the replies one step of the event loop received are committed together, one
transaction instead of one per reply, and the caller counts a reply as done only once it is committed.

:class:`ReplyClaims` lets senders that share a cache folder ask for each key once: the first to
claim a key sends its request, the others wait for its reply in the cache (the LLM judge's passes,
in one process or several).
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import hashlib
import json
import os
import sqlite3
import struct
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from persobench.errors import StoreError
from persobench.llm.usage import usable_usage
from persobench.providers.base import Completion, GenerationParams
from persobench.store.files import sha256_hex, write_refused

#: Bump when the key payload's shape changes, so old entries are not misread.
KEY_VERSION = 1


def cache_key(
    *,
    provider: str,
    model: str,
    base_url: str | None,
    messages: Sequence[Mapping[str, str]],
    params: GenerationParams,
    options: Mapping[str, Any] | None = None,
    sample_id: str | None = None,
    sample_dependent: bool = False,
) -> str:
    """The cache key of one request (64 hex digits)."""
    payload: dict[str, Any] = {
        "v": KEY_VERSION,
        "provider": provider,
        "model": model,
        "base_url": (base_url or "").rstrip("/") or None,
        "options": dict(options or {}),
        "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
        "params": params.to_dict(),
    }
    if params.temperature > 0 or sample_dependent:
        if sample_id is None:
            raise ValueError("a sampled (temperature > 0) or sample-dependent request needs its sample id in the key")
        payload["sample_id"] = sample_id
    return sha256_hex(payload)


class ResponseCache:
    """A durable map from :func:`cache_key` to the reply (as JSON text, readable with sqlite3)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        import diskcache

        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # eviction_policy="none": never drop a paid-for reply. cull_limit=0 as a second guard.
            self._cache = diskcache.Cache(str(self.directory), eviction_policy="none", cull_limit=0)
        except (OSError, sqlite3.OperationalError) as exc:  # a full disk ("disk I/O error"): one line naming the file
            raise write_refused(self.directory / "cache.db", exc) from None
        except sqlite3.DatabaseError as exc:  # "file is not a database"  # a damaged file: say which and how to get past it
            raise damaged_cache_error(self.directory, exc) from None

    def get(self, key: str) -> tuple[Completion, float] | None:
        """The stored completion and the latency it originally took, or ``None``."""
        raw = self._cache.get(key)
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            # Token counts an older version stored unchecked are dropped (the text was paid for and stays).
            return usable_usage(Completion.from_dict(data["completion"])), float(data.get("latency") or 0.0)
        except (TypeError, ValueError, KeyError, AttributeError, RecursionError):
            return None  # an unreadable entry is a miss: the request is simply made again

    def __contains__(self, key: str) -> bool:
        return key in self._cache

    def set(self, key: str, completion: Completion, *, latency: float) -> None:
        """Store a reply; committed to disk when this returns (survives SIGKILL of the process)."""
        self._cache.set(key, _entry(completion, latency, time.time()))

    def set_many(self, replies: Sequence[tuple[str, Completion, float, float]]) -> None:
        """Store ``(key, completion, latency, stored_at)`` replies in ONE transaction: all of them are
        committed when this returns, or none is (an error rolls the transaction back). SQLite's cost
        of storing a small reply is mostly its commit (a write-ahead-log append of every page the
        insert touched); one commit for several replies pays it once."""
        entries = [(key, _entry(completion, latency, stored_at)) for key, completion, latency, stored_at in replies]
        with self._cache.transact():
            for key, value in entries:
                self._cache.set(key, value)

    def __len__(self) -> int:
        return len(self._cache)

    @property
    def eviction_policy(self) -> str:
        return str(self._cache.eviction_policy)

    def volume(self) -> int:
        """Bytes on disk."""
        return int(self._cache.volume())

    def close(self) -> None:
        self._cache.close()

    def __enter__(self) -> "ResponseCache":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _entry(completion: Completion, latency: float, stored_at: float) -> str:
    """The stored form of one reply (JSON text, readable with sqlite3)."""
    return json.dumps({"completion": completion.to_dict(), "latency": latency, "stored_at": stored_at},
                      ensure_ascii=False)


#: What a commit the disk refused calls for each of its replies: (key, completion, latency, error).
RefusedReply = Callable[[str, Completion, float, BaseException], None]


class GroupCommitCache(ResponseCache):
    """A response cache for the replies of one event loop: :meth:`set` queues the reply, and every
    reply queued during one step of the loop is committed in one transaction at the start of the
    next step (:meth:`commit`); then the callbacks given to :meth:`after_commit` run, in the order
    given. A caller that counts, parses or writes a reply only in such a callback keeps the
    guarantee that a crash loses no reply reported done; a SIGKILL in the step between a reply's
    arrival and its commit loses that reply (paid, not yet reported: the next run asks for it again).

    ``on_refused(key, completion, latency, error)`` is called for each reply of a commit the disk
    refused (full disk: the transaction rolled back, none of its replies is stored), before the
    callbacks run. A scheduled commit whose callbacks raise keeps the first exception in
    :attr:`failure` and calls ``on_failure`` (the event loop would only log it)."""

    def __init__(self, directory: str | os.PathLike[str], *, on_refused: RefusedReply,
                 on_failure: Callable[[BaseException], None]) -> None:
        super().__init__(directory)
        self.on_refused = on_refused
        self.on_failure = on_failure
        self.failure: BaseException | None = None
        """The first exception a scheduled commit or one of its callbacks raised."""
        self._queued: list[tuple[str, Completion, float, float]] = []
        self._waiting: list[Callable[[], None]] = []
        self._scheduled = False

    @property
    def queued(self) -> int:
        """Replies received and not committed yet."""
        return len(self._queued)

    def set(self, key: str, completion: Completion, *, latency: float) -> None:
        """Queue a reply for the commit at the start of the loop's next step (see the class)."""
        self._queued.append((key, completion, latency, time.time()))
        if not self._scheduled:
            self._scheduled = True
            try:
                asyncio.get_running_loop().call_soon(self._scheduled_commit)
            except RuntimeError:  # no event loop: nothing to wait for, commit now
                self.commit()

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once every reply queued so far is committed: at once when none is queued."""
        if self._queued:
            self._waiting.append(callback)
        else:
            callback()

    def commit(self) -> None:
        """Commit the queued replies in one transaction, then run the callbacks waiting for them
        (all of them; the first exception one raised is raised after the last)."""
        self._scheduled = False
        replies, self._queued = self._queued, []
        waiting, self._waiting = self._waiting, []
        if replies:
            try:
                self.set_many(replies)
            except (OSError, sqlite3.Error) as exc:
                for key, completion, latency, _ in replies:
                    self.on_refused(key, completion, latency, exc)
            except BaseException:  # Ctrl-C or a locked database: nothing stored, so keep them for close()
                self._queued[:0], self._waiting[:0] = replies, waiting
                raise
        error: BaseException | None = None
        for callback in waiting:
            try:
                callback()
            except BaseException as exc:  # noqa: BLE001 - raised below, after the other replies are recorded
                error = error or exc
        if error is not None:
            raise error

    def _scheduled_commit(self) -> None:
        try:
            self.commit()
        except BaseException as exc:  # noqa: BLE001 - handed to the owner: a loop callback's error is only logged
            if self.failure is None:
                self.failure = exc
            self.on_failure(exc)

    def close(self) -> None:
        """Commit what is queued (and run its callbacks), then close the store."""
        try:
            self.commit()
        finally:
            super().close()


#: The file, in a response-cache folder, whose bytes the claims lock (nothing is ever written to it).
CLAIMS_FILE = "claims.lock"
#: Linux's open-file-description record locks (absent elsewhere: claims then hold within a process only).
_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", None)
#: Keys claimed in this process when the claims file cannot be locked (other platforms, filesystems).
_LOCAL_CLAIMS: set[tuple[str, str]] = set()
_LOCAL_LOCK = threading.Lock()


class ReplyClaims:
    """Claims on the keys of one response-cache folder, shared by every process and thread that
    opens it: whoever claims a key first (:meth:`claim`) sends its request and releases it once
    the reply is cached (or the request failed); the others find the key claimed and wait for the
    reply in the cache, or claim it themselves when the holder gave up.

    A claim is a write lock on one byte of ``<cache>/claims.lock`` at an offset taken from the key
    (Linux open-file-description locks, ``F_OFD_SETLK``): held per open file, so two claimers in one
    process exclude each other as two processes do, and released by the kernel when the holder ends,
    however it ends (SIGKILL included), like generation's run lock. Nothing is written to the file.
    Where such locks are not available, claims hold between the threads of one process only."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory) / CLAIMS_FILE
        self._fd: int | None = None
        if _OFD_SETLK is not None:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:  # a read-only folder: claims within this process only
                self._fd = None
        self._local: set[str] = set()

    @staticmethod
    def _offset(key: str) -> int:
        return int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:15], 16)

    def _lock(self, key: str, kind: int) -> bool:
        assert self._fd is not None and _OFD_SETLK is not None
        # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for open-file-description locks)
        record = struct.pack("hhqqi4x", kind, os.SEEK_SET, self._offset(key), 1, 0)
        try:
            fcntl.fcntl(self._fd, _OFD_SETLK, record)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            os.close(self._fd)  # a filesystem without such locks: within this process from now on
            self._fd = None
            return self._local_claim(key)
        return True

    def _local_claim(self, key: str) -> bool:
        with _LOCAL_LOCK:
            if (str(self.path), key) in _LOCAL_CLAIMS:
                return False
            _LOCAL_CLAIMS.add((str(self.path), key))
        self._local.add(key)
        return True

    def claim(self, key: str) -> bool:
        """Claim ``key`` (without waiting): True when it is ours now, False when another holds it."""
        if self._fd is None:
            return self._local_claim(key)
        return self._lock(key, fcntl.F_WRLCK)

    def release(self, key: str) -> None:
        """Give ``key`` up (its reply is cached, or its request failed or was not sent)."""
        if key in self._local:
            self._local.discard(key)
            with _LOCAL_LOCK:
                _LOCAL_CLAIMS.discard((str(self.path), key))
        elif self._fd is not None:
            self._lock(key, fcntl.F_UNLCK)

    def close(self) -> None:
        """Release every claim still held."""
        for key in list(self._local):
            self.release(key)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "ReplyClaims":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def damaged_cache_error(directory: str | os.PathLike[str], exc: Exception) -> StoreError:
    """The one-line error for a response cache SQLite cannot read: which file, and the way out."""
    database = Path(directory) / "cache.db"
    return StoreError(
        f"{database}: the response cache is damaged ({exc}); move the folder aside "
        f"(mv {Path(directory)} {Path(directory)}.damaged) and run again: the runs in the store's runs/ folder "
        "are intact (tables, scores), but generating a run again requests its replies again"
    )


def default_cache_dir(home: str | os.PathLike[str]) -> Path:
    """``<home>/responses``: next to the runs, shared by all of them."""
    return Path(home) / "responses"
