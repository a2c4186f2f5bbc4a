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
  a failure leaves either the previous reference or none, never a half-unpacked one;
- the archive, each member and their total are capped (:class:`ArchiveLimits`): declared sizes
  (Content-Length, zip/tar headers) are checked first and the bytes actually received or unpacked
  are counted while they stream, so a zip bomb or an endless download stops at the cap.

GitHub builds repository archives on request and their bytes are not stable, so the pin is on the
content instead: a packaged manifest (``datasets/data/paper_manifest.json``, :class:`ContentManifest`)
holds the sha256 of every file the fetch unpacks at the pinned commit, and every unpacked file is
checked against it in the staging folder, before the folder is moved into place; one mismatch, a
file the manifest lacks (when it is complete) or a pinned file missing from the archive removes the
staging folder, so nothing is left unpacked. The archive's own size and sha256 are still recorded
in ``<home>/reference/FETCHED.json``, and a mirror (``--url``) is checked against
``--sha256``/``--size`` when given (and against a manifest only when one is passed, ``--manifest``).

An incomplete manifest (``"complete": false``: files listed with a null sha256, or none listed) is
explicit and safe: :func:`fetch_paper` refuses before downloading anything, naming how many files
are not pinned, unless the caller accepts them (``trust_unpinned=True``, ``--trust-unpinned``);
the pinned files are still checked, and the sha256 of every accepted unpinned file is recorded in
``FETCHED.json`` (``content.unpinned_files``), ready to be copied into the manifest. The packaged
manifest is complete (all 94 files of the pinned commit), so the default fetch needs no flag.
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
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Mapping

from persobench.datasets.archive_members import (ArchiveLimits, ArchiveTooLargeError, PaperArchiveError, check_declared,
                                                  copy_member, list_members, safe_parts)
from persobench import __version__
from persobench.store.run_store import default_home
from persobench.store.files import sha256_file, utc_now
from persobench.core.secrets import public_url

__all__ = ["FOLDERS", "PAPER_ARCHIVE", "ArchiveLimits", "ArchivePin", "ArchiveTooLargeError", "ContentManifest", "ContentMismatchError", "FetchResult", "PaperArchiveError",
           "fetch_paper", "fetched_reference", "download_progress", "paper_manifest", "reference_dir"]

#: The folders of the paper's repository that PersoBench reads.
FOLDERS = ("Prompts", "Responses", "Raw Responses", "Evaluations")
#: Written into the unpacked folder once it is complete; its presence makes the folder the default reference.
MARKER = "FETCHED.json"
CHUNK = 1 << 16


class ContentMismatchError(PaperArchiveError):
    """An unpacked file disagrees with the content manifest (wrong sha256, unexpected or missing)."""


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


#: The packaged content manifest of the pinned commit.
MANIFEST_FILE = Path(__file__).resolve().parent / "data" / "paper_manifest.json"
_SHA256_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class ContentManifest:
    """The sha256 of every file a fetch unpacks (paths relative to the repository root)."""

    repository: str
    """GitHub ``owner/name`` the hashes were taken from."""
    commit: str
    """The commit whose files they are."""
    complete: bool
    """True when ``files`` lists every unpacked file with its sha256; False when some are not
    pinned (null) or unlisted, which a fetch accepts only when told to (``trust_unpinned``)."""
    files: Mapping[str, str | None] = field(default_factory=dict)
    """Path (``Prompts/FoCus.csv``) -> lower-case sha256 hex, or None when not pinned."""
    source: str = ""
    """Where the manifest was read from (for messages)."""

    @property
    def pinned(self) -> int:
        """Files with a sha256."""
        return sum(1 for digest in self.files.values() if digest)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "ContentManifest":
        """Read a manifest file; :class:`PaperArchiveError` naming the file and field when malformed."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PaperArchiveError(f"{path}: unreadable content manifest ({exc})") from None
        files = data.get("files") if isinstance(data, dict) else None
        if not isinstance(files, dict):
            raise PaperArchiveError(f"{path}: field 'files': expected an object of path -> sha256 or null")
        for name, digest in files.items():
            if digest is not None and (not isinstance(digest, str) or len(digest) != 64
                                       or not set(digest.lower()) <= _SHA256_HEX):
                raise PaperArchiveError(f"{path}: field 'files', entry {name!r}: expected 64 hex digits or null, "
                                        f"got {str(digest)[:70]!r}")
        complete = data.get("complete")
        if not isinstance(complete, bool):
            raise PaperArchiveError(f"{path}: field 'complete': expected true or false, got {complete!r}")
        if complete and any(digest is None for digest in files.values()):
            raise PaperArchiveError(f"{path}: field 'complete' is true but some files have no sha256")
        return cls(str(data.get("repository") or ""), str(data.get("commit") or ""), complete,
                   {str(k): (v.lower() if v else None) for k, v in files.items()}, str(path))


def paper_manifest() -> ContentManifest:
    """The packaged manifest of :data:`PAPER_ARCHIVE`'s commit."""
    return ContentManifest.load(MANIFEST_FILE)


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
    content_verified: int = 0
    """Unpacked files whose sha256 was checked against a pinned value of the content manifest."""
    unpinned: int = 0
    """Unpacked files the manifest did not pin, accepted because the caller trusted them (their
    sha256 is in ``FETCHED.json``)."""
    manifest: str | None = None
    """The content manifest checked against (None: no manifest, a mirror fetched without one)."""


