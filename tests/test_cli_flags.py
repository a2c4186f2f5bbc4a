"""The flags of ``run`` and ``score`` (and the global ones) are a public interface: every flag's name,
destination, default, choices, metavar, help and arity is compared with a snapshot
(tests/fixtures/cli_flags.json), so a parser built another way (issue 38: generated from the
configurations' field tables) cannot change what a user types or reads without the change showing here.

After a deliberate change, rewrite the snapshot and review its diff::

    .venv/bin/python tests/test_cli_flags.py --write
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any
import math
from tests.cli_checks import one_line_error
import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "tests" / "fixtures" / "cli_flags.json"
#: The commands whose flags are snapshotted (the configurations' front ends), besides the global flags.
COMMANDS = ("run", "score")


def _plain(value: Any) -> Any:
    """``value`` as JSON holds it (a default or choice that JSON cannot hold is kept as its repr)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return repr(value)


def _kind(action: argparse.Action) -> str:
    """The action as ``add_argument(action=...)`` names it: store, store_true, append, help, version."""
    name = type(action).__name__.strip("_")
    name = name[:-len("Action")] if name.endswith("Action") else name
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


def _actions(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    return [{"flags": list(action.option_strings), "dest": action.dest, "kind": _kind(action),
             "default": _plain(action.default), "choices": _plain(list(action.choices)) if action.choices else None,
             "metavar": _plain(action.metavar), "nargs": _plain(action.nargs), "required": action.required,
             "help": action.help}
            for action in parser._actions if not isinstance(action, argparse._SubParsersAction)]


def flag_table() -> dict[str, list[dict[str, Any]]]:
    """The global flags and those of :data:`COMMANDS`, as the CLI's parser builds them now."""
    from persobench.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    return {"global": _actions(parser), **{name: _actions(commands[name]) for name in COMMANDS}}


def differences(actual: dict[str, list[dict[str, Any]]], expected: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One line per flag added, removed, changed or moved in --help between two flag tables."""
    found = [f"command {name} added or removed" for name in sorted(set(actual) ^ set(expected))]
    for command in sorted(set(actual) & set(expected)):
        have = {"/".join(row["flags"]) or row["dest"]: row for row in actual[command]}
        want = {"/".join(row["flags"]) or row["dest"]: row for row in expected[command]}
        found += [f"{command} {flag}: added" for flag in have if flag not in want]
        found += [f"{command} {flag}: removed" for flag in want if flag not in have]
        for flag in want.keys() & have.keys():
            changed = sorted(key for key in want[flag].keys() | have[flag].keys()
                             if want[flag].get(key) != have[flag].get(key))
            if changed:
                found.append(f"{command} {flag}: {', '.join(changed)} changed")
        if not found and list(have) != list(want):
            found.append(f"{command}: the flags' order in --help changed")
    return found


def test_the_flags_of_run_and_score_are_the_snapshot():
    expected = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    assert differences(flag_table(), expected) == [], "rewrite the snapshot (see the module docstring) if deliberate"


def test_a_changed_default_help_or_flag_is_reported():
    expected = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    changed = json.loads(json.dumps(expected))
    row = next(row for row in changed["score"] if row["flags"] == ["--judge-concurrency"])
    row["default"], row["help"] = 4, "another text"
    changed["run"] = [row for row in changed["run"] if row["flags"] != ["--timeout"]]
    assert differences(changed, expected) == ["run --timeout: removed",
                                              "score --judge-concurrency: default, help changed"]
    moved = json.loads(json.dumps(expected))
    moved["score"].reverse()
    assert differences(moved, expected) == ["score: the flags' order in --help changed"]


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: tests/test_cli_flags.py --write   (rewrites tests/fixtures/cli_flags.json)")
    sys.path.insert(0, str(ROOT))
    table = flag_table()
    lines = ",\n".join(f"  {json.dumps(command)}: [\n" + ",\n".join(f"    {json.dumps(row, ensure_ascii=False)}"
                                                                 for row in rows) + "\n  ]"
                       for command, rows in table.items())
    SNAPSHOT.write_text("{\n" + lines + "\n}\n", encoding="utf-8")  # one flag a line: a change is a one-line diff
    print(f"wrote {SNAPSHOT.relative_to(ROOT)}")


# ---------------------------------------------------------------------------------------------
# Hardening, second round (issue 17): the edges a fault sweep found, against real parts


@pytest.mark.parametrize("flag, value", [
    ("--timeout", "0"), ("--timeout", "-1"), ("--timeout", "nan"), ("--timeout", "inf"),
    ("--temperature", "nan"), ("--temperature", "-0.5"), ("--top-p", "1.5"), ("--top-p", "nan"),
    ("--max-tokens", "0"), ("--limit", "0"), ("--max-reply-bytes", "0"), ("--checkpoint-every", "0"),
])
def test_bad_numbers_are_refused_in_one_line_naming_the_flag(tmp_path, capsys, flag, value):
    one_line_error(capsys, ["--home", str(tmp_path), "run", "--model", "baseline:reference", "--no-progress",
                            "--dry-run", flag, value], flag, value)
    assert not (tmp_path / "runs").exists()


def test_the_app_checks_numbers_with_the_same_rules(tmp_path):
    from persobench.config import GenerationConfig, offered_field
    from persobench.jobs import LaunchChoice, plan_launch

    [row] = plan_launch(tmp_path, [LaunchChoice("sample", "baseline:reference", "vanilla")], limit=-3)
    assert "--limit" in row["problem"] and "-3" in row["problem"]
    with pytest.raises(ValueError, match="--timeout"):
        offered_field(GenerationConfig, "retry", "timeout").check(math.nan)


# ---------------------------------------------------------------------------------------------
# Hardening, third round (issue 25): the edges a fault sweep found, against real parts


@pytest.mark.parametrize("value", ["1" * 23, str(2**63), "0"])
def test_an_out_of_range_max_reply_bytes_is_refused_in_one_line(tmp_path, capsys, value):
    one_line_error(capsys, ["--home", str(tmp_path / "home"), "run", "--model", "baseline:reference", "--limit", "1",
                            "--max-reply-bytes", value], "--max-reply-bytes")
    assert not (tmp_path / "home" / "runs").exists() or not any((tmp_path / "home" / "runs").iterdir())
