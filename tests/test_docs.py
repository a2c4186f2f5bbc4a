"""The documentation holds together: every relative link of README.md and docs/*.md resolves (files
and #anchors), and every command of README's quick-start table answers ``--help`` with the flags it
uses, so a newcomer's first five commands are never stale."""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)


def prose(path: Path) -> str:
    """The page without fenced code blocks and inline code (links there are not links)."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*|_(?=\w)|(?<=\w)_", lambda m: "_" if m.group(0) == "_" else "", heading.strip())
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            found.add(base if count == 0 else f"{base}-{count}")
            seen[base] = count + 1
    return found


def test_slugs_follow_githubs_rule():
    assert slug("The paper's data: fetch-paper") == "the-papers-data-fetch-paper"
    assert slug("Leaderboard (the landing page)") == "leaderboard-the-landing-page"
    assert slug("Concurrent, killed and cancelled runs") == "concurrent-killed-and-cancelled-runs"


def test_docs_pages_exist():
    names = {p.name for p in PAGES}
    assert {"README.md", "datasets.md", "generation.md", "metrics.md", "app.md", "safety.md", "performance.md",
            "development.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    links = LINK.findall(prose(page))
    for target in links:
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: are not checked offline
            continue
        file_part, _, anchor = target.partition("#")
        destination = (page.parent / file_part).resolve() if file_part else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target}: no heading with anchor #{anchor} in {destination.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)
    if page.name == "README.md":
        assert len(links) >= 8  # the screenshot and the docs pages: the test reads the links it should


def quick_start_commands() -> list[str]:
    """The commands of README's quick-start table, one per row (its last column, in backticks)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|") and not line.startswith("| ---")][1:]
    commands = []
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([^`]+)`", cells[-1])
        assert match, f"quick-start row without one command in backticks: {row}"
        commands.append(match.group(1))
    return commands


def test_readme_is_short_and_its_quick_start_has_five_commands():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) < 200
    commands = quick_start_commands()
    assert len(commands) == 5, commands
    assert all(c.startswith("python -m ") for c in commands)


@pytest.mark.parametrize("command", quick_start_commands())
def test_every_quick_start_command_answers_help_with_its_flags(command):
    words = shlex.split(command)
    module, subcommand = words[2], words[3]
    help_run = subprocess.run([sys.executable, "-m", module, subcommand, "--help"], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
    assert help_run.returncode == 0, f"{command}: {help_run.stderr[-2000:]}"
    flags = [w.split("=", 1)[0] for w in words[4:] if w.startswith("--")]
    missing = [f for f in flags if f not in help_run.stdout]
    assert not missing, f"{command}: --help does not list {missing}"


def test_readme_names_every_command_of_the_cli():
    from persobench.cli import build_parser

    parser = build_parser()
    names = set()
    for action in parser._subparsers._group_actions:  # noqa: SLF001 - argparse has no public listing
        names |= set(action.choices)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = sorted(name for name in names if f"`{name}`" not in readme and f"persobench {name}" not in readme)
    assert not missing, f"README.md does not mention these commands: {missing}"


def test_the_readme_python_api_example_runs(tmp_path):
    """The Python API example is run as written, in an empty folder: it generates, scores and prints a board."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Python API"):]
    code = section[section.index("```python\n") + len("```python\n"):section.index("```\n", section.index("```python"))]
    code += "\nassert report.failures == 0 and report.new_values > 0\nprint('rows', len(board.table))\n"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split("rows")[-1]) > 0
    assert (tmp_path / "cache" / "runs").is_dir()


# --- Names of the code in the docs: paths, modules and the package map -------------------------------------

CODE_PATH = re.compile(r"(?<![\w/.])((?:persobench|pages|tests|benchmarks)/[\w/.\-]*\w)")
DOTTED = re.compile(r"(?<![\w.])(persobench(?:\.\w+)+)")


def _top_level_names(path: Path) -> set[str]:
    """Names a module defines or imports at its top level (read with ``ast``, nothing imported)."""
    import ast

    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def dotted_name_problem(name: str) -> str:
    """Why ``persobench.a.b.name`` names nothing in the source ("" when it does): the longest prefix
    that is a module, then a name defined at its top level (``Class.attribute``: the class)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = _module_file(parts[:cut])
        if module is None:
            continue
        rest = parts[cut:]
        if not rest or rest[0] in _top_level_names(module):
            return ""
        return f"{'.'.join(parts[:cut])} defines no {rest[0]!r}"
    return "no such module"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_path_and_module_named_exists(page):
    """A path (``persobench/llm/session.py``) or dotted name (``persobench.scoring.score_run``) in the
    docs names a file, module or top-level name that exists, so a rename that forgets the docs fails."""
    text = page.read_text(encoding="utf-8")
    missing = sorted({p for p in CODE_PATH.findall(text) if "<" not in p and not (ROOT / p).exists()})
    wrong = sorted({f"{n}: {why}" for n in DOTTED.findall(text) if (why := dotted_name_problem(n))})
    assert not missing and not wrong, f"{page.name}: missing paths {missing}; wrong names {wrong}"


def test_the_checks_catch_a_stale_name():
    assert dotted_name_problem("persobench.scoring.score_run") == ""
    assert dotted_name_problem("persobench.llm.spend.SpendLedger.for_invocation") == ""
    assert dotted_name_problem("persobench.metrics.score_run") == "persobench.metrics defines no 'score_run'"
    assert dotted_name_problem("persobench.cli.scoring") == "persobench.cli defines no 'scoring'"
    assert not (ROOT / "persobench/generation/batch.py").exists()  # the path check's own example


def test_the_development_tree_names_every_package_and_every_module_says_what_it_holds():
    """docs/development.md's Tree names every package (subpackages too) and every root module; a module
    inside a package is described by its own docstring and listed by its package's, so the map stays the
    code's and adding a module to a package does not edit the docs."""
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    tree = text[text.index("## Tree"):text.index("## Architecture")]
    packages = sorted(p.parent for p in (ROOT / "persobench").rglob("__init__.py") if p.parent != ROOT / "persobench")
    roots = sorted(p for p in (ROOT / "persobench").glob("*.py") if p.name != "__init__.py")
    unnamed = [str(p.relative_to(ROOT)) for p in packages if f"{p.name}/" not in tree]
    unnamed += [str(p.relative_to(ROOT)) for p in roots if not re.search(rf"\b{re.escape(p.name)}\b", tree)]
    assert not unnamed, f"add to the Tree of docs/development.md: {unnamed}"
    silent = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "persobench").rglob("*.py"))
              if not ast.get_docstring(ast.parse(p.read_text(encoding="utf-8")))]
    assert not silent, f"give these modules a docstring saying what they hold: {silent}"


