"""The checkers pass: ruff (its configuration in pyproject.toml), the import contracts of
.importlinter (lint-imports), each with a test that the contracts fail on the imports they forbid, and
vulture (dead code; [tool.vulture] in pyproject.toml, its whitelist tests/vulture_whitelist.py).

The checkers' commands start when the session's collection ends, on the core the rest of the suite
leaves idle (``tests/background_commands.py``); each test reads its command's result.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import background_commands as background

ROOT = Path(__file__).resolve().parents[1]
#: A test may wait for its command behind the demo's on the background thread (minutes on a loaded machine).
pytestmark = pytest.mark.timeout(1800)


def _ruff() -> str | None:
    beside_python = Path(sys.executable).with_name("ruff")
    return str(beside_python) if beside_python.exists() else shutil.which("ruff")


def _ruff_check(_folder: Path) -> subprocess.CompletedProcess[str]:
    return background.run([str(_ruff()), "check", "--no-cache", "--output-format", "concise", "."], cwd=ROOT,
                          timeout=120)


background.register("ruff", _ruff_check)


@pytest.mark.background("ruff")
def test_ruff_finds_nothing(tmp_path):
    ruff = _ruff()
    if ruff is None:
        pytest.skip("ruff is not installed (requirements.txt pins it; `make install` puts it in .venv)")
    done = background.result("ruff", tmp_path)
    assert done.returncode == 0, f"ruff check found problems:\n{done.stdout}{done.stderr}"


def test_ruff_configuration_is_in_pyproject():
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]
    selected = set(config["lint"]["select"])
    assert {"F", "E9", "B", "BLE"} <= selected  # real defects stay checked, whatever is ignored


# --- Import contracts (.importlinter, custom types in tests/import_contracts.py) ----------------------

#: lint-imports as its console script runs it; through the interpreter, so it works whatever the
#: script's shebang says.
LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True))"


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return background.run([sys.executable, "-c", LINT_IMPORTS], cwd=root, timeout=300)


background.register("lint-imports", lambda _folder: _lint_imports(ROOT))


@pytest.mark.background("lint-imports")
def test_import_contracts_hold(tmp_path):
    pytest.importorskip("importlinter", reason="requirements.txt pins import-linter; `make install` installs it")
    done = background.result("lint-imports", tmp_path)
    assert done.returncode == 0, f"lint-imports found broken contracts:\n{done.stdout}{done.stderr}"
    assert "0 broken" in done.stdout


def test_pages_is_found_as_the_checkouts_folder():
    """grimp finds ``pages`` (no ``__init__.py``) as a namespace package: an installed package of that
    name would win over the folder, and the contracts would check someone else's code."""
    import importlib.util

    spec = importlib.util.find_spec("pages")
    assert spec is not None and {Path(p) for p in spec.submodule_search_locations} == {ROOT / "pages"}


def _copy_for_contracts(tmp_path: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "data", "judge_templates", "icon.png")
    shutil.copytree(ROOT / "persobench", tmp_path / "persobench", ignore=ignore)
    shutil.copytree(ROOT / "pages", tmp_path / "pages", ignore=ignore)
    (tmp_path / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "import_contracts.py", tmp_path / "tests")
    shutil.copy(ROOT / ".importlinter", tmp_path)
    return tmp_path


#: (file, what is added to it, the contract that must break). Each line is a way round the layers the
#: contracts exist to refuse.
FORBIDDEN_IMPORTS = [
    pytest.param("persobench/cli/data.py", "from ..scoring._secret import x\n",
                 "A _module is imported only inside its package", id="relative-import-of-a-private-module"),
    pytest.param("persobench/app/text.py",
                 "import importlib\n\ndef later():\n    return importlib.import_module('persobench.scoring')\n",
                 "Imports are statements", id="importlib"),
    pytest.param("persobench/datasets/tables.py", "def later():\n    from persobench.metrics import METRICS\n",
                 "Stages import only the stages below them", id="an-upward-import-inside-a-function"),
    pytest.param("persobench/jobs/model.py", "from persobench.store.run_store import _slug\n",
                 "A _name is used only inside its package", id="a-private-name-of-another-package"),
    pytest.param("persobench/datasets/user_files.py", "def later():\n    from persobench.datasets import load_dataset\n",
                 "A package's front never imports a module that imports the front", id="a-module-its-front-imports"),
    pytest.param("pages/data.py", "from persobench import scoring\n",
                 "Pages import the app, the jobs and the read-side public APIs only", id="a-page-imports-scoring"),
    pytest.param("persobench/cli/data.py", "from persobench.store.run_store import RunStore\n",
                 "The CLI, the jobs and the app import the library through package APIs only",
                 id="a-front-end-imports-a-module"),
    pytest.param("persobench/app/text.py", "from persobench.pipeline import open_store\n",
                 "The CLI, the jobs and the app import the library through package APIs only",
                 id="a-name-not-in-all"),
]


