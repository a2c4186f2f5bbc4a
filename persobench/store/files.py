"""Files that are never half-written: atomic writes (temporary file, fsync, rename), checksums, the
output a user names (:func:`write_output`: a file, a device or a FIFO), and the one-line error for a
write the disk refused. Used by the store and by every stage that writes."""

from __future__ import annotations

import datetime as _dt
import errno
import hashlib
import importlib.util
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from persobench.errors import StoreError, StoreWriteError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def canonical_json(value: Any) -> str:
    """Deterministic JSON used for hashing (sorted keys, no whitespace)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def sha256_hex(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def file_version(path: str | os.PathLike[str]) -> tuple[str, int, int]:
    """(resolved path, size, modification time in ns): what changes when a file is replaced or
    edited, for a per-process cache of something read from it."""
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return str(resolved), stat.st_size, stat.st_mtime_ns


def jsonl_lines(text: str) -> list[str]:
    """The lines of a JSONL document, split on ``"\n"`` only. ``str.splitlines`` also breaks at
    U+2028, U+2029, U+0085 and a few control characters, which JSON allows raw inside a string (and
    ``json.dumps(..., ensure_ascii=False)`` writes raw): a record holding one would be cut in two. A
    ``"\r"`` before the ``"\n"`` stays on the line, where JSON reads it as whitespace."""
    return text.split("\n")


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some filesystems do not allow opening directories
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_refused(path: str | os.PathLike[str], exc: BaseException) -> StoreWriteError:
    """The one-line error for a write the disk refused or that failed: an ``OSError`` (full disk,
    file size limit, quota) or a database error of the response cache (``sqlite3.Error``)."""
    if isinstance(exc, OSError):
        reason = {errno.ENOSPC: "the disk is full", errno.EFBIG: "the file would exceed the size limit",
                  errno.EDQUOT: "the disk quota is exhausted"}.get(exc.errno or 0, exc.strerror or str(exc))
    else:
        reason = f"{str(exc) or type(exc).__name__} (is the disk full?)"
    return StoreWriteError(f"{path}: cannot write: {reason}")


def _atomic_write(path: Path, fill: "Callable[[str], object]", *, durable: bool = True) -> None:
    """Have ``fill`` write a temporary file beside ``path``, fsync it, rename it over ``path``.

    A refused write (full disk, file size limit) raises :class:`StoreWriteError` naming ``path``;
    the previous file stays as it was and no temporary file is left behind. ``durable=False`` skips
    the fsyncs: readers still see the old file or the new one (the rename is atomic, a killed
    process leaves no half file), only a power cut may lose the new one; for files rewritten often
    from an event loop (progress), where an fsync on a busy disk stalls every request in flight."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        fill(tmp)
        if durable:
            with open(tmp, "rb+") as handle:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):  # pyarrow raises OSError subclasses for a refused write too
            raise StoreWriteError(f"{write_refused(path, exc)} (the previous file, if any, is unchanged)") from exc
        raise
    if durable:
        _fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so that readers see either the old file or the new one."""
    _atomic_write(path, lambda tmp: Path(tmp).write_bytes(data), durable=durable)


def atomic_write_text(path: Path, text: str, *, durable: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


def write_output(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to the file a user named as a command's output (``report -o``, ``export -o``).

    A regular file, or a name that does not exist yet, is written atomically (a half-written file
    never replaces a good one); through a symlink, the file it points to is written and the link
    kept. A character device or a FIFO (``/dev/null``, ``/dev/stdout``, a named pipe) is written
    into, as the shell's ``>`` does, never replaced by a file. Anything else (a folder, a socket, a
    block device) is refused in one line, and left as it is. A write refused (``/dev/full``, a full
    disk) is a :class:`StoreWriteError` naming ``path``."""
    path = Path(path)
    try:
        info = os.stat(path)  # through symlinks: /dev/stdout is one
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise StoreWriteError(f"{path}: cannot write: {exc.strerror or exc}") from None
    if info is not None and (stat.S_ISCHR(info.st_mode) or stat.S_ISFIFO(info.st_mode)):
        if _write_into(path, data):
            return
    elif info is not None and not stat.S_ISREG(info.st_mode):
        raise StoreWriteError(f"{path}: is {_kind(info.st_mode)}, not a file; not replaced (name a file, or - for "
                              "standard output)")
    atomic_write_bytes(Path(os.path.realpath(path)) if path.is_symlink() else path, data)


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket"), (stat.S_ISBLK, "a block device"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _write_into(path: Path, data: bytes) -> bool:
    """Write ``data`` into the character device or FIFO at ``path`` (no file is created or cut);
    False when what was opened turned out to be a regular file after all (replaced meanwhile)."""
    try:
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise write_refused(path, exc) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            return False
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        raise write_refused(path, exc) from None
    finally:
        os.close(fd)
    return True


