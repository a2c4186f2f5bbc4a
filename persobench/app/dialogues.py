"""One dialogue, made readable: how a reply treated each persona sentence, and the prompt as plain text."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from persobench.app.loaders import dataset_samples
from persobench.core import redact
from persobench.prompts import TemplateError, build_messages, get_template
from persobench.metrics import COVERAGE_SIMILARITY_THRESHOLD

if TYPE_CHECKING:  # pandas is imported inside the functions that need it
    import pandas as pd


#: Plain words (not emoji): data grids draw on a canvas whose font may lack symbol glyphs.
MARK_USED = "used"
MARK_CONTRADICTED = "contradicted"
MARK_NEUTRAL = "not engaged"


def _first_column(frame: "pd.DataFrame", *names: str) -> str | None:
    return next((n for n in names if n in frame.columns), None)


def coverage_threshold() -> float:
    """Similarity at or above which a persona sentence counts as engaged without an NLI model."""
    try:

        return float(COVERAGE_SIMILARITY_THRESHOLD)
    except Exception:  # noqa: BLE001 - the scoring stage is optional for the app
        return 0.45


def persona_marks(persona: Any, marks: "pd.DataFrame") -> "pd.DataFrame":
    """A persona's sentences with how one reply treated each (used, contradicted, not engaged).

    ``marks`` holds that reply's rows of the run's ``persona_details`` table (``sentence``,
    ``speaker``, ``nli_label``, ``similarity``). With an NLI label, entailment = used and
    contradiction = contradicted; without one (offline profile), a sentence whose embedding
    similarity to the reply reaches the coverage threshold counts as used.
    """
    import pandas as pd

    frame = pd.DataFrame({"sentence": list(persona.sentences)}, columns=["sentence"])
    if marks is None or marks.empty:
        return frame
    text_col = _first_column(marks, "sentence", "persona_sentence", "text")
    if text_col is None:
        return frame
    label_col = _first_column(marks, "nli_label", "label", "nli")
    sim_col = _first_column(marks, "similarity", "embedding_similarity", "cosine")
    if "speaker" in marks.columns:
        mine = marks[marks["speaker"].astype(str) == str(persona.speaker)]
        marks = mine if not mine.empty else marks
    by_text = {str(row[text_col]): row for _, row in marks.iterrows()}
    threshold = coverage_threshold()
    mark_values, sims, labels = [], [], []
    for sentence in persona.sentences:
        row = by_text.get(sentence)
        label = row[label_col] if row is not None and label_col else None
        label = None if label is None or (isinstance(label, float) and label != label) else str(label)
        sim = row[sim_col] if row is not None and sim_col else None
        sim = None if sim is None or (isinstance(sim, float) and sim != sim) else float(sim)
        if row is None:
            mark = ""
        elif label is not None:
            mark = (MARK_CONTRADICTED if label.startswith("contradict") else
                    MARK_USED if label.startswith("entail") else MARK_NEUTRAL)
        elif sim is not None:
            mark = MARK_USED if sim >= threshold else MARK_NEUTRAL
        else:
            mark = MARK_NEUTRAL
        mark_values.append(mark)
        sims.append(sim)
        labels.append(label)
    frame["mark"] = mark_values
    if any(v is not None for v in sims):
        frame["similarity"] = sims
    if any(v is not None for v in labels):
        frame["nli"] = labels
    return frame


def prompt_text(prompt: Any, dataset: str, sample_id: str, mode: str, template: str | None = None) -> tuple[str, str]:
    """(the prompt as plain text, a note): what the run's own ``template`` (its recorded name) sent.

    A generated run stores its user message; the template's system message, when it has one, is
    shown before it. For runs that did not store their prompt (imported results) it is rebuilt
    from the sample with the run's template; without a recorded template, with PersoBench's own."""

    try:
        built = get_template(template or mode, mode)
    except TemplateError:  # a template file that is not here
        built = None
    if isinstance(prompt, str) and prompt.strip():
        try:
            messages = json.loads(prompt)
        except ValueError:
            messages = None
        if isinstance(messages, list):
            return format_messages(messages), ""
        if built is not None and built.system and not prompt.startswith(built.system):
            # (a run that folded the system text into its one user message, as the Gemini preset
            # does, stored it whole)
            return format_messages([{"role": "system", "content": built.system}, {"role": "user", "content": prompt}]), ""
        return prompt, ""
    if built is None:
        return "", f"the run did not store its prompt and its template {template!r} is not available here"
    sample = dataset_samples(dataset).get(sample_id)
    if sample is None:
        return "", "the run did not store its prompt and the dataset is not available here to rebuild it"
    try:
        return (format_messages(build_messages(sample, built)),
                f"rebuilt with the run's template {built.name} ({built.mode}, family {built.family}): "
                "the run did not store its prompt")
    except Exception as exc:  # noqa: BLE001
        return "", f"cannot rebuild the prompt: {redact(exc)}"


def format_messages(messages: Sequence[Any]) -> str:
    """Chat messages as readable plain text (role headers, then content)."""
    parts = []
    for message in messages:
        if isinstance(message, Mapping):
            parts.append(f"[{str(message.get('role', '?')).upper()}]\n{message.get('content', '')}")
        else:
            parts.append(str(message))
    return "\n\n".join(parts)


def matching_dialogues(data: Mapping[str, Any], shown: "pd.DataFrame", values: "pd.DataFrame | None", *, query: str = "",
                       statuses: Sequence[str] = (), metric: str | None = None,
                       metric_range: tuple[float, float] | None = None) -> list[str]:
    """Sample ids (dataset order) with a shown reply that match every filter.

    ``data`` is :func:`~persobench.app.loaders.dialogue_data`'s result, ``shown`` its replies of the
    chosen models and modes, ``values`` :func:`~persobench.app.boards.dialogue_values`. ``query``:
    case-insensitive text in personas, context, reference or replies; ``statuses``: some shown reply
    has one of them; ``metric_range``: some shown reply's ``metric`` (as the board scores it) lies in it
    (inclusive).
    """
    shown_ids = set(shown["sample_id"].astype(str))
    ids = [i for i in data["order"] if i in shown_ids]
    if query.strip():
        needle = query.strip().lower()
        ids = [i for i in ids if needle in data["search"].get(i, "")]
    if statuses:
        keep = set(shown.loc[shown["status"].astype(str).isin(statuses), "sample_id"].astype(str))
        ids = [i for i in ids if i in keep]
    if metric is not None and metric_range is not None and values is not None:
        rows = values[values["run_id"].isin(set(shown["run_id"])) & (values["metric"] == metric)]
        keep = set(rows.loc[rows["value"].between(*metric_range), "sample_id"].astype(str))
        ids = [i for i in ids if i in keep]
    return ids


def dialogue_label(sample: Any, sample_id: str) -> str:
    """``id: start of the last context turn`` for a dialogue picker (the id alone without a sample)."""
    if sample is None or not sample.context:
        return sample_id
    last = sample.context[-1].text
    return f"{sample_id}: {last[:70]}{'…' if len(last) > 70 else ''}"