ProgressFn = Callable[[str, int, int | None], None]
"""``progress(stage, done, total)``: stage ``download`` (bytes) or ``unpack`` (files)."""


def _archive_name(url: str) -> str:
    base = PurePosixPath(urllib.parse.urlparse(url).path).name or "archive"
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


def _archive_too_large(url: str, size: str, cap: int) -> ArchiveTooLargeError:
    return ArchiveTooLargeError(f"{url}: the archive is {size} bytes, over the {cap}-byte cap (--max-archive-bytes); "
                                "nothing unpacked")


def _download(url: str, part: Path, *, timeout: float, progress: ProgressFn | None, max_bytes: int) -> int:
    """Fetch ``url`` into ``part``, resuming from its current size; returns the resumed offset.
    More than ``max_bytes`` (declared by Content-Length or counted) deletes the part and raises."""

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
        if total is not None and total > max_bytes:
            part.unlink(missing_ok=True)
            raise _archive_too_large(url, str(total), max_bytes)
        # the URL's public form: a mirror's query may hold a signature or token
        status_file.write_text(json.dumps({"url": public_url(url), "done": offset, "total": total}),
                               encoding="utf-8")
        done = offset
        try:
            with open(part, "ab" if resumed else "wb") as out:
                while True:
                    block = response.read(CHUNK)
                    if not block:
                        break
                    done += len(block)
                    if done > max_bytes:  # no (or a lying) Content-Length: the count decides
                        break
                    out.write(block)
                    if progress is not None:
                        progress("download", done, total)
                out.flush()
                os.fsync(out.fileno())
        except (http.client.HTTPException, OSError) as exc:
            raise PaperArchiveError(
                f"{url}: download interrupted after {done} bytes ({type(exc).__name__}); "
                "run fetch-paper again to resume") from None
    if done > max_bytes:
        part.unlink(missing_ok=True)
        status_file.unlink(missing_ok=True)
        raise _archive_too_large(url, f"more than {max_bytes}", max_bytes)
    if total is not None and done < total:
        raise PaperArchiveError(f"{url}: download truncated: got {done} of {total} bytes; "
                                "run fetch-paper again to resume")
    return resumed


def _check_content(archive: Path, manifest: ContentManifest, digests: Mapping[str, str]) -> dict[str, Any]:
    """Compare the unpacked files' sha256 with the manifest; raise on any mismatch, else the
    ``content`` record for FETCHED.json."""
    where = f"content manifest {manifest.source or '(given)'}"
    for name, digest in digests.items():
        expected = manifest.files.get(name)
        if expected and digest != expected:
            raise ContentMismatchError(f"{archive}: {name}: sha256 {digest}, expected {expected} ({where}); "
                                    "nothing unpacked")
        if name not in manifest.files and manifest.complete:
            raise ContentMismatchError(f"{archive}: {name} is not in the {where}; nothing unpacked")
    missing = sorted(name for name, expected in manifest.files.items() if expected and name not in digests)
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise ContentMismatchError(f"{archive}: {missing[0]}{more} pinned by the {where} missing from the archive; "
                                "nothing unpacked")
    unpinned = {name: digest for name, digest in digests.items() if not manifest.files.get(name)}
    return {"manifest": manifest.source, "manifest_commit": manifest.commit, "complete": manifest.complete,
            "verified_files": len(digests) - len(unpinned), "unpinned_files": unpinned,
            "listed_but_absent": sorted(name for name in manifest.files if name not in digests)}


