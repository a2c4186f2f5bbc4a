"""fetch-paper against a real HTTP server on 127.0.0.1 serving archives built from the paper's data.

The server honours (or, when asked, ignores) HTTP Range requests and can cut a response short,
so resuming, truncation and checksum failures are exercised over real sockets.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from persobench.cli import main
from persobench.datasets.paper_archive import MARKER, PaperArchiveError, download_progress, fetch_paper
from persobench.cli import main as cli_main
from tests.cli_checks import one_line_error
import json

#: A subset of the paper's repository: one dataset with its replies and the published evaluations.
SUBSET = ("Prompts/FoCus.csv", "Responses/FoCus/gpt-4o-mini.csv", "Responses/FoCus/gpt-4o-mini-COT.csv",
          "Raw Responses/FoCus/Gemma-7B-Instruct.csv", "Responses/FoCus/Gemma-7B-Instruct.csv",
          "Evaluations/FoCus-results.csv")
ROOT = "PersoBench-a1c347b74795f490d21f1e14eac3914ccbf3d651"


def build_archive(reference: Path, kind: str, extra: dict[str, bytes] | None = None,
                  without: tuple[str, ...] = ()) -> bytes:
    """The subset (less ``without``) wrapped in GitHub's top folder, plus files that must not be unpacked."""
    files = {f"{ROOT}/{name}": (reference / name).read_bytes() for name in SUBSET if name not in without}
    files[f"{ROOT}/README.md"] = b"# not part of the data\n"
    files[f"{ROOT}/Figures/x.png"] = b"\x89PNG"
    files.update(extra or {})
    buffer = io.BytesIO()
    if kind == "zip":
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in files.items():
                archive.writestr(name, data)
    else:
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class ArchiveServer:
    """Serves ``body`` at any path; ``cut_at`` closes the first response after that many bytes;
    ``honour_range`` False answers Range requests with the whole file (status 200)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.cut_at: int | None = None
        self.honour_range = True
        self.declare_length = True  # False: no Content-Length, the body ends when the connection closes
        self.chunk_delay = 0.0  # seconds between 64 KiB chunks: a slow mirror, for progress displays
        self.ranges: list[str | None] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:  # noqa: N802
                header = self.headers.get("Range")
                server.ranges.append(header)
                start = 0
                if header and server.honour_range:
                    start = int(header.removeprefix("bytes=").split("-")[0])
                    if start >= len(server.body):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(server.body)}")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(server.body) - 1}/{len(server.body)}")
                else:
                    self.send_response(200)
                payload = server.body[start:]
                if server.declare_length:
                    self.send_header("Content-Length", str(len(payload)))
                else:  # the body runs until the connection closes: only counting the bytes finds its size
                    self.close_connection = True
                self.end_headers()
                if server.cut_at is not None:
                    self.wfile.write(payload[:server.cut_at])
                    server.cut_at = None
                    self.wfile.flush()
                    self.close_connection = True
                    return
                for start in range(0, len(payload), 65536):
                    try:
                        self.wfile.write(payload[start:start + 65536])
                    except (BrokenPipeError, ConnectionResetError):  # the client stopped reading (a size cap)
                        self.close_connection = True
                        return
                    if server.chunk_delay:
                        self.wfile.flush()
                        time.sleep(server.chunk_delay)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, name: str = "PersoBench.zip") -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{name}"

    def __enter__(self) -> "ArchiveServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    monkeypatch.delenv("PERSOBENCH_REFERENCE", raising=False)
    monkeypatch.delenv("PERSOBENCH_PROMPTS", raising=False)
    return home


def leftovers(home: Path) -> list[str]:
    """Anything half-unpacked: the reference folder or a staging folder next to it."""
    return sorted(p.name for p in home.glob("*reference*")) if home.exists() else []


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_fetch_unpacks_the_four_folders_and_becomes_the_default_reference(reference_dir, home, kind):
    body = build_archive(reference_dir, kind)
    with ArchiveServer(body) as server:
        result = fetch_paper(home, url=server.url(f"PersoBench.{kind}"), sha256=hashlib.sha256(body).hexdigest(),
                             size=len(body))
    folder = home / "reference"
    assert result.folder == folder and result.verified and result.size == len(body) and result.files == len(SUBSET)
    for name in SUBSET:
        assert (folder / name).read_bytes() == (reference_dir / name).read_bytes()
    assert not (folder / "README.md").exists() and not (folder / "Figures").exists()
    assert (folder / MARKER).is_file()

    from persobench.datasets import reference_dir as default_reference
    from persobench.datasets.tables import load_paper_table, tables_dir

    assert default_reference() == folder and tables_dir() == folder / "Prompts"
    samples = load_paper_table(dataset="focus", file_stem="FoCus", unlabelled_owner="partner")
    assert len(samples) == 1000 and samples[0].id == "focus:0"


def test_wrong_checksum_is_one_line_and_leaves_nothing(reference_dir, home, capsys):
    body = build_archive(reference_dir, "zip")
    with ArchiveServer(body) as server:
        code = main(["fetch-paper", "--url", server.url(), "--sha256", "0" * 64])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "checksum mismatch" in err and hashlib.sha256(body).hexdigest() in err
    assert leftovers(home) == []
    assert list((home / "downloads").iterdir()) == []  # the bad download is deleted, not kept for "resuming"


def test_truncated_download_fails_cleanly_then_resumes_with_range(reference_dir, home):
    body = build_archive(reference_dir, "zip")
    digest = hashlib.sha256(body).hexdigest()
    with ArchiveServer(body) as server:
        server.cut_at = len(body) // 3
        with pytest.raises(PaperArchiveError, match="truncated") as failure:
            fetch_paper(home, url=server.url(), sha256=digest, size=len(body))
        assert "\n" not in str(failure.value)
        assert leftovers(home) == []
        progress = download_progress(home)
        assert progress == {"url": server.url(), "done": len(body) // 3, "total": len(body)}
        result = fetch_paper(home, url=server.url(), sha256=digest, size=len(body))
    assert server.ranges == [None, f"bytes={len(body) // 3}-"]
    assert result.resumed_from == len(body) // 3 and result.sha256 == digest
    assert (home / "reference" / "Prompts" / "FoCus.csv").read_bytes() == (reference_dir / "Prompts/FoCus.csv").read_bytes()
    assert download_progress(home) is None


def test_a_server_that_ignores_range_restarts_the_download(reference_dir, home):
    body = build_archive(reference_dir, "zip")
    with ArchiveServer(body) as server:
        server.cut_at = 1000
        server.honour_range = False
        with pytest.raises(PaperArchiveError):
            fetch_paper(home, url=server.url(), size=len(body))
        result = fetch_paper(home, url=server.url(), size=len(body))
    assert result.resumed_from == 0 and result.size == len(body) and not result.verified
    assert result.sha256 == hashlib.sha256(body).hexdigest()


def test_an_archive_escaping_its_root_is_refused(reference_dir, home):
    body = build_archive(reference_dir, "tar.gz", extra={f"{ROOT}/Prompts/../../../evil.txt": b"x"})
    with ArchiveServer(body) as server:
        with pytest.raises(PaperArchiveError, match="outside the archive root"):
            fetch_paper(home, url=server.url("x.tar.gz"))
    assert leftovers(home) == [] and not (home.parent / "evil.txt").exists()


def test_refetch_replaces_the_reference_atomically_and_cli_imports(reference_dir, home, capsys):
    body = build_archive(reference_dir, "zip")
    stale = home / "reference" / "Prompts" / "Stale.csv"
    stale.parent.mkdir(parents=True)
    stale.write_text("old")
    with ArchiveServer(body) as server:
        code = main(["fetch-paper", "--url", server.url(), "--size", str(len(body)), "--import", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert not stale.exists() and leftovers(home) == ["reference"]
    assert "unpacked 6 files" in out and "not verified" in out
    # FoCus: gpt-4o-mini vanilla + cot, Gemma vanilla (raw file parsed with the paper's policy)
    assert "3 run(s)" in out and "3 created" in out
    from persobench.store.run_store import RunStore

    runs = RunStore(home).runs()
    assert {r.manifest.model_label for r in runs} == {"gpt-4o-mini", "Gemma-7B-Instruct"}
    assert all(Path(r.manifest.extra["import"]["prompts_file"]).is_relative_to(home / "reference") for r in runs)


# ---- the content manifest ----------------------------------------------------------------------

def write_manifest(path: Path, files: dict[str, str | None], *, complete: bool = True) -> Path:
    import json

    path.write_text(json.dumps({"repository": "salehafzoon/PersoBench", "commit": ROOT.split("-")[-1],
                                "complete": complete, "files": files}), encoding="utf-8")
    return path


def subset_digests(reference: Path) -> dict[str, str]:
    return {name: hashlib.sha256((reference / name).read_bytes()).hexdigest() for name in SUBSET}


def test_every_unpacked_file_is_checked_against_the_manifest(reference_dir, home, tmp_path, capsys):
    import json

    manifest = write_manifest(tmp_path / "manifest.json", subset_digests(reference_dir))
    body = build_archive(reference_dir, "zip")
    with ArchiveServer(body) as server:
        code = main(["fetch-paper", "--url", server.url(), "--manifest", str(manifest), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"content: {len(SUBSET)} files match the sha256 pinned by {manifest}" in out
    content = json.loads((home / "reference" / MARKER).read_text())["content"]
    assert content["verified_files"] == len(SUBSET) and content["unpinned_files"] == {} and content["complete"]


@pytest.mark.parametrize("damage", ["wrong sha256", "unlisted file", "pinned file missing"])
def test_a_manifest_mismatch_leaves_nothing_unpacked_and_keeps_the_old_reference(reference_dir, home, tmp_path,
                                                                               damage):
    files = subset_digests(reference_dir)
    if damage == "wrong sha256":
        files["Responses/FoCus/gpt-4o-mini.csv"] = "0" * 64
        expected = "Responses/FoCus/gpt-4o-mini.csv: sha256 "
    elif damage == "unlisted file":
        del files["Evaluations/FoCus-results.csv"]
        expected = "Evaluations/FoCus-results.csv is not in the content manifest"
    else:
        files["Prompts/PEC.csv"] = "a" * 64
        expected = "Prompts/PEC.csv pinned by the content manifest"
    manifest = write_manifest(tmp_path / "manifest.json", files)
    good = home / "reference" / "Prompts" / "FoCus.csv"
    good.parent.mkdir(parents=True)
    good.write_text("the previous, good reference")
    (home / "reference" / MARKER).write_text("{}")
    body = build_archive(reference_dir, "zip")
    with ArchiveServer(body) as server:
        with pytest.raises(PaperArchiveError, match=expected) as failure:
            fetch_paper(home, url=server.url(), manifest=manifest)
    assert "\n" not in str(failure.value) and str(failure.value).endswith("nothing unpacked; download deleted")
    assert leftovers(home) == ["reference"] and good.read_text() == "the previous, good reference"
    assert sorted((home / "reference").rglob("*")) == [home / "reference" / MARKER, good.parent, good]
    assert list((home / "downloads").iterdir()) == []  # the wrong content is not kept for a later run


def test_an_incomplete_manifest_is_refused_unless_trusted_and_the_trusted_files_are_recorded(
        reference_dir, home, tmp_path, capsys):
    import json

    files: dict[str, str | None] = dict(subset_digests(reference_dir))
    files["Responses/FoCus/gpt-4o-mini-COT.csv"] = None  # listed, not pinned
    del files["Raw Responses/FoCus/Gemma-7B-Instruct.csv"]  # not listed at all
    manifest = write_manifest(tmp_path / "manifest.json", files, complete=False)
    body = build_archive(reference_dir, "zip")
    with ArchiveServer(body) as server:
        code = main(["fetch-paper", "--url", server.url(), "--manifest", str(manifest)])
        err = capsys.readouterr().err.strip()
        assert code == 2 and "\n" not in err and "the content manifest is incomplete (4 of 5 listed files pinned" in err
        assert server.ranges == [] and not (home / "downloads").exists() and leftovers(home) == []
        assert main(["fetch-paper", "--url", server.url(), "--manifest", str(manifest), "--trust-unpinned",
                     "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "content: 4 files match" in out and "warning: 2 files are not pinned by the manifest" in out
    content = json.loads((home / "reference" / MARKER).read_text())["content"]
    assert content["unpinned_files"] == {
        name: hashlib.sha256((reference_dir / name).read_bytes()).hexdigest()
        for name in ("Responses/FoCus/gpt-4o-mini-COT.csv", "Raw Responses/FoCus/Gemma-7B-Instruct.csv")}
    # trusted or not, a pinned file that differs is still refused
    files["Prompts/FoCus.csv"] = "f" * 64
    write_manifest(manifest, files, complete=False)
    with ArchiveServer(body) as server:
        with pytest.raises(PaperArchiveError, match="Prompts/FoCus.csv: sha256"):
            fetch_paper(home, url=server.url(), manifest=manifest, trust_unpinned=True)


def test_the_packaged_manifest_is_complete_and_pins_the_reference_copy_byte_for_byte(reference_dir):
    """94 files at the pinned commit; the hand-made reference copy holds 88 of them unchanged (the 6
    Evaluations/*.xlsx workbooks it holds as CSV), and every one of those 88 matches its pinned sha256."""
    from persobench.datasets.paper_archive import PAPER_ARCHIVE, paper_manifest

    manifest = paper_manifest()
    assert (manifest.repository, manifest.commit) == (PAPER_ARCHIVE.repository, PAPER_ARCHIVE.commit)
    assert manifest.complete and manifest.pinned == len(manifest.files) == 94
    # the commit has no Evaluations sub-folders: the paths once guessed offline are gone
    assert not [name for name in manifest.files if name.startswith("Evaluations/") and name.count("/") > 1]
    present = {name: digest for name, digest in manifest.files.items() if (reference_dir / name).is_file()}
    assert len(present) == 88
    assert sorted(set(manifest.files) - set(present)) == sorted(
        f"Evaluations/{name}{mode}-results.xlsx" for name in ("Blended Skill Talk", "FoCus", "IT-ConvAI2")
        for mode in ("", "-COT"))
    assert {name: hashlib.sha256((reference_dir / name).read_bytes()).hexdigest() for name in present} == present


def packaged_subset(reference: Path, tmp_path: Path) -> tuple[bytes, Path]:
    """An archive of every pinned file the reference copy holds (the 88 outside the .xlsx), and the
    packaged manifest cut to those paths (still complete, hashes unchanged)."""
    from persobench.datasets.paper_archive import paper_manifest

    pinned = {name: digest for name, digest in paper_manifest().files.items() if (reference / name).is_file()}
    files = {f"{ROOT}/{name}": (reference / name).read_bytes() for name in pinned}
    files[f"{ROOT}/README.md"] = b"# not part of the data\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue(), write_manifest(tmp_path / "packaged-subset.json", pinned)


def test_the_pinned_content_is_accepted_without_trust_unpinned(reference_dir, home, tmp_path, capsys):
    import json

    body, manifest = packaged_subset(reference_dir, tmp_path)
    with ArchiveServer(body) as server:
        code = main(["fetch-paper", "--url", server.url(), "--manifest", str(manifest), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "content: 88 files match the sha256 pinned by" in out and "warning" not in out
    content = json.loads((home / "reference" / MARKER).read_text())["content"]
    assert content["verified_files"] == 88 and content["unpinned_files"] == {} and content["complete"]


def test_the_packaged_manifest_refuses_content_that_is_not_the_pinned_commits(reference_dir, home, tmp_path):
    """Complete, the packaged manifest refuses a missing pinned file (here the six .xlsx the
    reference copy lacks) and an edited one, with no flag able to wave it through."""
    from persobench.datasets.paper_archive import MANIFEST_FILE

    body, _ = packaged_subset(reference_dir, tmp_path)
    with ArchiveServer(body) as server:
        with pytest.raises(PaperArchiveError, match=r"Evaluations/.*\.xlsx and 5 more pinned by the content manifest"):
            fetch_paper(home, url=server.url(), manifest=MANIFEST_FILE, trust_unpinned=True)
    edited = build_archive(reference_dir, "zip", extra={f"{ROOT}/Prompts/FoCus.csv": b"persona,context\n"})
    with ArchiveServer(edited) as server:
        with pytest.raises(PaperArchiveError, match="Prompts/FoCus.csv: sha256"):
            fetch_paper(home, url=server.url(), manifest=MANIFEST_FILE)
    assert leftovers(home) == []


def test_an_xlsx_only_archive_yields_the_published_tables(reference_dir, home, tmp_path):
    """The repository holds its evaluation tables as .xlsx only: a fetched copy gives the published
    figures (here from workbooks built from the hand-converted CSV tables)."""
    import csv

    from openpyxl import Workbook

    from persobench.datasets.published import published_table, read_published_table

    extra = {}
    for table in sorted((reference_dir / "Evaluations").glob("*-results.csv")):
        workbook = Workbook()
        with open(table, newline="", encoding="utf-8") as handle:
            for row in csv.reader(handle):
                workbook.active.append(row)
        buffer = io.BytesIO()
        workbook.save(buffer)
        extra[f"{ROOT}/Evaluations/{table.stem}.xlsx"] = buffer.getvalue()
    body = build_archive(reference_dir, "tar.gz", extra=extra, without=("Evaluations/FoCus-results.csv",))
    with ArchiveServer(body) as server:
        fetch_paper(home, url=server.url("x.tar.gz"))
    folder = home / "reference"
    assert not list((folder / "Evaluations").glob("*.csv"))
    for mode, name in (("vanilla", "FoCus-results"), ("cot", "FoCus-COT-results")):
        assert published_table(folder, "FoCus", mode) == read_published_table(reference_dir / "Evaluations" / f"{name}.csv")


# ---------------------------------------------------------------------------------------------
# Hardening, second round (issue 17): the edges a fault sweep found, against real parts


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.org/x.zip", "data:,hello"])
def test_fetch_paper_accepts_http_and_https_only(tmp_path, capsys, url):
    home = tmp_path / "home"
    assert cli_main(["--home", str(home), "fetch-paper", "--url", url, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "http" in err[0] and "https" in err[0], err
    assert not (home / "downloads").exists() or not any((home / "downloads").iterdir())


def _tiny_paper_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("PersoBench-x/Prompts/FoCus.csv", "personas,context,act_response\np,c,r\n")
        archive.writestr("PersoBench-x/Responses/FoCus/m.csv", "response\nhi\n")
    return buffer.getvalue()


def test_a_download_that_does_not_open_is_deleted_and_fetched_again(tmp_path):
    from persobench.datasets.paper_archive import PaperArchiveError, fetch_paper

    home = tmp_path / "home"
    with ArchiveServer(b"<html><body>mirror maintenance</body></html>") as server:
        with pytest.raises(PaperArchiveError, match="not a readable zip archive"):
            fetch_paper(home, url=server.url())
        assert [p.name for p in (home / "downloads").iterdir()] == []  # nothing kept to fail again
        server.body = _tiny_paper_zip()
        result = fetch_paper(home, url=server.url())
    assert result.files == 2 and (result.folder / "Prompts" / "FoCus.csv").is_file()
    assert len(server.ranges) == 2  # it really downloaded again


# ---------------------------------------------------------------------------------------------
# Hardening, third round (issue 25): the edges a fault sweep found, against real parts


def _bomb_zip(member_bytes: int, *, lie_to: int | None = None) -> bytes:
    """A small zip: the paper's two needed files and one ``member_bytes`` member of zeros (whose
    declared size is rewritten to ``lie_to`` when given: zip headers can lie)."""
    import io
    import struct
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("PersoBench-x/Prompts/FoCus.csv", "personas,context,act_response\np,c,r\n")
        archive.writestr("PersoBench-x/Responses/FoCus/m.csv", "response\nhi\n")
        archive.writestr("PersoBench-x/Responses/FoCus/big.csv", b"\0" * member_bytes)
    data = bytearray(buffer.getvalue())
    if lie_to is not None:  # rewrite the uncompressed size in the local header and the central directory
        size = struct.pack("<I", member_bytes)
        for offset in [i for i in range(len(data) - 4) if data[i:i + 4] == size]:
            data[offset:offset + 4] = struct.pack("<I", lie_to)
    return bytes(data)


def _fetch(capsys, home: Path, url: str, *flags: str) -> str:
    return one_line_error(capsys, ["--home", str(home), "fetch-paper", "--url", url, "--no-progress", *flags])


def _unpacked(home: Path) -> list[str]:
    return sorted(p.name for p in home.glob("*reference*")) if home.exists() else []


def test_a_zip_bomb_member_is_refused_by_default_in_one_line(tmp_path, capsys):

    home = tmp_path / "home"
    body = _bomb_zip(80 * 2**20)  # 80 MiB of zeros in a ~80 KB archive
    assert len(body) < 200_000
    with ArchiveServer(body) as server:
        line = _fetch(capsys, home, server.url())
    assert "big.csv" in line and "--max-member-bytes" in line and "nothing unpacked" in line
    assert _unpacked(home) == []
    assert sum(p.stat().st_size for p in home.rglob("*") if p.is_file()) < 1_000_000


def test_member_cap_flag_and_a_lying_header(tmp_path, capsys):

    home = tmp_path / "home"
    with ArchiveServer(_bomb_zip(300_000)) as server:
        line = _fetch(capsys, home, server.url(), "--max-member-bytes", "100000")
        assert "big.csv" in line and "300000" in line and "100000" in line
        assert _unpacked(home) == []
        server.body = _bomb_zip(300_000, lie_to=1000)  # declares 1000 bytes, holds 300000
        line = _fetch(capsys, home, server.url(), "--max-member-bytes", "100000")
        assert "big.csv" in line
        assert _unpacked(home) == []
        server.body = _bomb_zip(300_000)
        assert cli_main(["--home", str(home), "fetch-paper", "--url", server.url(), "--no-progress",
                         "--max-member-bytes", "400000"]) == 0
    assert (home / "reference" / "Responses" / "FoCus" / "big.csv").stat().st_size == 300_000


def test_archive_cap_counts_the_bytes_even_without_a_declared_length(tmp_path, capsys):

    home = tmp_path / "home"
    body = _bomb_zip(10) + b"\0" * 300_000  # a zip followed by padding: opens fine, but too big
    with ArchiveServer(body) as server:
        line = one_line_error(capsys, ["--home", str(home), "fetch-paper", "--url", server.url(), "--no-progress",
                                       "--max-archive-bytes", "200000"], "--max-archive-bytes", "200000")
        assert list((home / "downloads").iterdir()) == []
        server.declare_length = False  # no Content-Length: only counting finds the size
        line = one_line_error(capsys, ["--home", str(home), "fetch-paper", "--url", server.url(), "--no-progress",
                                       "--max-archive-bytes", "200000"], "--max-archive-bytes")
        assert list((home / "downloads").iterdir()) == []
        assert len(server.ranges) == 2
    assert _unpacked(home) == []
    assert line.startswith("error: ")


@pytest.mark.parametrize("value", ["0", "-5", "1" * 23])
def test_archive_caps_refuse_out_of_range_values(tmp_path, capsys, value):
    one_line_error(capsys, ["--home", str(tmp_path / "home"), "fetch-paper", "--url", "http://127.0.0.1:9/x.zip",
                            "--no-progress", "--max-member-bytes", value], "--max-member-bytes")


# ---------------------------------------------------------------------------------------------
# Hardening, fourth round (issue 39): files and inputs


#: A mirror link's query as a presigned URL carries it.
MIRROR_QUERY = {"token": "signed-mirror-token", "X-Amz-Signature": "deadbeefsig", "pw": "hunter2-mirror"}


@pytest.fixture()
def mirror(reference_dir, tmp_path, monkeypatch):
    """(home, archive bytes, a server of the archive): a mirror of the paper's data on 127.0.0.1."""

    home = tmp_path / "home"
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    body = build_archive(reference_dir, "zip")
    with ArchiveServer(body) as server:
        yield home, body, server


def _mirror_url(server) -> str:
    return server.url() + "?" + "&".join(f"{name}={value}" for name, value in MIRROR_QUERY.items())


def _mirror_secrets_in(data: bytes) -> list[str]:
    return [value for value in MIRROR_QUERY.values() if value.encode() in data]


def test_a_mirror_urls_query_never_reaches_the_download_files(mirror):
    import hashlib

    from persobench.datasets.paper_archive import MARKER, PaperArchiveError, fetch_paper

    home, body, server = mirror
    pin = {"sha256": hashlib.sha256(body).hexdigest(), "size": len(body)}
    server.cut_at = len(body) // 2  # the first download stops half way: its progress file stays
    with pytest.raises(PaperArchiveError):
        fetch_paper(home, url=_mirror_url(server), **pin)
    interrupted = b"".join(p.read_bytes() for p in (home / "downloads").glob("*.json"))
    assert interrupted and _mirror_secrets_in(interrupted) == []
    fetch_paper(home, url=_mirror_url(server), **pin)
    marker = (home / "reference" / MARKER).read_bytes()
    assert server.url().encode() in marker and _mirror_secrets_in(marker) == []


def test_a_mirror_urls_query_never_reaches_job_json_and_the_job_still_gets_it(mirror):
    from persobench.jobs import JobManager, fetch_paper_steps
    from persobench.jobs.manager import step_base_urls
    from persobench.core.secrets import URL_CREDENTIALS_ENV, credentials_environment
    from tests.test_app import wait_for

    home, _, server = mirror
    steps = fetch_paper_steps(score="none", url=_mirror_url(server), trust_unpinned=True)
    assert step_base_urls(steps) == [server.url()]
    carried = credentials_environment(step_base_urls(steps))[URL_CREDENTIALS_ENV]
    assert json.loads(carried) == {server.url(): _mirror_url(server)}
    jobs = JobManager(home)
    job_id, started = jobs.launch("mirror", steps)
    assert started
    status = wait_for(lambda: (s := jobs.status(job_id)) and not s.active and s)
    assert status.state == "completed", status.log_tail  # fetched with the full URL, and imported
    assert _mirror_secrets_in(b"".join(p.read_bytes() for p in home.rglob("*") if p.is_file())) == []