def test_the_judge_docs_name_the_providers_whose_registry_entry_enforces_a_schema():
    """docs/judge.md names built-in providers the judge asks through structured output; the registry's
    ``structured`` facts are the list, so a named provider without the fact is stale (a new provider
    registered with ``structured=True`` needs no mention: the recipe stays 2 files)."""
    from persobench.providers import PROVIDERS

    text = (ROOT / "docs" / "judge.md").read_text(encoding="utf-8")
    paragraph = text[text.index("**Answer forms.**"):]
    named = re.findall(r"`(\w+)`", paragraph[:paragraph.index("is requested")])
    assert len(named) >= 2 and set(named) <= set(PROVIDERS.having("structured")), (named, PROVIDERS.having("structured"))


def test_every_provider_of_the_docs_table_is_registered():
    """docs/generation.md's provider table describes built-ins in prose; the registry is the list. A row
    naming a provider that is not registered is stale (a new provider needs no row to work)."""
    from persobench.providers import PROVIDERS

    text = (ROOT / "docs" / "generation.md").read_text(encoding="utf-8")
    table = text[text.index("| provider |"):]
    table = table[:table.index("\n\n")]
    named = re.findall(r"^\| `([\w-]+)` \|", table, flags=re.M)
    assert len(named) >= 2 and set(named) <= set(PROVIDERS.names()), (named, PROVIDERS.names())
