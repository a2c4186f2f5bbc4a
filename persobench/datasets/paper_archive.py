"""The paper's published data in one step: download the repository archive of salehafzoon/PersoBench
at a pinned commit and unpack ``Prompts/``, ``Responses/``, ``Raw Responses/`` and ``Evaluations/``
under ``$PERSOBENCH_HOME/reference``, which is then the default reference folder
(:func:`persobench.datasets.reference_dir`).

Safety of every step:

- the download streams into ``<home>/downloads/<name>.part``; an interrupted download is resumed
  with an HTTP ``Range`` request (a server that ignores it sends the whole file again, which is
  detected and restarts cleanly);
- the finished file is checked against the expected size and sha256 before anything is unpacked:
  a wrong checksum deletes the download, a short one is kept for resuming, and both are one-line
  :class:`PaperArchiveError` messages;
- members are unpacked into a temporary folder next to the target (never outside it: absolute
  paths, ``..`` and links are refused) and the folder is renamed into place only when complete, so
  a failure leaves either the previous reference or none, never a half-unpacked one.

GitHub builds repository archives on request and publishes no checksum for them, so the pinned
entry carries none: the first download's size and sha256 are recorded in
``<home>/reference/FETCHED.json`` and printed, and a mirror (``--url``) is checked against
``--sha256``/``--size`` when given.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

from persobench.errors import DatasetError

__all__ = ["FOLDERS", "PAPER_ARCHIVE", "ArchivePin", "FetchResult", "PaperArchiveError", "fetch_paper",
           "fetched_reference", "download_progress"]

#: The folders of the paper's repository that PersoBench reads.
FOLDERS = ("Prompts", "Responses", "Raw Responses", "Evaluations")
#: Written into the unpacked folder once it is complete; its presence makes the folder the default reference.
MARKER = "FETCHED.json"
CHUNK = 1 << 16


class PaperArchiveError(DatasetError):
    """The archive could not be downloaded, verified or unpacked; the message says why in one line."""


@dataclass(frozen=True)
class ArchivePin:
    """Where the paper's data comes from and what it must look like."""

    repository: str
    """GitHub ``owner/name``."""
    commit: str
    """The pinned commit (40 hex digits)."""
    url: str
    """Archive URL (a ``.zip`` or ``.tar.gz``/``.tgz``/``.tar``)."""
    sha256: str | None = None
    """Expected sha256 of the archive; None when no checksum is published for it."""
    size: int | None = None
    """Expected size in bytes; None when unknown."""


_REPOSITORY = "salehafzoon/PersoBench"
_COMMIT = "a1c347b74795f490d21f1e14eac3914ccbf3d651"
#: The paper's repository at the commit PersoBench was checked against.
PAPER_ARCHIVE = ArchivePin(_REPOSITORY, _COMMIT, f"https://github.com/{_REPOSITORY}/archive/{_COMMIT}.zip")


@dataclass(frozen=True)
class FetchResult:
    """What a fetch did."""

    folder: Path
    """The unpacked reference folder (``<home>/reference``)."""
    archive: Path
    """The verified archive in ``<home>/downloads``."""
    url: str
    """Where it came from."""
    sha256: str
    """Checksum of the archive."""
    size: int
    """Size of the archive in bytes."""
    verified: bool
    """True when sha256 (and size) were checked against an expected value."""
    resumed_from: int
    """Bytes already on disk when the download (re)started; 0 for a fresh download."""
    files: int
    """Files unpacked."""


ProgressFn = Callable[[str, int, int | None], None]
"""``progress(stage, done, total)``: stage ``download`` (bytes) or ``unpack`` (files)."""


def _archive_name(url: str) -> str:
    base = PurePosixPath(urllib.request.urlparse(url).path).name or "archive"
    suffix = next((s for s in (".tar.gz", ".tgz", ".tar", ".zip") if base.endswith(s)), ".zip")
    return f"paper-{hashlib.sha256(url.encode('utf-8')).hexdigest()[:12]}{suffix}"


def download_progress(home: str | os.PathLike[str]) -> dict | None:
    """``{"url", "done", "total"}`` of a download in progress or interrupted in ``home``, else None
    (read by the app while a background fetch runs)."""
    for status in sorted((Path(home) / "downloads").glob("paper-*.progress.json")):
        try:
            info = json.loads(status.read_text(encoding="utf-8"))
            part = status.with_name(status.name.replace(".progress.json", ".part"))
            info["done"] = part.stat().st_size if part.exists() else int(info.get("done") or 0)
            return info
        except (OSError, ValueError):
            continue
    return None


