"""``presets``: the paper's models as ready-made ``--model`` names, with their list prices."""

from __future__ import annotations

import argparse
import json
import sys
from persobench.generation import default_template_for
from persobench.providers import PAPER_PRESETS
from persobench.providers import key_requirement


def register(subparsers: argparse._SubParsersAction) -> None:
    presets = subparsers.add_parser(
        "presets", help="list the paper's models as --model names, with their prices",
        description="The ready-made model names (python -m persobench run --model NAME): the paper's four API "
        "models, its four open models for local generation, and a -vllm twin of each open model for a vLLM "
        "server (paper-open sent as raw text to /v1/completions). Prices are list prices in USD per million "
        "tokens (input, output), used by run --dry-run; local and vLLM models cost 0. A name in the models "
        "file takes precedence over a preset.",
    )
    presets.add_argument("--format", choices=("table", "json"), default="table", help="output format (default table)")
    presets.set_defaults(handler=cmd_presets)


def preset_rows() -> list[dict[str, object]]:
    """One row per preset: name, provider, model, server, key variable, prices and default template."""

    rows: list[dict[str, object]] = []
    for name, spec in PAPER_PRESETS.items():
        requirement = key_requirement(spec)
        rows.append({
            "name": name, "provider": spec.provider, "model": spec.model, "base_url": spec.base_url,
            "key_env": requirement[0] if requirement and requirement[1] else None,
            "price_input_per_mtok": spec.price_input_per_mtok if spec.provider != "local" else 0.0,
            "price_output_per_mtok": spec.price_output_per_mtok if spec.provider != "local" else 0.0,
            "template": default_template_for(spec),
        })
    return rows


def cmd_presets(args: argparse.Namespace) -> int:
    rows = preset_rows()
    if args.format == "json":
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return 0
    header = ["name", "provider", "model", "$/Mtok in", "$/Mtok out", "key", "template", "server"]
    table = [header] + [[
        str(r["name"]), str(r["provider"]), str(r["model"]), f"{r['price_input_per_mtok']:.2f}",
        f"{r['price_output_per_mtok']:.2f}", str(r["key_env"] or "–"), str(r["template"]), str(r["base_url"] or "–"),
    ] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for k, line in enumerate(table):
        print("  ".join(cell.rjust(widths[i]) if header[i].startswith("$") else cell.ljust(widths[i])
                        for i, cell in enumerate(line)).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))
    print("Prices: list prices in USD per million tokens, for run --dry-run estimates; a models-file entry of "
          "the same name takes precedence.")
    return 0
