"""Which reference each published run's reference-based figures were computed against.

The paper's prompt tables hold the gold next turn with its speaker label (FoCus: ``"User2: ..."``);
``evaluation.ipynb`` has a cell that strips the label, and the published FoCus tables come from
executions where that cell ran for some runs and not for others (the repository does not record
which). Scoring each of the 14 published FoCus runs with fluency figures against one reference,
stripped or raw, reproduces all five lexical columns of that run together (BLEU, ROUGE-1/2/L and
METEOR, mean and std: 140 of 140 numbers); no run needs one reference for BLEU/ROUGE and another
for METEOR, and no single choice for every run reproduces them all (with the stripped reference
everywhere, 6 METEOR runs and 16 BLEU/ROUGE cells miss by 0.01-0.02).

:data:`PUBLISHED_REFERENCES` records that choice, with why, per (dataset, mode, model) of an
imported published run; :func:`persobench.importer.run_references` turns it into the references
``score`` uses by default for that run. A run not in the table (every other dataset, gemini-1.5-pro
whose fluency cells are blank, any run PersoBench generated) is scored against the label-free
reference, ``Sample.reference``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PUBLISHED_REFERENCES", "RAW", "STRIPPED", "PublishedReference", "published_reference"]

#: The loader's reference: the ``act_response`` cell with its speaker label removed (``Sample.reference``).
STRIPPED = "stripped"
#: The ``act_response`` cell exactly as published, label included ("User2: ...").
RAW = "raw"


@dataclass(frozen=True)
class PublishedReference:
    """The reference one published run was scored against."""

    dataset: str
    """Registered dataset name (``focus``)."""
    mode: str
    """``vanilla`` or ``cot``."""
    model: str
    """The model's label as imported (the response file's stem without ``-COT``)."""
    reference: str
    """:data:`STRIPPED` or :data:`RAW`."""
    why: str
    """The evidence: which published cells each reference reproduces for this run."""


def _run(mode: str, model: str, reference: str, other_misses: str) -> PublishedReference:
    other = RAW if reference == STRIPPED else STRIPPED
    why = (f"{reference}: BLEU, ROUGE-1/2/L and METEOR, mean and std, all equal the published cells; "
           f"{other}: {other_misses} (ours rounded, published)")
    return PublishedReference("focus", mode, model, reference, why)


#: The 14 published FoCus runs with fluency figures (gemini-1.5-pro's are blank), and the cells the
#: reference not chosen gets wrong (``tests/test_reproduction.py`` checks both directions).
PUBLISHED_REFERENCES: tuple[PublishedReference, ...] = (
    _run("vanilla", "gpt-4o-mini", STRIPPED, "METEOR 0.21 ± 0.14 vs 0.22 ± 0.15"),
    _run("vanilla", "gpt-3.5-turbo", RAW, "R1 0.21 ± 0.15 vs 0.20 ± 0.14, R2 0.07 ± 0.13 vs 0.06 ± 0.12, "
         "METEOR 0.21 ± 0.16 vs 0.20 ± 0.15"),
    _run("vanilla", "gpt-4-turbo", RAW, "R1 std 0.14 vs 0.13, R2 std 0.12 vs 0.11, RL 0.21 vs 0.20, "
         "METEOR 0.25 ± 0.17 vs 0.23 ± 0.16"),
    _run("vanilla", "Llama3-1-8B-Instruct", RAW, "R2 0.04 vs 0.03, METEOR 0.12 ± 0.15 vs 0.11 ± 0.14"),
    _run("vanilla", "Qwen2-7B-Instruct", STRIPPED, "RL 0.07 vs 0.08, METEOR 0.09 ± 0.12 vs 0.10 ± 0.13"),
    _run("vanilla", "Mistral-7B-Instruct", STRIPPED, "RL 0.09 vs 0.10, METEOR 0.11 ± 0.13 vs 0.11 ± 0.14"),
    _run("vanilla", "Gemma-7B-Instruct", STRIPPED, "METEOR 0.08 vs 0.09"),
    _run("cot", "gpt-4o-mini", RAW, "RL 0.18 vs 0.17, METEOR 0.23 vs 0.22"),
    _run("cot", "gpt-3.5-turbo", RAW, "BLEU std 0.06 vs 0.05, METEOR 0.19 ± 0.13 vs 0.18 ± 0.12"),
    _run("cot", "gpt-4-turbo", RAW, "BLEU std 0.07 vs 0.06, R2 std 0.10 vs 0.09, RL 0.20 ± 0.11 vs "
         "0.19 ± 0.10, METEOR 0.24 ± 0.15 vs 0.23 ± 0.14"),
    _run("cot", "Llama3-1-8B-Instruct", RAW, "RL 0.14 vs 0.13"),
    _run("cot", "Qwen2-7B-Instruct", STRIPPED, "METEOR 0.12 vs 0.13"),
    _run("cot", "Mistral-7B-Instruct", RAW, "R2 std 0.05 vs 0.04"),
    _run("cot", "Gemma-7B-Instruct", STRIPPED, "METEOR 0.14 vs 0.15"),
)
_BY_RUN = {(r.dataset, r.mode, r.model): r for r in PUBLISHED_REFERENCES}


def published_reference(dataset: str, mode: str, model: str) -> PublishedReference | None:
    """The recorded reference of the published run (``dataset``, ``mode``, ``model``), or None."""
    return _BY_RUN.get((dataset, mode, model))
