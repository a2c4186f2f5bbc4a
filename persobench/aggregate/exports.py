"""A board rendered for people and other tools: terminal table, CSV (long), Markdown, LaTeX and
JSON, with the notes each board needs. Part of :mod:`persobench.aggregate`."""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

import numpy as np
import pandas as pd

from persobench.aggregate.board import SIDE_BY_SIDE
from persobench.aggregate.ranking import overall_table
from persobench.aggregate.results import _metric_order
from persobench.errors import ConfigurationError
from persobench.protocol import Protocol
from persobench.structured import BOARD_NOTE
from persobench.metrics import metric_names
from persobench.metrics.judge import labeller_note
from persobench.csv_io import csv_text

#: Protocol fields added to every row of the json export.
PROTOCOL_FIELDS = ("name", "max_tokens", "temperature", "policy", "structured", "chat_template")
#: The long CSV export has exactly these columns (``protocol``: the board's protocol label, as the
#: markdown header and the json rows name it).
CSV_COLUMNS = ["dataset", "mode", "protocol", "model", "metric", "mean", "std", "n"]


# --- export ------------------------------------------------------------------------------------

def _fmt(value: float, digits: int = 2) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _cell(metric: str, row: Mapping[str, Any]) -> str:
    if row is None or row.get("n", 0) == 0 and math.isnan(row.get("mean", math.nan)):
        return "n/a"
    if metric == "failure_ratio":
        return _fmt(row["mean"], 3)
    if metric == "instructability" or math.isnan(row["std"]):
        return _fmt(row["mean"])
    return f"{_fmt(row['mean'])} ± {_fmt(row['std'])}"


def _blocks(board: pd.DataFrame) -> list[dict[str, Any]]:
    """Display blocks, one per board (dataset, mode, protocol) and profile: models (ranked), metrics,
    cells, sample counts, notes."""
    overall = overall_table(board)
    order = {m: i for i, m in enumerate(_metric_order())}
    if "board" not in board.columns:
        board = board.assign(board="?", run_n=board["n"])
    blocks = []
    for (dataset, mode, board_name, profile), group in board.groupby(["dataset", "mode", "board", "profile"],
                                                                      sort=True):
        available = group[group["status"] != "unavailable"]
        metrics = sorted(available["metric"].unique(), key=lambda m: (order.get(m, len(order)), m))
        ov = overall[(overall["dataset"] == dataset) & (overall["mode"] == mode) & (overall["board"] == board_name)
                     & (overall["profile"] == profile)]
        models = list(ov["model"])
        models += sorted(set(group["model"]) - set(models))
        cells = {(r["model"], r["metric"]): r for r in group.to_dict("records")}
        counts = group[group["metric"] == "failure_ratio"]
        sizes = {r["model"]: (int(r["n"]), int(r["run_n"])) for r in counts.to_dict("records")}
        notes = sample_notes(sizes)
        sets = sample_set_note(group)
        if sets:
            notes = [sets]
        if note := structured_note(group):
            notes.append(note)
        unavailable = group[group["status"] == "unavailable"].drop_duplicates("metric")
        for r in unavailable.to_dict("records"):
            notes.append(f"{r['metric']}: unavailable ({r['reason'] or 'no reason recorded'})")
        degraded = group[group["status"] == "degraded"].drop_duplicates("metric")
        for r in degraded.to_dict("records"):
            notes.append(f"{r['metric']}*: degraded ({r['reason'] or 'no reason recorded'})")
        for metric, sub in available.groupby("metric"):
            ids = sorted({m for m in sub["model_id"] if m})
            if len(ids) > 1:
                notes.append(f"warning: {metric} was computed with different models across runs: {', '.join(ids)}")
        reasons = {r for r in ov["reason"] if r}
        for reason in sorted(reasons):
            notes.append(f"overall: n/a, {reason}")
        ov_rows = {r["model"]: r for r in ov.to_dict("records")}
        degraded_names = set(degraded["metric"])
        blocks.append({"dataset": dataset, "mode": mode, "board": board_name, "profile": profile,
                       "labeller": board_labeller(group), "models": models,
                       "metrics": metrics, "cells": cells, "overall": ov_rows, "notes": notes,
                       "degraded": degraded_names, "sizes": sizes, "disjoint": bool(sets),
                       "invalid": group["invalid"].iloc[0] if "invalid" in group else ""})
    return blocks