def _lint_imports_with(where: str, line: str) -> background.Command:
    """lint-imports over a copy of the tree with ``line`` added to the file ``where``."""

    def command(folder: Path) -> subprocess.CompletedProcess[str]:
        root = _copy_for_contracts(folder)
        (root / "persobench" / "scoring" / "_secret.py").write_text("x = 1\n", encoding="utf-8")
        target = root / where
        target.write_text(target.read_text(encoding="utf-8") + "\n" + line, encoding="utf-8")
        return _lint_imports(root)

    return command


for _param in FORBIDDEN_IMPORTS:
    background.register(f"lint-imports {_param.id}", _lint_imports_with(*_param.values[:2]))
FORBIDDEN_IMPORTS = [pytest.param(*p.values, id=p.id, marks=pytest.mark.background(f"lint-imports {p.id}"))
                     for p in FORBIDDEN_IMPORTS]


@pytest.mark.parametrize("where,line,contract", FORBIDDEN_IMPORTS)
def test_a_forbidden_import_breaks_the_contracts(request, tmp_path, where, line, contract):
    pytest.importorskip("importlinter", reason="requirements.txt pins import-linter; `make install` installs it")
    done = background.result(f"lint-imports {request.node.callspec.id}", tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{contract}" in done.stdout and "BROKEN" in done.stdout.split(contract, 1)[1].splitlines()[0], done.stdout


# --- Dead code (vulture) ------------------------------------------------------------------------------


def _vulture(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return background.run([sys.executable, "-m", "vulture", *args], cwd=cwd, timeout=120)


background.register("vulture", lambda _folder: _vulture())


@pytest.mark.background("vulture")
def test_vulture_finds_nothing(tmp_path):
    """Nothing unused in the library, the pages, the benchmarks or the tests (the tests count as users),
    at [tool.vulture]'s confidence; what only a caller vulture cannot see uses is in the whitelist."""
    pytest.importorskip("vulture", reason="requirements.txt pins vulture; `make install` installs it")
    done = background.result("vulture", tmp_path)
    assert done.returncode == 0 and done.stdout == "", f"vulture found dead code:\n{done.stdout}{done.stderr}"


def test_vulture_reports_a_function_nobody_calls(tmp_path):
    pytest.importorskip("vulture", reason="requirements.txt pins vulture; `make install` installs it")
    (tmp_path / "module.py").write_text("def used():\n    return 1\n\n\ndef forgotten():\n    return 2\n\n\n"
                                        "print(used())\n", encoding="utf-8")
    done = _vulture("module.py", "--min-confidence", "60", cwd=tmp_path)
    assert done.returncode == 3 and "unused function 'forgotten'" in done.stdout and "'used'" not in done.stdout


#: [tool.vulture]'s ignore_names patterns for classes a registry loads from a "module:Name" string.
REGISTERED_CLASS_PATTERNS = ("*Provider", "*BatchBackend", "*Metrics", "*Executor")


def test_the_registered_class_patterns_hide_no_dead_class():
    """vulture ignores classes named like providers, batch backends, metric families and executors
    (registries load them by string, so the recipes stay 2 files); each such class must really be
    registered by a "module:Name" string, or used by name (a Protocol in annotations)."""
    import ast
    import fnmatch
    import re

    registered: set[str] = set()
    used: list[str] = []
    classes: list[tuple[str, str]] = []
    for path in sorted((ROOT / "persobench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                registered |= set(re.findall(r"persobench\.[\w.]+:(\w+)", node.value))
            elif isinstance(node, ast.Name):
                used.append(node.id)
            elif isinstance(node, ast.Attribute):
                used.append(node.attr)
            elif isinstance(node, ast.ClassDef) and any(fnmatch.fnmatchcase(node.name, p)
                                                        for p in REGISTERED_CLASS_PATTERNS):
                classes.append((str(path.relative_to(ROOT)), node.name))
    assert len(classes) > 10
    dead = [f"{where}: {name}" for where, name in classes if name not in registered and name not in used]
    assert not dead, f"unused classes hidden by [tool.vulture]'s patterns: {dead}"
    config = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert all(f'"{pattern}"' in config for pattern in REGISTERED_CLASS_PATTERNS)
# --- Type checker (mypy; [tool.mypy] in pyproject.toml states the level) ---------------------------

#: Where mypy keeps its incremental cache: the checkout's own, ignored by git, so that a second run
#: (make lint, this suite) reads what did not change instead of checking all of persobench again.
MYPY_CACHE = ROOT / ".mypy_cache"


def _mypy(*paths: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
               "--cache-dir", str(MYPY_CACHE), "--no-color-output", "--no-error-summary", *paths]
    return background.run(command, cwd=ROOT, timeout=1200)


background.register("mypy", lambda _folder: _mypy())  # [tool.mypy] files = ["persobench"]


@pytest.mark.background("mypy")
def test_mypy_finds_nothing(tmp_path):
    """persobench/ type-checks at the level pyproject.toml states (a cold run is ~75 s of CPU)."""
    pytest.importorskip("mypy", reason="requirements.txt pins mypy; `make install` installs it")
    done = background.result("mypy", tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "", f"mypy found problems:\n{done.stdout}{done.stderr}"


#: A module per check of the stated level, with the error code mypy must report for it.
MYPY_LEVEL_PROBES = {
    "def untyped(x): return x\n": "no-untyped-def",                                 # disallow_untyped_defs
    "def half(x: int, y) -> int: return x\n": "no-untyped-def",                     # disallow_incomplete_defs
    "def body():\n    return 'a' + 1\n": "operator",                                 # check_untyped_defs
    "x: int = 1  # type: ignore[assignment]\n": "unused-ignore",                     # warn_unused_ignores
    "from typing import cast\ny = cast(int, 1)\n": "redundant-cast",                 # warn_redundant_casts
    "def g(a: str) -> bool: return a == 1\n": "comparison-overlap",                 # strict_equality
    "def h(a: str | None) -> str: return a.strip()\n": "union-attr",                # Optional is checked
}


def _mypy_probes(folder: Path) -> subprocess.CompletedProcess[str]:
    """mypy over a module per probe, ``probe_<n>.py`` in ``folder``."""
    probes = []
    for number, source in enumerate(MYPY_LEVEL_PROBES):
        probes.append(folder / f"probe_{number}.py")
        probes[-1].write_text(source, encoding="utf-8")
    return _mypy(*map(str, probes))


background.register("mypy probes", _mypy_probes)  # after "mypy" when both start early: one cache, one writer


@pytest.mark.background("mypy probes")
def test_the_stated_mypy_level_reports_what_it_promises(tmp_path):
    """Each check pyproject.toml states reports its error on a module written to break it: loosening
    the configuration makes this fail, as does a check that stops running."""
    pytest.importorskip("mypy", reason="requirements.txt pins mypy; `make install` installs it")
    done = background.result("mypy probes", tmp_path)
    probes = [Path(f"probe_{number}.py") for number in range(len(MYPY_LEVEL_PROBES))]
    assert done.returncode == 1, done.stdout + done.stderr
    reported: dict[str, set[str]] = {}
    for line in done.stdout.splitlines():  # path:line: error: message  [code]
        reported.setdefault(Path(line.split(":", 1)[0]).name, set()).add(line.rsplit("[", 1)[-1].rstrip("]"))
    for probe, code in zip(probes, MYPY_LEVEL_PROBES.values()):
        assert code in reported.get(probe.name, set()), f"{probe.name} ({code}) not reported:\n{done.stdout}"
