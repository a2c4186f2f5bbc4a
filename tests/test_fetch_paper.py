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

#: A subset of the paper's repository: one dataset with its replies and the published evaluations.
SUBSET = ("Prompts/FoCus.csv", "Responses/FoCus/gpt-4o-mini.csv", "Responses/FoCus/gpt-4o-mini-COT.csv",
          "Raw Responses/FoCus/Gemma-7B-Instruct.csv", "Responses/FoCus/Gemma-7B-Instruct.csv",
          "Evaluations/FoCus-results.csv")
ROOT = "PersoBench-a1c347b74795f490d21f1e14eac3914ccbf3d651"


def build_archive(reference: Path, kind: str, extra: dict[str, bytes] | None = None) -> bytes:
    """The subset wrapped in GitHub's top folder, plus files that must not be unpacked."""
    files = {f"{ROOT}/{name}": (reference / name).read_bytes() for name in SUBSET}
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
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if server.cut_at is not None:
                    self.wfile.write(payload[:server.cut_at])
                    server.cut_at = None
                    self.wfile.flush()
                    self.close_connection = True
                    return
                for start in range(0, len(payload), 65536):
                    self.wfile.write(payload[start:start + 65536])
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
    from persobench.store import RunStore

    runs = RunStore(home).runs()
    assert {r.manifest.model_label for r in runs} == {"gpt-4o-mini", "Gemma-7B-Instruct"}
    assert all(Path(r.manifest.extra["import"]["prompts_file"]).is_relative_to(home / "reference") for r in runs)
