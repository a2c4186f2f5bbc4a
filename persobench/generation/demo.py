"""What the embedded offline demo is, and how to recognise its runs in a store.

The demo (``python -m persobench demo``, run by ``make run``) answers the built-in ``sample``
dataset with four configurations, in vanilla and chain-of-thought modes: both baselines
(``baseline:reference``, the ceiling; ``baseline:persona-echo``, the floor) and SmolLM2-135M-Instruct
twice, as it is asked (``local:smollm2``) and with structured output (``local:smollm2 +structured``),
under PersoBench's own template, scored with the ``offline`` profile.

The command (:mod:`persobench.cli.demo_command`) builds these runs; the app (the landing page's demo story)
finds them again from each run's provenance, the manifest, which records the dataset, model,
template, structured output and that the run was generated (not imported). Nothing else marks a
demo store: a store holding SmolLM2's plain and structured demo runs *is* one.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterable
from persobench.store import atomic_write_json, utc_now
from persobench.generation.config import GenerationConfig
from persobench.core import pid_alive
from persobench.store.run_store import RunManifest


DEMO_DATASET = "sample"
#: (model, structured output) in the order they run: the baselines first (the app fills up early),
#: then SmolLM2 as asked and SmolLM2 with its reply's JSON shape guaranteed.
DEMO_MODELS = (("baseline:reference", False), ("baseline:persona-echo", False),
               ("local:smollm2", False), ("local:smollm2", True))
DEMO_MODES = ("vanilla", "cot")
#: PersoBench's template (with SmolLM2's chat template): under the paper's raw ``paper-open`` prompt
#: SmolLM2-135M copies the JSON example's placeholder instead of answering (docs/app.md, "The demo").
DEMO_TEMPLATE = "persobench"
#: Samples per demo run unless ``--full``: the local provider's default batch size, so each SmolLM2
#: run is one batch (a decoding step costs about the same for 1 or 8 rows on a CPU: fewer samples
#: would hardly be faster, more would need a second batch).
DEFAULT_LIMIT = 8
DEMO_PROFILE = "offline"
#: The model whose two runs (plain and structured) are the demo's story.
STORY_MODEL = "local:smollm2"


def demo_configs(*, limit: int | None, local: bool = True) -> list["GenerationConfig"]:
    """The generation configurations of the demo, in the order they run (baselines first)."""

    return [GenerationConfig(dataset=DEMO_DATASET, model=model, mode=mode, limit=limit, template=DEMO_TEMPLATE,
                             structured=structured)
            for model, structured in DEMO_MODELS if local or not model.startswith("local:")
            for mode in DEMO_MODES]


def demo_model(manifest: "RunManifest") -> tuple[str, bool] | None:
    """``(model, structured)`` of :data:`DEMO_MODELS` when ``manifest`` records a run the demo makes
    (generated from the demo's dataset with its template), else None. Any sample limit counts:
    ``demo --full`` and ``demo --limit N`` runs are demo runs too."""
    if (manifest.source != "generated" or manifest.dataset != DEMO_DATASET or manifest.template != DEMO_TEMPLATE
            or manifest.mode not in DEMO_MODES):
        return None
    model = manifest.model or {}
    key = (f"{model.get('provider')}:{model.get('model')}", bool((manifest.parameters or {}).get("structured")))
    return key if key in DEMO_MODELS else None


def demo_runs(manifests: Iterable["RunManifest"]) -> dict[tuple[str, bool, str], str]:
    """``(model, structured, mode) -> run id`` of the demo runs among completed ``manifests`` (the
    one with the most samples when the demo ran more than once, e.g. with ``--full``), or ``{}``
    unless both SmolLM2 runs, plain and structured, are there: without them there is no story."""
    found: dict[tuple[str, bool, str], RunManifest] = {}
    for manifest in manifests:
        key = demo_model(manifest)
        if key is None or manifest.status != "completed":
            continue
        slot = (*key, manifest.mode)
        if slot not in found or len(manifest.sample_ids) > len(found[slot].sample_ids):
            found[slot] = manifest
    story = {(model, structured) for model, structured, _ in found if model == STORY_MODEL}
    if story != {(STORY_MODEL, False), (STORY_MODEL, True)}:
        return {}
    return {slot: manifest.run_id for slot, manifest in found.items()}


#: The demo command's account of itself in the store (``<home>/demo.json``), for the app.
DEMO_STATE_FILE = "demo.json"
#: What the demo command's command line contains (guards its pid against a recycled one).
DEMO_MARKER = "persobench"
DEMO_STATES = ("preparing", "ready", "failed")


@dataclass(frozen=True)
class DemoState:
    """What the demo command is doing, as ``<home>/demo.json`` says: ``make run`` prepares the demo
    in the background while the app is already up, and the landing page shows this until it is ready."""

    state: str
    """One of :data:`DEMO_STATES`."""
    stage: str
    """What it does now, in words (``generating local:smollm2 +structured cot``); the app redraws the
    page when it changes."""
    runs: tuple[str, ...]
    """The demo's run ids, in the order they are made."""
    pid: int
    """The demo command's process."""
    labels: tuple[str, ...] = ()
    """What each run is (``local:smollm2 +structured · cot``), in the order of ``runs``."""
    message: str = ""
    """Why a failed demo stopped (one line)."""
    updated_at: str = ""
    """When the file was written (UTC, ISO 8601)."""
    alive: bool = True
    """Whether the process still runs (read, not stored): a "preparing" demo whose process is gone
    was interrupted, and ``python -m persobench demo`` resumes it."""

    @property
    def preparing(self) -> bool:
        """The demo is being prepared right now."""
        return self.state == "preparing" and self.alive


def write_demo_state(home: str | os.PathLike[str], state: str, stage: str, runs: Iterable[str], *,
                     labels: Iterable[str] = (), message: str = "") -> None:
    """Replace ``<home>/demo.json`` atomically (not fsynced: a power cut leaves an interrupted demo
    whatever it says)."""
    record = DemoState(state, stage, tuple(runs), os.getpid(), tuple(labels), message, utc_now())
    fields = {key: value for key, value in asdict(record).items() if key != "alive"}
    Path(home).mkdir(parents=True, exist_ok=True)
    atomic_write_json(Path(home) / DEMO_STATE_FILE, fields, durable=False)


def read_demo_state(home: str | os.PathLike[str]) -> DemoState | None:
    """The demo's state in the store at ``home``; None when no demo command wrote one, or the file is
    not one (a damaged file is ignored: it only ever adds a progress note)."""
    try:
        data = json.loads((Path(home) / DEMO_STATE_FILE).read_text(encoding="utf-8"))
        state = DemoState(str(data["state"]), str(data["stage"]), tuple(map(str, data["runs"])), int(data["pid"]),
                          tuple(map(str, data.get("labels") or ())), str(data.get("message") or ""),
                          str(data.get("updated_at") or ""))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if state.state not in DEMO_STATES:
        return None
    return replace(state, alive=pid_alive(state.pid, marker=DEMO_MARKER))
