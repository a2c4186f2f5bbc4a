"""Whether another process is still alive: the one check shared by generation progress and background jobs."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["pid_alive"]


def pid_alive(pid: int | None, *, marker: str | None = None) -> bool:
    """True when ``pid`` is a live (not zombie) process whose command line contains ``marker``
    (any command line when ``marker`` is None: a recycled pid cannot be told apart then)."""
    if not pid or pid <= 0:
        return False
    try:  # reap it if it is our own finished child, so it does not linger as a zombie
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except OSError:  # not our child
        pass
    proc = Path(f"/proc/{pid}")
    if proc.exists():
        try:
            stat = (proc / "stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return False
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return False
        return marker is None or marker in cmdline
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
