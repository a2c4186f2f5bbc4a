"""The documentation holds together: every relative link of README.md and docs/*.md resolves (files
and #anchors), and every command of README's quick-start table answers ``--help`` with the flags it
uses, so a newcomer's first five commands are never stale."""

from __future__ import annotations

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