def _unpack(archive: Path, target: Path, marker: dict, *, progress: ProgressFn | None,
            manifest: ContentManifest | None = None,
            limits: ArchiveLimits = ArchiveLimits()) -> tuple[int, dict[str, Any] | None]:
    """Unpack the four folders of ``archive`` into a temporary folder, check every file against
    ``manifest`` (when given), write ``marker`` into it, then rename it to ``target``: the marker is
    present exactly when the folder is complete and checked. Every member is capped by ``limits``."""
    try:
        members = list_members(archive)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as exc:
        raise PaperArchiveError(f"{archive}: unreadable archive ({exc})") from None
    paths = [(safe_parts(name, archive), read) for name, read in members]
    # GitHub archives wrap the tree in one "<repo>-<commit>/" folder; a plain archive has none.
    prefixes = {parts[:i] for parts, _ in paths for i in (0, 1) if len(parts) > i and parts[i] == "Prompts"}
    if not prefixes:
        raise PaperArchiveError(f"{archive}: no Prompts/ folder in the archive (not the paper's repository?)")
    prefix = min(prefixes, key=len)
    wanted = [(parts[len(prefix):], read) for parts, read in paths
              if parts[:len(prefix)] == prefix and len(parts) > len(prefix) + 1
              and parts[len(prefix)] in FOLDERS and read is not None]
    check_declared(archive, [("/".join(parts), member) for parts, member in wanted], limits)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".unpacking", dir=target.parent))
    digests: dict[str, str] = {}
    content = None
    try:
        unpacked = 0
        for done, (parts, member) in enumerate(wanted, start=1):
            destination = staging.joinpath(*parts)
            destination.parent.mkdir(parents=True, exist_ok=True)
            try:
                size, digest = copy_member(archive, "/".join(parts), member, destination, limits, unpacked)
            except (zipfile.BadZipFile, tarfile.TarError, EOFError, ValueError) as exc:
                raise PaperArchiveError(f"{archive}: damaged member {'/'.join(parts)} ({exc})") from None
            unpacked += size
            digests["/".join(parts)] = digest
            if progress is not None:
                progress("unpack", done, len(wanted))
        missing = [f for f in ("Prompts", "Responses") if not (staging / f).is_dir()]
        if missing:
            raise PaperArchiveError(f"{archive}: no {' or '.join(f + '/' for f in missing)} in the archive")
        if manifest is not None:  # every file, before the folder is moved into place
            content = _check_content(archive, manifest, digests)
        marker = {**marker, "folders": [f for f in FOLDERS if (staging / f).is_dir()], "files": len(wanted),
                  "content": content}
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
    return len(wanted), content


def check_archive_url(url: str | None) -> None:
    """Refuse any archive URL but http(s) (``file://``, ``ftp://``, ``data:`` ...): a mirror box
    must not copy local files into the store. ``None`` is the pinned default."""
    if url is None:
        return
    scheme = urllib.parse.urlparse(url).scheme.lower()
    if scheme not in ("http", "https"):
        raise PaperArchiveError(f"{url}: not an http or https URL (scheme {scheme or 'missing'!r}); "
                                "fetch-paper downloads from http:// and https:// mirrors only")


def fetched_reference(home: str | os.PathLike[str] | None = None) -> Path | None:
    """``<home>/reference`` when a fetch completed there, else None."""

    folder = (Path(home) if home is not None else default_home()) / "reference"
    return folder if (folder / MARKER).is_file() else None


def reference_dir() -> Path:
    """Folder of the paper's published data: ``$PERSOBENCH_REFERENCE``, else the copy that
    ``python -m persobench fetch-paper`` unpacked into ``$PERSOBENCH_HOME/reference``, else
    ``../shared/persobench-reference`` next to the repository."""
    explicit = os.environ.get("PERSOBENCH_REFERENCE")
    if explicit:
        return Path(explicit)

    fetched = fetched_reference()
    if fetched is not None:
        return fetched
    return Path(__file__).resolve().parents[2].parent / "shared" / "persobench-reference"