def _download(url: str, part: Path, *, timeout: float, progress: ProgressFn | None) -> int:
    """Fetch ``url`` into ``part``, resuming from its current size; returns the resumed offset."""
    from persobench import __version__

    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": f"persobench/{__version__}"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(url, headers=headers)
    status_file = part.with_name(part.name.replace(".part", ".progress.json"))
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:  # nothing left to send: the part is already whole
            return offset
        raise PaperArchiveError(f"{url}: download failed: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        raise PaperArchiveError(f"{url}: download failed: {getattr(exc, 'reason', exc)}") from None
    with response:
        resumed = offset if (offset and response.status == 206) else 0
        if offset and not resumed:  # the server ignored Range: start over
            offset = 0
        length = response.headers.get("Content-Length")
        total = offset + int(length) if length and length.isdigit() else None
        status_file.write_text(json.dumps({"url": url, "done": offset, "total": total}), encoding="utf-8")
        done = offset
        try:
            with open(part, "ab" if resumed else "wb") as out:
                while True:
                    block = response.read(CHUNK)
                    if not block:
                        break
                    out.write(block)
                    done += len(block)
                    if progress is not None:
                        progress("download", done, total)
                out.flush()
                os.fsync(out.fileno())
        except (http.client.HTTPException, OSError) as exc:
            raise PaperArchiveError(
                f"{url}: download interrupted after {done} bytes ({type(exc).__name__}); "
                "run fetch-paper again to resume") from None
    if total is not None and done < total:
        raise PaperArchiveError(f"{url}: download truncated: got {done} of {total} bytes; "
                                "run fetch-paper again to resume")
    return resumed


def _members(archive: Path) -> list[tuple[str, Callable[[], bytes] | None]]:
    """(posix path, reader or None for a directory) of every regular member; links are refused."""
    name = archive.name
    if name.endswith(".zip"):
        try:
            handle = zipfile.ZipFile(archive)
        except zipfile.BadZipFile as exc:
            raise PaperArchiveError(f"{archive}: not a readable zip archive ({exc})") from None
        out = []
        for info in handle.infolist():
            mode = info.external_attr >> 16
            if mode and (mode & 0o170000) == 0o120000:  # symlink
                raise PaperArchiveError(f"{archive}: refuses link member {info.filename!r}")
            out.append((info.filename, None if info.is_dir() else (lambda i=info: handle.read(i))))
        return out
    try:
        handle_t = tarfile.open(archive)
    except (tarfile.TarError, OSError) as exc:
        raise PaperArchiveError(f"{archive}: not a readable tar archive ({exc})") from None
    out = []
    for member in handle_t.getmembers():
        if member.issym() or member.islnk() or not (member.isfile() or member.isdir()):
            raise PaperArchiveError(f"{archive}: refuses non-regular member {member.name!r}")
        out.append((member.name, None if member.isdir() else (lambda m=member: handle_t.extractfile(m).read())))
    return out


def _safe_parts(name: str, archive: Path) -> tuple[str, ...]:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\\" in name:
        raise PaperArchiveError(f"{archive}: refuses member outside the archive root: {name!r}")
    return tuple(p for p in path.parts if p not in ("", "."))


def _unpack(archive: Path, target: Path, marker: dict, *, progress: ProgressFn | None) -> int:
    """Unpack the four folders of ``archive`` into a temporary folder, write ``marker`` into it, then
    rename it to ``target``: the marker is present exactly when the folder is complete."""
    try:
        members = _members(archive)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as exc:
        raise PaperArchiveError(f"{archive}: unreadable archive ({exc})") from None
    paths = [(_safe_parts(name, archive), read) for name, read in members]
    # GitHub archives wrap the tree in one "<repo>-<commit>/" folder; a plain archive has none.
    prefixes = {parts[:i] for parts, _ in paths for i in (0, 1) if len(parts) > i and parts[i] == "Prompts"}
    if not prefixes:
        raise PaperArchiveError(f"{archive}: no Prompts/ folder in the archive (not the paper's repository?)")
    prefix = min(prefixes, key=len)
    wanted = [(parts[len(prefix):], read) for parts, read in paths
              if parts[:len(prefix)] == prefix and len(parts) > len(prefix) + 1
              and parts[len(prefix)] in FOLDERS and read is not None]
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".unpacking", dir=target.parent))
    try:
        for done, (parts, read) in enumerate(wanted, start=1):
            destination = staging.joinpath(*parts)
            destination.parent.mkdir(parents=True, exist_ok=True)
            try:
                data = read()
            except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, ValueError) as exc:
                raise PaperArchiveError(f"{archive}: damaged member {'/'.join(parts)} ({exc})") from None
            destination.write_bytes(data)
            if progress is not None:
                progress("unpack", done, len(wanted))
        missing = [f for f in ("Prompts", "Responses") if not (staging / f).is_dir()]
        if missing:
            raise PaperArchiveError(f"{archive}: no {' or '.join(f + '/' for f in missing)} in the archive")
        marker = {**marker, "folders": [f for f in FOLDERS if (staging / f).is_dir()], "files": len(wanted)}
        (staging / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
        os.replace(staging, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return len(wanted)


def check_archive_url(url: str | None) -> None:
    """Refuse any archive URL but http(s) (``file://``, ``ftp://``, ``data:`` ...): a mirror box
    must not copy local files into the store. ``None`` is the pinned default."""
    if url is None:
        return
    scheme = urllib.request.urlparse(url).scheme.lower()
    if scheme not in ("http", "https"):
        raise PaperArchiveError(f"{url}: not an http or https URL (scheme {scheme or 'missing'!r}); "
                                "fetch-paper downloads from http:// and https:// mirrors only")


def fetched_reference(home: str | os.PathLike[str] | None = None) -> Path | None:
    """``<home>/reference`` when a fetch completed there, else None."""
    from persobench.store import default_home

    folder = (Path(home) if home is not None else default_home()) / "reference"
    return folder if (folder / MARKER).is_file() else None


def fetch_paper(
    home: str | os.PathLike[str] | None = None,
    *,
    url: str | None = None,
    sha256: str | None = None,
    size: int | None = None,
    timeout: float = 60.0,
    progress: ProgressFn | None = None,
) -> FetchResult:
    """Download, verify and unpack the paper's data into ``<home>/reference``.

    ``url`` defaults to :data:`PAPER_ARCHIVE` (``sha256``/``size`` then default to its pinned
    values). Raises :class:`PaperArchiveError` (one line) on any failure; nothing half-unpacked is
    left behind, and an interrupted download resumes on the next call.
    """
    from persobench.store import default_home
    from persobench.files import sha256_file, utc_now

    home = Path(home) if home is not None else default_home()
    check_archive_url(url)
    pin = PAPER_ARCHIVE
    if url is None or url == pin.url:
        url, sha256, size = pin.url, sha256 or pin.sha256, size if size is not None else pin.size
    sha256 = sha256.lower() if sha256 else None
    downloads = home / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    archive = downloads / _archive_name(url)
    part = archive.with_name(archive.name + ".part")
    status_file = part.with_name(part.name.replace(".part", ".progress.json"))
    resumed = 0
    if not archive.exists():
        resumed = _download(url, part, timeout=timeout, progress=progress)
        got = part.stat().st_size
        if size is not None and got != size:
            if got < size:
                raise PaperArchiveError(f"{url}: download truncated: got {got} of {size} bytes; "
                                        "run fetch-paper again to resume")
            part.unlink(missing_ok=True)
            status_file.unlink(missing_ok=True)
            raise PaperArchiveError(f"{url}: size mismatch: got {got} bytes, expected {size}; download deleted")
        digest = sha256_file(part)
        if sha256 is not None and digest != sha256:
            part.unlink(missing_ok=True)
            status_file.unlink(missing_ok=True)
            raise PaperArchiveError(f"{url}: checksum mismatch: sha256 {digest}, expected {sha256}; download deleted")
        os.replace(part, archive)
        status_file.unlink(missing_ok=True)
    else:
        digest = sha256_file(archive)
        if sha256 is not None and digest != sha256:
            archive.unlink()
            raise PaperArchiveError(f"{archive}: checksum mismatch: sha256 {digest}, expected {sha256}; "
                                    "deleted, run fetch-paper again")
    target = home / "reference"
    got_size = archive.stat().st_size
    try:
        files = _unpack(archive, target, {
            "url": url, "sha256": digest, "size": got_size, "verified": sha256 is not None,
            "repository": pin.repository if url == pin.url else None, "commit": pin.commit if url == pin.url else None,
            "fetched_at": utc_now(),
        }, progress=progress)
    except PaperArchiveError as exc:
        # A download that does not open (a mirror's HTML page answered with 200, a damaged archive)
        # would fail the same way on every retry if it stayed: delete it, the next fetch starts over.
        archive.unlink(missing_ok=True)
        raise PaperArchiveError(f"{exc}; download deleted, run fetch-paper again to download it anew") from None
    return FetchResult(target, archive, url, digest, got_size, sha256 is not None, resumed, files)
