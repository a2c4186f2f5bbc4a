"""The paper's published model ranking on FoCus, the same ranking recomputed from its published
cells, the inputs ``plots_and_ranking.ipynb`` typed by hand, and the slips of its figures. Part of
:mod:`persobench.aggregate` (the package lists these names in its `__all__`).

The notebook ranks the models by the mean of four aspects (x100) and instructability (0-1,
unscaled). It types every input by hand, and some typed inputs are not the published table's cell:

- failure ratios are typed x10 for most models (0.435 as 4.35), which changes nothing, as
  instructability is relative to the largest failure ratio; but Gemini 1.5 Pro's (both modes) and
  CoT Gemma 7B's are typed as they are, which inflates their instructability (vanilla Gemini 0.95
  instead of 0.51, CoT Gemma 0.94 instead of 0.45);
- the CoT coherence (UE score) of the three GPT models is typed 41/45/48 where the cells say
  45/37/45, and CoT GPT-3.5's persona coverage 48 where the cell says 52.

:func:`paper_ranking_inputs` lists every typed input that differs from its cell with what it does:
the input taken back to its cell (on the notebook's own scale: x10 for a failure ratio, the
rounded x100 value for an aspect) with every other input as typed, does any rank move? Only CoT
GPT-4o-mini's coherence does on its own (ranks 2-4); the unscaled failure ratios move no rank,
because the ranking adds instructability unscaled (0-1) beside x100 aspects, where it barely counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from persobench.datasets.published import PublishedTableError, published_table, published_table_path
from persobench.errors import ConfigurationError

__all__ = ["PAPER_FIGURE_SLIPS", "PAPER_RANKED_DATASET", "PAPER_RANKING_INPUTS", "PAPER_RANKING_MODELS",
           "PAPER_RANKING_TYPED", "FigureSlip", "paper_figure_slips", "paper_ranking", "paper_ranking_inputs",
           "published_ranks"]

#: ``plots_and_ranking.ipynb``'s model names -> the names of the published tables' rows.
PAPER_RANKING_MODELS = {
    "Mistral 7B": "Mistral-7B-Instruct", "Qwen2 7B": "Qwen2-7B-Instruct", "Gemma 7B": "Gemma-7B-Instruct",
    "Llama-3.1 8B": "Llama3-1-8B-Instruct", "GPT-3.5 Turbo": "gpt-3.5-turbo", "GPT-4.0 Mini": "gpt-4o-mini",
    "GPT-4 Turbo": "gpt-4-turbo", "Gemini 1.5 Pro": "gemini-1.5-pro",
}
#: The ranking's inputs -> the FoCus table column each one is typed from (x100; failure ratio as is).
PAPER_RANKING_INPUTS = {"coherence": "UE Score", "persona coverage": "Persona Distance",
                        "groundedness": "UniEval Groundedness", "persona consistency": "C Score",
                        "failure ratio": "Failure Ratio"}
#: The inputs as ``plots_and_ranking.ipynb`` types them, in :data:`PAPER_RANKING_MODELS` order, per
#: mode: the four aspects (x100) of its ``data_vanilla``/``data_cot`` and its ``failure_ratio_*``
#: lists (Fluency and Diversity, which the ranking drops, left out).
PAPER_RANKING_TYPED: dict[str, dict[str, list[float]]] = {
    "vanilla": {"coherence": [21, 17, 22, 17, 37, 35, 39, 26], "persona coverage": [30, 29, 39, 33, 51, 54, 51, 45],
                "groundedness": [45, 43, 55, 42, 72, 72, 66, 65], "persona consistency": [-23, -31, -13, -22, 26, 16, 14, 4],
                "failure ratio": [4.35, 5.1, 4.25, 4.5, 0.9, 0.86, 0.35, 0.248]},
    "cot": {"coherence": [33, 36, 26, 33, 41, 45, 48, 32], "persona coverage": [53, 43, 53, 59, 48, 57, 52, 48],
            "groundedness": [82, 70, 81, 89, 81, 84, 70, 70], "persona consistency": [41, 21, 42, 54, 40, 30, 21, 15],
            "failure ratio": [1.0, 2.7, 0.15, 0.5, 0.7, 0, 0.1, 0.17]},
}
FAILURE = "failure ratio"
#: The scale most failure ratios are typed on (the notebook's own convention: 0.435 as 4.35).
TYPED_FAILURE_SCALE = 10


@dataclass(frozen=True)
class FigureSlip:
    """A value a pinned figure of the paper draws that is not its published cell."""

    figure: str
    """The figure's file in the paper's repository (``Figures/...``)."""
    mode: str
    """``vanilla`` or ``cot``."""
    model: str
    """The model's row in the published table."""
    quantity: str
    """What the figure draws (``engagingness`` = UniEval Engagingness, ``coherence`` = UE score x100 ...)."""
    drawn: float
    """The value the figure draws."""
    cell: float
    """The published table's value on the figure's scale."""
    note: str
    """What the slip is and where it was read."""


