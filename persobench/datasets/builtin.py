"""The built-in sample dataset: 30 original dialogues written for PersoBench, shipped in the package."""

from __future__ import annotations

import json
from importlib import resources

from persobench.store.files import jsonl_lines
from persobench.records import PersonaSet, Sample, Turn


def load_sample(*, dataset: str = "sample") -> list[Sample]:
    text = resources.files("persobench.datasets").joinpath("data/sample.jsonl").read_text(encoding="utf-8")
    samples = []
    for line_number, line in enumerate(jsonl_lines(text), start=1):
        if not line.strip():
            continue
        record = json.loads(line)
        samples.append(
            Sample(
                id=f"{dataset}:{record['index']}",
                dataset=dataset,
                personas=tuple(PersonaSet(speaker, tuple(s)) for speaker, s in record["personas"].items()),
                context=tuple(Turn(t["speaker"], t["text"]) for t in record["context"]),
                responder=record["responder"],
                reference=record["reference"],
                metadata={"source": "persobench/datasets/data/sample.jsonl", "row": line_number - 1,
                          "topic": record.get("topic", "")},
            )
        )
    return samples
