"""Helpers the suites share to drive the real CLI in-process and to search what it wrote to disk."""

from __future__ import annotations

from pathlib import Path

from persobench.cli import main as cli_main


def one_line_error(capsys, argv: list[str], *needles: str, code: int = 2) -> str:
    """Run the CLI in-process; it must exit ``code`` with one stderr line, no traceback, containing every
    needle. Returns the line."""
    assert cli_main(argv) == code
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.strip()]
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    for needle in needles:
        assert needle in err[0], err[0]
    return err[0]


def run_cli(home: Path, server, *extra: str) -> int:
    """``run`` against a fake OpenAI-compatible ``server`` (model ``openai:fake``), without progress bars."""
    return cli_main(["--home", str(home), "run", "--model", "openai:fake", "--base-url", server.base_url,
                     "--no-progress", *extra])


def all_bytes(*folders: Path) -> bytes:
    """Every byte of every file under ``folders``: what a leak search reads."""
    return b"".join(p.read_bytes() for folder in folders for p in folder.rglob("*") if p.is_file())


def runs_of(key: str, size: int = 16) -> list[bytes]:
    """Every ``size``-character run of ``key``: none of them may be stored anywhere."""
    return [key[i:i + size].encode() for i in range(0, len(key) - size + 1)]