_BARS = "Figures/focus_cot_setup_grouped_plus_scaled.png"
_RADAR = "Figures/radar_cot_closed_source.png"
_RADAR_NOTE = "typed in plots_and_ranking.ipynb's data_cot, the radar's six aspects x100 (as the ranking's input)"
#: The slips of the pinned figures: the CoT bars of UniEval engagingness swap GPT-4o-mini and GPT-4
#: Turbo; the CoT radar of the closed models draws the typed coherence and persona coverage above.
PAPER_FIGURE_SLIPS: tuple[FigureSlip, ...] = (
    FigureSlip(_BARS, "cot", "gpt-4o-mini", "engagingness", 2.54, 3.0,
               "bars of GPT-4o-mini and GPT-4 Turbo swapped (issue 40's reading of the pinned figure)"),
    FigureSlip(_BARS, "cot", "gpt-4-turbo", "engagingness", 3.0, 2.54,
               "bars of GPT-4o-mini and GPT-4 Turbo swapped (issue 40's reading of the pinned figure)"),
    FigureSlip(_RADAR, "cot", "gpt-3.5-turbo", "coherence", 41, 45, _RADAR_NOTE),
    FigureSlip(_RADAR, "cot", "gpt-4o-mini", "coherence", 45, 37, _RADAR_NOTE),
    FigureSlip(_RADAR, "cot", "gpt-4-turbo", "coherence", 48, 45, _RADAR_NOTE),
    FigureSlip(_RADAR, "cot", "gpt-3.5-turbo", "persona coverage", 48, 52, _RADAR_NOTE),
)


def paper_figure_slips() -> pd.DataFrame:
    """:data:`PAPER_FIGURE_SLIPS` as a table (one row per slip)."""
    return pd.DataFrame([vars(slip) for slip in PAPER_FIGURE_SLIPS])


def _instructability(failures: Sequence[float]) -> list[float]:
    """The notebook's ``(max failure - failure) / max failure``, rounded to 2 (1 when none failed)."""
    worst = max(failures)
    return [round((worst - f) / worst, 2) if worst else 1.0 for f in failures]


def _paper_scores(inputs: dict[str, list[float]]) -> list[float]:
    """The notebook's score: mean of the four aspects (x100) and instructability (0-1, unscaled:
    ``(max failure - failure) / max failure`` rounded to 2), rounded to 2."""
    instructability = _instructability(inputs[FAILURE])
    aspects = [k for k in PAPER_RANKING_INPUTS if k != FAILURE]
    return [round(float(np.mean([inputs[k][i] for k in aspects] + [instructability[i]])), 2)
            for i in range(len(instructability))]


def _ranks(scores: list[float]) -> list[int]:
    """1 = best; equal scores keep the notebook's order (a stable sort, as pandas' sort_values)."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    ranks = [0] * len(scores)
    for rank, i in enumerate(order, start=1):
        ranks[i] = rank
    return ranks


#: The dataset the paper ranked its models on.
PAPER_RANKED_DATASET = "focus"


def published_ranks(mode: str) -> dict[str, int]:
    """The paper's own ranking on :data:`PAPER_RANKED_DATASET` in ``mode``, as
    ``plots_and_ranking.ipynb`` published it: model label of the published tables (the labels of the
    imported runs) -> rank (1 = best). Empty for a mode the paper did not rank. Needs no data folder:
    the notebook's typed inputs are :data:`PAPER_RANKING_TYPED`."""
    typed = PAPER_RANKING_TYPED.get(mode)
    if typed is None:
        return {}
    return dict(zip(PAPER_RANKING_MODELS.values(), _ranks(_paper_scores(typed))))


def _checked_mode(mode: str) -> dict[str, list[float]]:
    if mode not in PAPER_RANKING_TYPED:
        raise ConfigurationError(f"unknown mode {mode!r}; the paper ranked {', '.join(PAPER_RANKING_TYPED)}")
    return PAPER_RANKING_TYPED[mode]


def _cells(folder: str, mode: str) -> dict[str, list[float]]:
    """Each input's published cell, per model: aspects x100, failure ratios as they are."""
    table = published_table(folder, "FoCus", mode)

    def mean(model: str, column: str) -> float:
        cell = table[model][column]
        if cell is None:
            raise PublishedTableError(f"{published_table_path(folder, 'FoCus', mode)}: model {model!r} has no "
                                      f"{column!r} figure, which the paper's ranking reads")
        return cell.mean

    return {name: [mean(model, column) * (1 if name == FAILURE else 100) for model in PAPER_RANKING_MODELS.values()]
            for name, column in PAPER_RANKING_INPUTS.items()}


def _plain(number: float) -> str:
    return f"{round(number, 3):g}"