def sample_notes(sizes: Mapping[str, tuple[int, int]]) -> list[str]:
    """Say when runs answered different sample sets and what was compared."""
    if not sizes:
        return []
    compared = {n for n, _ in sizes.values()}
    own = sorted({run_n for _, run_n in sizes.values()})
    if len(compared) > 1:
        return [f"runs answered different samples and share no sample id: each row is over its own samples "
                f"(n = {', '.join(str(n) for n in sorted(compared))})"]
    n = compared.pop()
    if own != [n]:
        return [f"compared on the {n} sample ids common to all {len(sizes)} runs (runs have "
                f"{', '.join(str(k) for k in own)} samples; --all-samples uses every run's own samples)"]
    return []


#: What a board header says when its runs share no sample id.
NO_SHARED_SAMPLES = "runs share no sample id"


def sample_set_note(board: pd.DataFrame) -> str | None:
    """For a board whose runs share no sample id (``sample_set`` labels set): the warning that says
    so and which runs answered the same samples, e.g. ``S1 = 20 samples: a, b; S2 = 30 samples: c``;
    None for a board compared on common samples."""
    if "sample_set" not in board.columns:
        return None
    rows = board[board["sample_set"].fillna("") != ""].drop_duplicates("run_id")
    if rows.empty:
        return None
    groups = []
    for name, group in rows.groupby("sample_set", sort=True):
        groups.append(f"{name} = {int(group['run_n'].iloc[0])} samples: {', '.join(sorted(group['model']))}")
    return (f"warning: the {len(rows)} runs share no sample id, so each row is over its own samples and the "
            f"rows are not compared on the same samples. Runs with the same set answered the same samples: "
            + "; ".join(groups))


def structured_note(board: pd.DataFrame) -> str | None:
    """The note a board needs when some of its runs asked for structured output (their
    instructability is not measured), else None."""

    for label in board["protocol"].unique() if "protocol" in board.columns else ():
        try:
            if Protocol.from_label(str(label)).structured:
                return BOARD_NOTE
        except ValueError:
            continue
    return None


def protocol_heading(board_name: str, mode: str) -> str:
    """What a board header says about its protocol."""
    if board_name == SIDE_BY_SIDE:
        return f"{mode} · protocols side by side (each in its row label)"
    return f"protocol {board_name}"


def board_labeller(board: pd.DataFrame) -> str:
    """Who labelled the NLI pairs of a board's numbers (one profile): "NLI labels by LLM judge <model>
    (prompt <version>)" for a judge profile, else "NLI labels by NLI model <id>"; "" when the board has
    no NLI-based number. Judge and NLI-model numbers never share a board: their profile keys differ."""

    if board.empty:
        return ""
    nli = board[board["metric"].isin(metric_names(needs="nli")) & (board["status"] != "unavailable")]
    if nli.empty:
        return ""
    profiles = sorted(set(nli["profile"]))
    return "; ".join(note for p in profiles if (note := labeller_note(p, nli.loc[nli["profile"] == p, "model_id"])))


def _title(block: Mapping[str, Any]) -> str:
    policy = {"worst": "invalid replies scored worst (paper)", "exclude": "invalid replies excluded"}.get(
        block["invalid"], f"invalid replies: {block['invalid']}")
    labeller = f" · {block['labeller']}" if block.get("labeller") else ""
    disjoint = f" · {NO_SHARED_SAMPLES}" if block.get("disjoint") else ""
    return (f"{block['dataset']} · {protocol_heading(block['board'], block['mode'])} · profile {block['profile']}"
            f"{labeller} · {policy}{disjoint}")


