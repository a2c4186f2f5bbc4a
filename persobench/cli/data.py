"""Data-side commands: ``datasets``, ``show`` and ``runs``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from persobench.cli.command_support import store_from_args
from persobench.cli.generate import add_template_arguments
from persobench.errors import DatasetError
from persobench.datasets import get_dataset_info, load_all
from persobench.datasets import dataset_names
from persobench.datasets import load_dataset
from persobench.providers import resolve_model
from persobench.generation import default_template_for, messages_for
from persobench.prompts import DEFAULT_TEMPLATE, build_messages, get_template
from persobench.generation import Interruption, WaitingBatch, interruption, waiting_batch
from persobench.records import Sample
from persobench.errors import PersoBenchError


def register(subparsers: argparse._SubParsersAction) -> None:
    datasets = subparsers.add_parser("datasets", help="list the registered datasets with their sizes")
    datasets.add_argument("--format", choices=("table", "json"), default="table")
    datasets.set_defaults(handler=cmd_datasets)

    show = subparsers.add_parser("show", help="print annotated samples and the prompts that would be sent")
    show.add_argument("dataset", help="registered dataset name or path to a .csv/.jsonl file")
    show.add_argument("--limit", type=int, default=3, help="number of samples (default 3)")
    show.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")

    add_template_arguments(show)
    show.add_argument("--model", default=None, metavar="PROVIDER:MODEL",
                      help="pick the default template for this model (paper-open for local models, else paper)")
    show.add_argument("--format", choices=("text", "json"), default="text",
                      help="json: a list of {sample, messages}, the messages exactly as they would be sent")
    show.set_defaults(handler=cmd_show)

    runs = subparsers.add_parser("runs", help="list the runs in the store")
    runs.add_argument("--format", choices=("table", "json"), default="table")
    runs.set_defaults(handler=cmd_runs)


def dataset_size(name: str) -> tuple[str, str]:
    """(size, note) for listings; sources that need the network or a file are not loaded."""

    info = get_dataset_info(name)
    if info.kind in ("hub", "file"):
        return "", "loaded on demand (hub or file)"
    try:
        return str(len(load_all(name))), ""
    except (DatasetError, OSError) as exc:
        return "", f"unavailable: {str(exc).splitlines()[0][:120]}"


def cmd_datasets(args: argparse.Namespace) -> int:

    rows = []
    for name in dataset_names():
        info = get_dataset_info(name)
        size, note = dataset_size(name)
        rows.append({"name": name, "kind": info.kind, "samples": size, "description": info.description, "note": note})
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["name"]) for r in rows)
    print(f"{'NAME':<{width}}  {'KIND':<11}  {'SAMPLES':>7}  DESCRIPTION")
    for r in rows:
        note = f"  [{r['note']}]" if r["note"] else ""
        print(f"{r['name']:<{width}}  {r['kind']:<11}  {r['samples'] or '-':>7}  {r['description']}{note}")
    print("\nAny .csv or .jsonl file with the columns personas, context, act_response can be given by path.")
    return 0


def cmd_show(args: argparse.Namespace) -> int:

    spec = resolve_model(args.model) if args.model else None
    name = args.template
    if name is None:
        name = default_template_for(spec) if spec is not None else DEFAULT_TEMPLATE
    template = get_template(name, args.mode)

    def build_messages_of(sample: Sample) -> list[dict[str, str]]:  # what a run of --model sends (Gemini: one user message)
        return messages_for(sample, template, spec) if spec is not None else build_messages(sample, template)

    samples = load_dataset(args.dataset, limit=args.limit, seed=args.seed)
    if args.format == "json":
        print(json.dumps(
            [{"sample": s.to_dict(), "messages": build_messages_of(s)} for s in samples],
            indent=2, ensure_ascii=False,
        ))
        return 0
    for number, sample in enumerate(samples, start=1):
        print(f"=== sample {number}/{len(samples)}: {sample.id}  (responder: {sample.responder})")
        for persona in sample.personas:
            print(f"[{persona.speaker} persona]")
            for sentence in persona.sentences:
                print(f"  - {sentence}")
        if not sample.personas:
            print("(no persona)")
        print("[context]")
        for turn in sample.context:
            print(f"  {turn.speaker}: {turn.text}")
        print(f"[reference] {sample.responder}: {sample.reference}")
        print(f"--- prompt ({template.name} {template.mode}, family {template.family}, template "
              f"{template.version_hash}, max_tokens {template.max_tokens}, temperature {template.temperature:g})")
        for message in build_messages_of(sample):
            print(f"<{message['role']}>")
            print(message["content"])
        print()
    return 0


def cmd_runs(args: argparse.Namespace) -> int:

    store = store_from_args(args)
    runs, problems = store.scan()
    killed = {r.run_id: info for r in runs if (info := interruption(r)) is not None}
    batches, batch_problems = {}, {}
    for r in runs:
        try:
            if (waiting := waiting_batch(r)) is not None:
                batches[r.run_id] = waiting
        except PersoBenchError as exc:  # a damaged batch.json: one line under its run, the others listed
            batch_problems[r.run_id] = str(exc)
    if args.format == "json":
        print(json.dumps({
            "runs": [r.manifest.to_dict() | {"path": str(r.path)} | _interrupted_fields(killed.get(r.run_id))
                     | _batch_fields(batches.get(r.run_id))
                     | ({"batch_problem": batch_problems[r.run_id]} if r.run_id in batch_problems else {})
                     for r in runs],
            "problems": [{"path": str(p.path), "reason": p.reason} for p in problems],
        }, indent=2, ensure_ascii=False))
        return 0
    if not runs and not problems:
        print(f"no runs in {store.runs_dir}; start one with `python -m persobench run` or `python -m persobench demo`")
        return 0
    for run in runs:
        m = run.manifest
        counts = m.details.counts or {}
        count_text = " ".join(f"{k}={v}" for k, v in sorted(counts.items())) if counts else ""
        status = "interrupted" if m.run_id in killed else m.status
        print(f"{m.run_id}  {status:<9}  {m.dataset}  {m.model_label}  {m.mode}  n={len(m.sample_ids)}  {count_text}".rstrip())
        if m.run_id in killed:
            print(f"  {killed[m.run_id].describe()}")
        if m.run_id in batches:  # its batch waits on the provider: the same command collects it
            print(f"  {batches[m.run_id].describe()}")
        if m.run_id in batch_problems:
            print(f"  warning: {batch_problems[m.run_id]}")
    for problem in problems:
        print(f"unreadable: {problem.path}: {problem.reason}")
    return 0


def _interrupted_fields(info: Interruption | None) -> dict[str, Any]:
    """JSON fields of a run whose process died while generating (none for other runs)."""
    if info is None:
        return {}
    return {"status": "interrupted", "cached_replies": info.cached, "resume_command": info.command,
            "resume_note": info.note}


def _batch_fields(info: WaitingBatch | None) -> dict[str, Any]:
    """JSON fields of a run whose batch waits on the provider (none for other runs)."""
    if info is None:
        return {}
    return {"batch_pending": info.requests, "collect_command": info.command, "collect_note": info.note}