def fetch_paper(
    home: str | os.PathLike[str] | None = None,
    *,
    url: str | None = None,
    sha256: str | None = None,
    size: int | None = None,
    timeout: float = 60.0,
    progress: ProgressFn | None = None,
    manifest: ContentManifest | str | os.PathLike[str] | None = None,
    trust_unpinned: bool = False,
    limits: ArchiveLimits | None = None,
) -> FetchResult:
    """Download, verify and unpack the paper's data into ``<home>/reference``.

    ``url`` defaults to :data:`PAPER_ARCHIVE` (``sha256``/``size`` then default to its pinned
    values, ``manifest`` to the packaged one, :func:`paper_manifest`); a mirror is checked against
    ``manifest`` only when one is given. Every unpacked file is checked against the manifest before
    the folder is moved into place. An incomplete manifest is refused before any download unless
    ``trust_unpinned`` accepts the files it does not pin. Raises :class:`PaperArchiveError` (one
    line) on any failure; nothing half-unpacked is left behind, and an interrupted download resumes
    on the next call. ``limits`` caps the archive and what it unpacks (:class:`ArchiveLimits`, its
    defaults when None): over a cap is :class:`ArchiveTooLargeError`.
    """

    home = Path(home) if home is not None else default_home()
    check_archive_url(url)
    limits = limits or ArchiveLimits()
    pin = PAPER_ARCHIVE
    if url is None or url == pin.url:
        url, sha256, size = pin.url, sha256 or pin.sha256, size if size is not None else pin.size
    sha256 = sha256.lower() if sha256 else None
    if manifest is None and url == pin.url:
        manifest = paper_manifest()
    elif manifest is not None and not isinstance(manifest, ContentManifest):
        manifest = ContentManifest.load(manifest)
    if manifest is not None and not manifest.complete and not trust_unpinned:
        unpinned = len(manifest.files) - manifest.pinned
        raise PaperArchiveError(
            f"{manifest.source}: the content manifest is incomplete ({manifest.pinned} of {len(manifest.files)} "
            f"listed files pinned, {unpinned} not, and unlisted files unknown), so the fetched files cannot all be "
            "verified; nothing was downloaded. Pass --trust-unpinned (trust_unpinned=True) to accept them and "
            "record their sha256 in reference/FETCHED.json, or --manifest with a complete manifest")
    downloads = home / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    archive = downloads / _archive_name(url)
    part = archive.with_name(archive.name + ".part")
    status_file = part.with_name(part.name.replace(".part", ".progress.json"))
    resumed = 0
    if not archive.exists():
        if size is not None and size > limits.max_archive_bytes:
            raise _archive_too_large(url, f"{size} (--size)", limits.max_archive_bytes)
        resumed = _download(url, part, timeout=timeout, progress=progress, max_bytes=limits.max_archive_bytes)
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
        on_disk = archive.stat().st_size
        if on_disk > limits.max_archive_bytes:
            archive.unlink()
            raise _archive_too_large(str(archive), f"{on_disk}", limits.max_archive_bytes)
        digest = sha256_file(archive)
        if sha256 is not None and digest != sha256:
            archive.unlink()
            raise PaperArchiveError(f"{archive}: checksum mismatch: sha256 {digest}, expected {sha256}; "
                                    "deleted, run fetch-paper again")
    target = home / "reference"
    got_size = archive.stat().st_size
    try:
        files, content = _unpack(archive, target, {
            "url": public_url(url), "sha256": digest, "size": got_size, "verified": sha256 is not None,
            "repository": pin.repository if url == pin.url else None,
            "commit": pin.commit if url == pin.url else None, "fetched_at": utc_now(),
        }, progress=progress, manifest=manifest, limits=limits)
    except (ContentMismatchError, ArchiveTooLargeError) as exc:  # fetching it again would fail alike
        archive.unlink(missing_ok=True)
        raise type(exc)(f"{exc}; download deleted") from None
    except PaperArchiveError as exc:
        # A download that does not open (a mirror's HTML page answered with 200, a damaged archive)
        # would fail the same way on every retry if it stayed: delete it, the next fetch starts over.
        archive.unlink(missing_ok=True)
        raise PaperArchiveError(f"{exc}; download deleted, run fetch-paper again to download it anew") from None
    return FetchResult(target, archive, url, digest, got_size, sha256 is not None, resumed, files,
                       content["verified_files"] if content else 0, len(content["unpinned_files"]) if content else 0,
                       manifest.source if manifest is not None else None)