def _grid(block: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows (models as rows, n, metrics then overall columns) of one block."""
    header = ["model", "n"] + [m + ("*" if m in block["degraded"] else "") for m in block["metrics"]]
    header += ["overall", "overall_paper", "rank"]
    rows = []
    for model in block["models"]:
        n = block["sizes"].get(model, (None, None))[0]
        row = [model, "–" if n is None else str(n)]
        row += [_cell(m, block["cells"].get((model, m))) for m in block["metrics"]]
        ov = block["overall"].get(model, {})
        rank = ov.get("rank")
        row += [_fmt(ov.get("overall", math.nan)), _fmt(ov.get("overall_paper", math.nan)),
                "–" if rank is None or pd.isna(rank) else str(int(rank))]
        rows.append(row)
    return header, rows


def _text_table(board: pd.DataFrame) -> str:
    out = []
    for block in _blocks(board):
        header, rows = _grid(block)
        # Metrics as rows, models as columns: fits a terminal with many metrics.
        table = [[header[0].replace("model", "metric")] + [r[0] for r in rows]]
        for j in range(1, len(header)):
            table.append([header[j]] + [r[j] for r in rows])
        widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
        out.append(f"== {_title(block)} ==")
        for k, line in enumerate(table):
            out.append("  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(line)))
            if k == 0:
                out.append("  ".join("-" * w for w in widths))
        out.extend(f"  {note}" for note in block["notes"])
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n" if out else "(no results)\n"


def _markdown(board: pd.DataFrame) -> str:
    out = []
    for block in _blocks(board):
        header, rows = _grid(block)
        out.append(f"### {_title(block)}\n")
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "|".join([" --- "] + [" ---: "] * (len(header) - 1)) + "|")
        for row in rows:
            out.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
        if block["notes"]:
            out.append("")
            out.extend(f"- {note}" for note in block["notes"])
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n" if out else "(no results)\n"


_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def _latex_escape(text: str) -> str:
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in text).replace("±", r"$\pm$").replace("–", "--")


def _latex(board: pd.DataFrame) -> str:
    out = []
    for block in _blocks(board):
        header, rows = _grid(block)
        out.append(f"% {_title(block)}")
        out.append(r"\begin{table}[ht]")
        out.append(r"\centering")
        out.append(r"\caption{" + _latex_escape(_title(block)) + "}")
        out.append(r"\begin{tabular}{l" + "r" * (len(header) - 1) + "}")
        out.append(r"\hline")
        out.append(" & ".join(_latex_escape(h) for h in header) + r" \\")
        out.append(r"\hline")
        for row in rows:
            out.append(" & ".join(_latex_escape(c) for c in row) + r" \\")
        out.append(r"\hline")
        out.append(r"\end{tabular}")
        out.append(r"\end{table}")
        out.extend(f"% {note}" for note in block["notes"])
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n" if out else "% (no results)\n"


def _jsonable(value: Any) -> Any:
    if value is None or value is pd.NA:
        return None
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    return value


def _csv(board: pd.DataFrame) -> str:

    return csv_text(board[board["n"] > 0][CSV_COLUMNS])


def _protocol_fields(label: str) -> dict[str, Any]:
    """``protocol_<field>`` of a protocol label (all None for a label that is not one)."""

    try:
        fields = Protocol.from_label(str(label)).to_dict()
    except ValueError:
        fields = {}
    return {f"protocol_{name}": fields.get(name) for name in PROTOCOL_FIELDS}


def _json(board: pd.DataFrame) -> str:
    overall = overall_table(board)
    labels = {label: _protocol_fields(label) for label in board["protocol"].unique()} if "protocol" in board else {}
    payload = {
        "profiles": sorted(board["profile"].unique().tolist()) if len(board) else [],
        "nli_labels": board_labeller(board),
        "invalid": sorted(board["invalid"].unique().tolist()) if len(board) else [],
        "protocols": sorted(labels),
        "metrics": [{k: _jsonable(v) for k, v in row.items()} | labels.get(row.get("protocol"), {})
                    for row in board.to_dict("records")],
        "overall": [{k: _jsonable(v) for k, v in row.items()} for row in overall.to_dict("records")],
    }
    return json.dumps(payload, indent=2, ensure_ascii=False) + "\n"


EXPORT_FORMATS = {"table": _text_table, "csv": _csv, "markdown": _markdown, "latex": _latex, "json": _json}


def export_board(board: pd.DataFrame, fmt: str = "table") -> str:
    """Render a board: ``table`` (terminal text), ``csv`` (long: exactly :data:`CSV_COLUMNS`, numbers
    unrounded, unavailable metrics left out), ``markdown``, ``latex`` (models as rows, "mean ± std"
    at 2 decimals, failure ratio at 3, plus overall, overall_paper and rank) or ``json`` (every
    board column and the overall table; NaN as null)."""
    try:
        render = EXPORT_FORMATS[fmt]
    except KeyError:
        raise ConfigurationError(f"unknown format {fmt!r}; expected one of {', '.join(EXPORT_FORMATS)}") from None
    return render(board)


def board_sections(board: pd.DataFrame) -> list[dict[str, Any]]:
    """The boards of ``board`` as the ``table``/``markdown`` exports lay them out, for other renderers
    (the HTML report): one dict per board with ``dataset``, ``mode``, ``board``, ``profile``, ``title``
    (the header the other exports print), ``header`` and ``rows`` (models as rows, the same cell text)
    and ``notes``."""
    sections = []
    for block in _blocks(board):
        header, rows = _grid(block)
        sections.append({"dataset": block["dataset"], "mode": block["mode"], "board": block["board"],
                         "profile": block["profile"], "title": _title(block), "header": header, "rows": rows,
                         "notes": list(block["notes"])})
    return sections
