"""Reading a downloaded archive's members safely: no links, no paths outside the root, and sizes capped.

A 200 KB zip can hold a 200 MB member of zeros (a "zip bomb"), and a mirror can send any number of
bytes. :class:`ArchiveLimits` caps the archive, each unpacked member and their total. A member's
declared size (zip or tar header) is checked before it is read, and the bytes actually produced are
counted while it is streamed to disk (headers can lie), so the cap holds whatever the archive says;
nothing is ever read whole into memory.
"""

from __future__ import annotations

import functools
import hashlib
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Callable

from persobench.errors import DatasetError

CHUNK = 1 << 16


class PaperArchiveError(DatasetError):
    """The archive could not be downloaded, verified or unpacked; the message says why in one line."""


class ArchiveTooLargeError(PaperArchiveError):
    """The archive or one of its members is over its cap; the message names it and the flag."""


@dataclass(frozen=True)
class ArchiveLimits:
    """The most bytes a fetch downloads and unpacks. The paper's data is about 45 MB unpacked, its
    largest file under 5 MB: the defaults leave a wide margin and still stop a bomb."""

    max_archive_bytes: int = 512 * 2**20
    """Largest archive downloaded (``--max-archive-bytes``), declared (Content-Length) or counted."""
    max_member_bytes: int = 64 * 2**20
    """Largest single unpacked file (``--max-member-bytes``), declared or counted."""
    max_unpacked_bytes: int = 2**30
    """Largest total of all unpacked files (``--max-unpacked-bytes``)."""

    def __post_init__(self) -> None:
        for name in ("max_archive_bytes", "max_member_bytes", "max_unpacked_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
                flag = "--" + name.replace("_", "-")
                raise ArchiveTooLargeError(f"{name} must be a whole number >= 1 and <= {MAX_LIMIT} (bytes), "
                                           f"got {value!r} ({flag})")


#: The largest cap accepted (1 TiB): a bigger number is a typo, not a limit.
MAX_LIMIT = 2**40


@dataclass(frozen=True)
class Member:
    """One regular member of an archive."""

    name: str
    """Its path inside the archive (posix)."""
    declared: int
    """The size its header declares (may lie)."""
    open: Callable[[], IO[bytes]]
    """A stream of its bytes."""


def list_members(archive: Path) -> list[tuple[str, Member | None]]:
    """(posix path, member or None for a directory) of every member; links are refused."""
    if archive.name.endswith(".zip"):
        try:
            handle = zipfile.ZipFile(archive)
        except zipfile.BadZipFile as exc:
            raise PaperArchiveError(f"{archive}: not a readable zip archive ({exc})") from None
        out: list[tuple[str, Member | None]] = []
        for info in handle.infolist():
            mode = info.external_attr >> 16
            if mode and (mode & 0o170000) == 0o120000:  # symlink
                raise PaperArchiveError(f"{archive}: refuses link member {info.filename!r}")
            out.append((info.filename, None if info.is_dir()
                        else Member(info.filename, info.file_size, functools.partial(handle.open, info))))
        return out
    try:
        handle_t = tarfile.open(archive)
    except (tarfile.TarError, OSError) as exc:
        raise PaperArchiveError(f"{archive}: not a readable tar archive ({exc})") from None
    out = []
    for member in handle_t.getmembers():
        if member.issym() or member.islnk() or not (member.isfile() or member.isdir()):
            raise PaperArchiveError(f"{archive}: refuses non-regular member {member.name!r}")
        out.append((member.name, None if member.isdir()
                    else Member(member.name, member.size, _tar_opener(archive, handle_t, member))))
    return out


def _tar_opener(archive: Path, handle: tarfile.TarFile, member: tarfile.TarInfo) -> Callable[[], IO[bytes]]:
    def open_member() -> IO[bytes]:
        stream = handle.extractfile(member)
        if stream is None:  # only a regular file is listed with an opener
            raise PaperArchiveError(f"{archive}: member {member.name!r} is not a regular file")
        return stream
    return open_member


def safe_parts(name: str, archive: Path) -> tuple[str, ...]:
    """The path parts of member ``name``; refuses absolute paths, ``..`` and backslashes."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\\" in name:
        raise PaperArchiveError(f"{archive}: refuses member outside the archive root: {name!r}")
    return tuple(p for p in path.parts if p not in ("", "."))


def _too_large(archive: Path, name: str, size: str, cap: int, flag: str) -> ArchiveTooLargeError:
    return ArchiveTooLargeError(f"{archive}: member {name} is {size} bytes, over the {cap}-byte cap ({flag}); "
                                "nothing unpacked")


def check_declared(archive: Path, members: list[tuple[str, Member]], limits: ArchiveLimits) -> None:
    """Refuse before unpacking anything when a header declares a member (or a total) over its cap."""
    total = 0
    for shown, member in members:
        if member.declared > limits.max_member_bytes:
            raise _too_large(archive, shown, str(member.declared), limits.max_member_bytes, "--max-member-bytes")
        total += member.declared
    if total > limits.max_unpacked_bytes:
        raise ArchiveTooLargeError(f"{archive}: its members total {total} bytes unpacked, over the "
                                   f"{limits.max_unpacked_bytes}-byte cap (--max-unpacked-bytes); nothing unpacked")


def copy_member(archive: Path, shown: str, member: Member, destination: Path, limits: ArchiveLimits,
                unpacked_so_far: int) -> tuple[int, str]:
    """Stream ``member`` into ``destination``, counting its bytes; (size, sha256). Over a cap it
    stops at once (at most one chunk past it) and raises."""
    digest = hashlib.sha256()
    size = 0
    with member.open() as source, open(destination, "wb") as out:
        while True:
            block = source.read(CHUNK)
            if not block:
                break
            size += len(block)
            if size > limits.max_member_bytes:
                raise _too_large(archive, shown, f"more than {limits.max_member_bytes}", limits.max_member_bytes,
                                 "--max-member-bytes")
            if unpacked_so_far + size > limits.max_unpacked_bytes:
                raise ArchiveTooLargeError(f"{archive}: unpacking passed the {limits.max_unpacked_bytes}-byte cap "
                                           f"at member {shown} (--max-unpacked-bytes); nothing unpacked")
            digest.update(block)
            out.write(block)
    return size, digest.hexdigest()
