"""Long commands started when the session's collection ends, their results read by their tests.

Some tests spend a minute or more in one command that needs none of the test's state: the checkers
of ``tests/test_lint.py`` (mypy: ~75 s of CPU on a cold cache, as on a clean clone; lint-imports over
the tree and over each copy with a forbidden import; vulture; ruff) and the offline demo of
``tests/test_demo.py`` (SmolLM2 generating its 32 replies, minutes). Most of the rest of the suite
waits on servers, browsers, subprocesses and sleeps. In a single pytest process, the commands of the
tests selected for the session start in one background thread, one after another in the tests'
order, so they use the core the suite leaves idle; each test then waits for its own command's result
(the same command, the same assertions). They run at the suite's own priority: at ``nice -n 10`` they
were starved on a machine shared with other work and the tests waited for them. In a pytest-xdist
worker nothing starts early: each test runs its command when it runs.

A test names its command with ``@pytest.mark.background("name")`` and registers it with
:func:`register` at import; ``tests/conftest.py`` starts them (:func:`start`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable

#: A command: given a folder of its own to work in, what its test reads (a finished process, say).
Command = Callable[[Path], Any]

_COMMANDS: dict[str, Command] = {}
_STARTED: dict[str, Future] = {}
_FOLDERS: list[Path] = []
_RUNNING: set[subprocess.Popen] = set()


def register(name: str, command: Command) -> None:
    _COMMANDS[name] = command


def run(argv: list[str], *, cwd: Path, timeout: float, env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    """``argv`` in ``cwd`` (:func:`subprocess.run`'s result), ended by :func:`stop` should the session end first."""
    with subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as process:
        _RUNNING.add(process)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
        finally:
            _RUNNING.discard(process)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def start(names: list[str]) -> None:
    """Run the registered commands ``names`` one after another on a background thread (in this order)."""
    names = [n for n in dict.fromkeys(names) if n in _COMMANDS and n not in _STARTED]
    if not names:
        return
    futures = {name: Future() for name in names}
    _STARTED.update(futures)

    def work() -> None:
        for name, future in futures.items():
            if not future.set_running_or_notify_cancel():
                continue
            folder = Path(tempfile.mkdtemp(prefix=f"persobench-{name.replace('/', '-')}-"))
            _FOLDERS.append(folder)
            try:
                future.set_result(_COMMANDS[name](folder))
            except BaseException as exc:  # noqa: BLE001 - handed to the test that reads it
                future.set_exception(exc)

    threading.Thread(target=work, name="background-checks", daemon=True).start()


def result(name: str, folder: Path) -> Any:
    """The result of the command ``name``: the early run's if it was started, else run now in ``folder``."""
    future = _STARTED.get(name)
    if future is None:
        return _COMMANDS[name](folder)
    return future.result()


def stop() -> None:
    """At the session's end: cancel what never began, end what still runs, remove the early commands'
    folders (a session stopped early, ``-x``, leaves no checker behind)."""
    for future in _STARTED.values():
        future.cancel()
    for process in list(_RUNNING):
        process.kill()
    for folder in _FOLDERS:
        shutil.rmtree(folder, ignore_errors=True)


def in_xdist_worker() -> bool:
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))
