"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def reference_path() -> Path:
    return Path(os.environ.get("PERSOBENCH_REFERENCE") or REPO_ROOT.parent / "shared" / "persobench-reference")


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """The paper's published data; tests that need it skip with a reason when it is absent."""
    path = reference_path()
    if not (path / "Prompts").is_dir():
        pytest.skip(f"paper reference data not found at {path} (set PERSOBENCH_REFERENCE)")
    return path


@pytest.fixture()
def store_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh PERSOBENCH_HOME for one test."""
    home = tmp_path / "home"
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    return home


@pytest.fixture()
def scratch_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``write(text)``: the source of a module in a package of this test's own (importable for this
    test only); returns its dotted name. Call again to change the code."""
    import sys
    import uuid

    name = f"scratch_{uuid.uuid4().hex[:12]}"  # a package name no earlier test imported
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(text: str) -> str:
        (package / "module.py").write_text(text, encoding="utf-8")
        return f"{name}.module"

    yield write
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]


#: Markers of the tests that run longest (a model generating, a Ray cluster, a browser driving the app).
LONG_RUNNING_MARKERS = ("slow", "browser")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files holding long-running tests first, each file's tests in their own order: `make test` hands
    whole files to its workers in this order, so the longest files start at once instead of being the
    last ones to begin while the other worker sits idle (the demo's test alone is minutes)."""
    long_files = {item.path for item in items if any(item.get_closest_marker(m) for m in LONG_RUNNING_MARKERS)}
    items.sort(key=lambda item: item.path not in long_files)  # stable: the order within a file is kept


def pytest_collection_finish(session: pytest.Session) -> None:
    """The checkers' commands of the selected tests start now, in one process only (a pytest-xdist
    worker runs them when their tests run): tests/background_commands.py."""
    from tests import background_commands

    if not background_commands.in_xdist_worker() and not session.config.option.collectonly:
        background_commands.start([marker.args[0] for item in session.items
                                 for marker in item.iter_markers("background")])


def pytest_sessionfinish(session: pytest.Session) -> None:
    from tests import background_commands

    background_commands.stop()