def atomic_write_json(path: Path, value: Any, *, durable: bool = True) -> None:
    atomic_write_text(path, json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n", durable=durable)


def atomic_write_parquet(path: Path, frame: "pd.DataFrame | pa.Table") -> None:
    """Write a DataFrame (or an Arrow table made from one) as Parquet atomically (temp file + fsync + rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = frame if isinstance(frame, pa.Table) else pa.Table.from_pandas(frame, preserve_index=False, nthreads=1)
    _atomic_write(path, lambda tmp: pq.write_table(table, tmp))


def read_parquet_lists(path: Path, columns: "Sequence[str]") -> dict[str, list]:
    """Columns of a Parquet table as Python lists (null -> None), those of ``columns`` the table has;
    a failure is a :class:`StoreError` naming the file, as for :func:`read_parquet`.

    For a caller that walks the values in Python (planning a scoring pass): no DataFrame is built,
    which costs five times the read on a run's generations table. One file, read as such: a
    ``pq.read_table`` goes through pyarrow's dataset layer, whose import pulls in pandas (a quarter
    of a second before a ``score`` pass could start computing)."""
    table = read_arrow(path, columns)
    return {name: table.column(name).to_pylist() for name in table.column_names}


def read_arrow(path: Path, columns: "Sequence[str]") -> "pa.Table":
    """Columns of a Parquet table as an Arrow table, those of ``columns`` the table has; a failure
    is a :class:`StoreError` naming the file, as for :func:`read_parquet`. For a caller that works
    on whole columns in Arrow or numpy: no DataFrame, no Python string per value."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        raise StoreError(f"{path}: table not found")
    try:
        with pq.ParquetFile(path) as handle:
            present = set(handle.schema_arrow.names)
            return handle.read(columns=[c for c in columns if c in present], use_threads=False)
    except Exception as exc:  # pyarrow raises several unrelated types for damaged files
        raise StoreError(f"{path}: unreadable or corrupt Parquet table ({type(exc).__name__}: {exc})") from exc


def read_parquet(path: Path, columns: "Sequence[str] | None" = None) -> "pd.DataFrame":
    """Read a Parquet table, turning any failure into a :class:`StoreError` that names the file.

    ``columns``: only those of them the table has (the caller checks for the ones it needs); a
    generations table's raw outputs are most of its bytes, and scoring reads none of them."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise StoreError(f"{path}: table not found")
    try:
        if columns is not None:
            import pyarrow.parquet as pq

            present = set(pq.read_schema(path).names)
            columns = [c for c in columns if c in present]
        return pd.read_parquet(path, columns=columns)
    except Exception as exc:  # pyarrow raises several unrelated types for damaged files
        raise StoreError(f"{path}: unreadable or corrupt Parquet table ({type(exc).__name__}: {exc})") from exc


def module_sources(modules: "Sequence[str]") -> list[Path]:
    """The source file of each module named in ``modules`` (dotted names, found without importing
    them), for a cache key that changes with the code that built what it caches. A name that no
    longer resolves (a module moved or renamed) raises :class:`ModuleNotFoundError` at once, rather
    than quietly leaving that code out of the key."""
    paths = []
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin or not Path(spec.origin).is_file():
            raise ModuleNotFoundError(f"cache key: no source file for module {name!r}", name=name)
        paths.append(Path(spec.origin))
    return paths
