"""Replies the response cache could not store (full disk, file size limit), kept for the next run.

A paid reply is never dropped: when the cache refuses a write, the reply is appended to a recovery
file, ``<run folder>/recovered.jsonl``, or, when the run's disk refuses that too, to
``<temp dir>/persobench-<uid>/recovered-<run id>.jsonl`` (usually another file system). The next
``run`` of the same configuration moves every recovered reply into the cache before planning, so
it is not requested again, then deletes the file.

A recovery file becomes cached replies, so it is trusted only as far as it must be (the temp dir is
writable by everyone, and run ids are predictable):

- the temp-dir fallback is a private folder: created ``0700``, and used (written or read) only when
  it is a real directory (not a symlink) owned by this user that nobody else can enter;
- files are opened relative to their folder with ``O_NOFOLLOW``: a planted symlink is never
  followed, so a refused write can never be redirected into another file;
- files are opened without blocking (``O_NONBLOCK``) and used only when they are regular files owned
  by this user: a FIFO or device planted under the name never holds a run up (opening a FIFO for
  reading waits for a writer, for writing for a reader, and a signal does not end that wait);
- each line names its run and key; a line of another run, or with a key the run does not request,
  is never imported;
- a write that fails part-way is cut back, and a recovery file left empty is removed.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Collection, Iterator

from persobench.store.files import jsonl_lines
from persobench.llm.response_cache import ResponseCache
from persobench.providers.base import Completion

RECOVERY_FILE = "recovered.jsonl"
_KEY = re.compile(r"[0-9a-f]{64}")
# O_NOFOLLOW / O_DIRECTORY are POSIX; where missing (Windows) the ownership check still applies.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# Opening a FIFO blocks until the other end is opened; a device may block too. With O_NONBLOCK the
# open returns at once, and fstat tells a regular file from the rest before anything is read.
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def _uid() -> int | None:
    return os.geteuid() if hasattr(os, "geteuid") else None


def private_dir() -> Path:
    """The per-user fallback folder in the temp dir (``persobench-<uid>``)."""
    return Path(tempfile.gettempdir()) / f"persobench-{_uid() if _uid() is not None else 'user'}"


def recovery_paths(run_path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Where a run's unsaved replies go: in its folder first, then in the private temp folder."""
    run_path = Path(run_path)
    return run_path / RECOVERY_FILE, private_dir() / f"recovered-{run_path.name}.jsonl"


def _owned(info: os.stat_result) -> bool:
    uid = _uid()
    return uid is None or info.st_uid == uid


def _open_folder(folder: Path, *, private: bool, create: bool) -> int | None:
    """A descriptor of ``folder``, or None when it is missing or (``private``) not safe to use: a
    symlink, another user's, or open to group/others."""
    if create and private:
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        fd = os.open(folder, os.O_RDONLY | _DIRECTORY | _CLOEXEC | (_NOFOLLOW if private else 0))
    except OSError:  # missing, a symlink (ELOOP), not a directory
        return None
    info = os.fstat(fd)
    if not stat.S_ISDIR(info.st_mode) or (private and (not _owned(info) or info.st_mode & 0o077)):
        os.close(fd)
        return None
    return fd


def _folder_fd(path: Path, *, create: bool) -> int | None:
    private = path.parent == private_dir()
    return _open_folder(path.parent, private=private, create=create)


def _append(path: Path, line: bytes) -> bool:
    """Append ``line`` to ``path`` (never through a symlink, only to this user's regular file);
    False, leaving no partial line and no empty file behind, when that fails."""
    folder = _folder_fd(path, create=True)
    if folder is None:
        return False
    fd = None
    try:
        fd = os.open(path.name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _NONBLOCK | _CLOEXEC, 0o600,
                     dir_fd=folder)  # a FIFO nobody reads: ENXIO at once, never a wait
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or not _owned(info):
            return False
        os.set_blocking(fd, True)
        before = info.st_size
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            return True
        except OSError:
            try:  # cut the partial line: the file holds whole replies only
                os.ftruncate(fd, before)
                if before == 0:
                    os.unlink(path.name, dir_fd=folder)
            except OSError:
                pass
            return False
    except OSError:
        return False
    finally:
        if fd is not None:
            os.close(fd)
        os.close(folder)


def keep_reply(run_path: str | os.PathLike[str], key: str, completion: Completion, latency: float) -> Path | None:
    """Append one reply to the first recovery file that accepts it; its path, or ``None`` when no
    disk accepted it."""
    run_id = Path(run_path).name
    line = json.dumps({"run": run_id, "key": key, "completion": completion.to_dict(), "latency": latency},
                      ensure_ascii=False) + "\n"
    for path in recovery_paths(run_path):
        if _append(path, line.encode("utf-8")):
            return path
    return None


def _read(path: Path) -> tuple[bytes, int] | None:
    """The bytes of this user's regular file ``path`` (never through a symlink, never waiting on a
    FIFO) and its folder's descriptor (the caller closes it), or None."""
    folder = _folder_fd(path, create=False)
    if folder is None:
        return None
    try:
        fd = os.open(path.name, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC, dir_fd=folder)
    except OSError:  # missing, or a symlink
        os.close(folder)
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or not _owned(info):  # a FIFO, a device, a folder: left alone
            os.close(folder)
            return None
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read(), folder
    except OSError:
        os.close(folder)
        return None
    finally:
        os.close(fd)


def _entries(text: bytes, run_id: str, keys: Collection[str] | None,
             legacy: bool) -> Iterator[tuple[str, Completion, float]]:
    for line in jsonl_lines(text.decode("utf-8", errors="replace")):
        try:
            data = json.loads(line)
            key = str(data["key"])
            # Lines written before runs were named (legacy) are accepted only from the run's own folder.
            if data.get("run", run_id if legacy else None) != run_id or not _KEY.fullmatch(key):
                continue
            if keys is not None and key not in keys:
                continue
            yield key, Completion.from_dict(data["completion"]), float(data.get("latency") or 0.0)
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # a line cut by the full disk: that reply was not kept


def restore_replies(run_path: str | os.PathLike[str], cache_dir: str | os.PathLike[str],
                    keys: Collection[str] | None = None) -> int:
    """Move the run's recovered replies into the response cache; how many. Only lines naming this
    run (and, when ``keys`` is given, one of the run's cache keys) are imported. A recovery file is
    deleted only once all its replies are in the cache; a file that is not this user's regular
    file is left alone and ignored."""
    run_id = Path(run_path).name
    wanted = set(keys) if keys is not None else None
    restored = 0
    for n, path in enumerate(recovery_paths(run_path)):
        found = _read(path)
        if found is None:
            continue
        text, folder = found
        try:
            entries = list(_entries(text, run_id, wanted, legacy=n == 0))
            if entries:
                with ResponseCache(cache_dir) as cache:
                    for key, completion, latency in entries:
                        if key not in cache:
                            cache.set(key, completion, latency=latency)
                            restored += 1
            try:
                os.unlink(path.name, dir_fd=folder)
            except OSError:
                pass
        finally:
            os.close(folder)
    return restored