def paper_ranking_inputs(folder: str, mode: str) -> pd.DataFrame:
    """Every input ``plots_and_ranking.ipynb`` typed for the ``mode`` ranking that differs from its
    published cell (``Evaluations/FoCus[-COT]-results`` in ``folder``), and whether it changes a rank.

    Columns: model (the table's name), notebook name, input, typed, cell, ``how`` (what differs:
    ``"typed x10, as the other failure ratios: harmless"``, ``"typed unscaled where the others are
    x10: instructability 0.95 instead of 0.51"``, ``"typed 45, cell 37"``), ``changes rank`` (bool:
    with this one input taken back to its cell on the notebook's scale, every other as typed, some
    model's rank moves) and ``rank moves`` (``"GPT-4.0 Mini 2 -> 4, ..."``, or empty)."""
    typed = _checked_mode(mode)
    cells = _cells(folder, mode)
    names = list(PAPER_RANKING_MODELS)
    published = _ranks(_paper_scores(typed))
    typed_inst = _instructability(typed[FAILURE])
    cell_inst = _instructability(cells[FAILURE])
    rows = []
    for name in PAPER_RANKING_INPUTS:
        for i, (short, model) in enumerate(PAPER_RANKING_MODELS.items()):
            value, cell = typed[name][i], cells[name][i]
            if name == FAILURE:
                # On the list's own scale: x10 is the convention (rounded to the digits typed, 0.003 as
                # 0); a value typed as the cell is, unscaled, is the slip.
                digits = len(f"{value:g}".partition(".")[2])
                if abs(round(cell * TYPED_FAILURE_SCALE, digits) - value) <= 1e-9:
                    how = f"typed x{TYPED_FAILURE_SCALE}, as the other failure ratios: harmless"
                elif abs(round(cell, digits) - value) <= 1e-9:
                    how = (f"typed unscaled where the others are x{TYPED_FAILURE_SCALE}: instructability "
                           f"{_plain(typed_inst[i])} instead of {_plain(cell_inst[i])}")
                else:
                    how = f"typed {_plain(value)}, cell x{TYPED_FAILURE_SCALE} {_plain(cell * TYPED_FAILURE_SCALE)}"
                fixed = cell * TYPED_FAILURE_SCALE
            else:
                fixed = round(cell)
                if abs(value - fixed) <= 1e-9:
                    continue
                how = f"typed {_plain(value)}, cell {_plain(fixed)}"
            alternative = {k: list(v) for k, v in typed.items()}
            alternative[name][i] = fixed
            moved = _ranks(_paper_scores(alternative))
            moves = [f"{names[j]} {published[j]} -> {moved[j]}" for j in range(len(names)) if moved[j] != published[j]]
            rows.append({"model": model, "notebook name": short, "input": name, "typed": float(value),
                         "cell": float(cell), "how": how, "changes rank": bool(moves), "rank moves": ", ".join(moves)})
    columns = ["model", "notebook name", "input", "typed", "cell", "how", "changes rank", "rank moves"]
    return pd.DataFrame(rows, columns=columns)


def paper_ranking(folder: str, mode: str) -> pd.DataFrame:
    """The paper's model ranking on FoCus in ``mode`` (``vanilla``/``cot``) as published, beside the
    same computation on the published table's cells (``Evaluations/FoCus[-COT]-results``, read from
    ``folder``), and why the two differ.

    Ranked from the cells, the CoT order changes at ranks 2-4 (GPT-3.5 Turbo, Mistral 7B,
    GPT-4o-mini instead of GPT-4o-mini, GPT-3.5 Turbo, Mistral 7B); the vanilla order does not.

    Columns: model (the table's name), notebook name, published score and rank, recomputed score and
    rank, ``differs`` (every typed input of the model that is not its cell: ``"coherence 45 (cell
    37)"``, ``"failure ratio 0.248 (cell 0.248, typed unscaled where the others are x10:
    instructability 0.95 instead of 0.51)"``; :func:`paper_ranking_inputs` has them one per row) and ``changes rank``
    (those of them that move a rank on their own, with the moves)."""
    typed = _checked_mode(mode)
    cells = _cells(folder, mode)
    published, recomputed = _paper_scores(typed), _paper_scores(
        {k: [v if k == FAILURE else round(v) for v in values] for k, values in cells.items()})
    inputs = paper_ranking_inputs(folder, mode)
    rows = []
    for short, model in PAPER_RANKING_MODELS.items():
        own = inputs[inputs["model"] == model]
        differs = [f"{r['input']} {_plain(r['typed'])} (cell {_plain(r['cell'])}"
                   + (f", {r['how']})" if r["input"] == FAILURE else ")") for _, r in own.iterrows()]
        changes = [f"{r['input']}: {r['rank moves']}" for _, r in own.iterrows() if r["changes rank"]]
        rows.append({"model": model, "notebook name": short, "differs": "; ".join(differs),
                     "changes rank": "; ".join(changes)})
    frame = pd.DataFrame(rows)
    frame.insert(2, "published rank", _ranks(published))
    frame.insert(3, "published score", published)
    frame.insert(4, "recomputed rank", _ranks(recomputed))
    frame.insert(5, "recomputed score", recomputed)
    return frame.sort_values("published rank", kind="stable").reset_index(drop=True)
