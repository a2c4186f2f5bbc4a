"""A board rendered for people and other tools: terminal table, CSV (long), Markdown, LaTeX, HTML and
JSON, with the notes each board needs. Every format carries what the app's Leaderboard shows: the
rank (ties where 95% CIs overlap), each mean with its std and CI, n, the protocol and the profile,
models in rank order (:func:`ranked_board`). Part of :mod:`persobench.aggregate`.

Model labels, notes and reasons come from stored runs and are untrusted: Markdown gets them with every
ASCII punctuation character backslash-escaped (no link, image or HTML can form), LaTeX with its special
characters escaped (a comment line never ends inside them), HTML through :func:`html.escape`, and a
CSV cell never starts a formula (:func:`persobench.store.csv_io.csv_text`)."""

from __future__ import annotations

import html
import json
import math
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from persobench.aggregate.board import SIDE_BY_SIDE
from persobench.aggregate.ranking import model_ranking, overall_table
from persobench.aggregate.results import _info, _metric_order
from persobench.errors import ConfigurationError
from persobench.prompts.protocol import Protocol
from persobench.core.structured import BOARD_NOTE
from persobench.metrics import metric_names
from persobench.metrics.judge.labeller import labeller_note
from persobench.store.csv_io import csv_text

#: Protocol fields added to every row of the json export.
PROTOCOL_FIELDS = ("name", "max_tokens", "temperature", "policy", "structured", "chat_template")
#: The long CSV export has exactly these columns (``protocol``: the board's protocol label, as the
#: markdown header and the json rows name it; ``rank``: the model's rank on its board by ``rank_by``,
#: models whose 95% CIs overlap sharing one; ``invalid``: the invalid-reply policy).
CSV_COLUMNS = ["dataset", "mode", "protocol", "model", "metric", "mean", "std", "n", "ci_low", "ci_high", "rank",
               "rank_by", "profile", "invalid"]
#: What a board is ranked by when nobody chose and it has no overall score (the Leaderboard's default).
RANK_FALLBACK = ("bertscore_f1", "rougeL", "dist2")
#: The columns of :func:`ranked_board`.
RANKING_COLUMNS = ["dataset", "mode", "board", "protocol", "profile", "invalid", "rank_by", "higher_is_better",
                   "rank", "tied", "rank_label", "model", "value", "ci_low", "ci_high", "std", "n", "overall",
                   "overall_ci_low", "overall_ci_high", "overall_paper", "overlaps"]
_BLOCK_KEYS = ["dataset", "mode", "board", "profile"]


# --- ranking -----------------------------------------------------------------------------------

def _with_board_column(board: pd.DataFrame) -> pd.DataFrame:
    """Boards made elsewhere (without :func:`~persobench.aggregate.leaderboard`'s ``board``) as one board."""
    return board if "board" in board.columns else board.assign(board="?", run_n=board["n"])


def default_rank_by(board: pd.DataFrame, overall: pd.DataFrame | None = None) -> str:
    """What one board is ranked by when nobody chose, as the app's Leaderboard does: ``"overall"`` when a
    model has an overall score (``overall``: its :func:`overall_table`, default computed), else the first
    of :data:`RANK_FALLBACK` the board has a number for, else its first such metric in the registry's
    order (instructability aside: it is the failure ratio rescaled)."""
    if overall is None:
        overall = overall_table(board)
    if len(overall) and overall["overall"].notna().any():
        return "overall"
    available = set(board.loc[(board["status"] != "unavailable") & (board["n"] > 0), "metric"])
    for metric in RANK_FALLBACK:
        if metric in available:
            return metric
    ordered = [m for m in _metric_order() if m in available and m != "instructability"]
    return ordered[0] if ordered else "overall"


def _higher_is_better(rank_by: str) -> bool:
    info = _info(rank_by)
    return True if rank_by in ("overall", "overall_paper") or info is None else bool(info.higher_is_better)


def ranked_board(board: pd.DataFrame, overall: pd.DataFrame | None = None, rank_by: str | None = None) -> pd.DataFrame:
    """Every board of ``board`` (one dataset, mode, protocol and profile) with its models in rank order,
    one row per model (columns :data:`RANKING_COLUMNS`), boards in the order of their keys.

    Built on :func:`~persobench.aggregate.model_ranking`: models whose 95% CIs overlap share a rank.
    ``rank_by`` is ``"overall"``, ``"overall_paper"`` or a metric (default: :func:`default_rank_by` of each
    board); ``overall`` an :func:`~persobench.aggregate.overall_with_ci` table, whose CIs rank the overall
    score with ties (default :func:`overall_table`, without CIs). ``rank`` is the number (NA for a model
    without a value), ``tied`` whether another model shares it, ``rank_label`` what the app shows
    (``"1="``, ``"–"``); ``value``, ``ci_low``, ``ci_high`` and ``std`` are the ranking number's; ``protocol``
    the model's own protocol label (on a side-by-side board, ``board`` is :data:`SIDE_BY_SIDE`)."""
    board = _with_board_column(board)
    if overall is None:
        overall = overall_table(board)
    rows: list[dict[str, Any]] = []
    for key, group in board.groupby(_BLOCK_KEYS, sort=True):
        here = overall
        for column, value in zip(_BLOCK_KEYS, key):
            if column in here.columns:
                here = here[here[column] == value]
        chosen = rank_by or default_rank_by(group, here)
        ranked = model_ranking(group, here, chosen, sorted(group["model"].unique()))
        per_model = group.drop_duplicates("model").set_index("model")
        metric_rows = group[group["metric"] == chosen].drop_duplicates("model").set_index("model")
        for r in ranked.to_dict("records"):
            label = str(r["rank"])
            std = metric_rows["std"].get(r["model"], math.nan) if len(metric_rows) else math.nan
            rows.append({**dict(zip(_BLOCK_KEYS, key)), "protocol": per_model.at[r["model"], "protocol"],
                         "invalid": per_model.at[r["model"], "invalid"] if "invalid" in per_model else "",
                         "rank_by": chosen, "higher_is_better": _higher_is_better(chosen),
                         "rank": pd.NA if label == "–" else int(label.rstrip("=")), "tied": label.endswith("="),
                         "rank_label": label, "model": r["model"], "value": r["value"], "ci_low": r["value_ci_low"],
                         "ci_high": r["value_ci_high"], "std": std, "n": r["n"], "overall": r["overall"],
                         "overall_ci_low": r["overall_ci_low"], "overall_ci_high": r["overall_ci_high"],
                         "overall_paper": r["overall_paper"], "overlaps": r["overlaps"]})
    table = pd.DataFrame(rows, columns=RANKING_COLUMNS)
    table["rank"] = table["rank"].astype("Int64")
    return table


# --- export ------------------------------------------------------------------------------------

def _fmt(value: Any, digits: int = 2) -> str:
    return "–" if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)) \
        else f"{value:.{digits}f}"


def _defined(*values: Any) -> bool:
    return all(v is not None and v is not pd.NA and not (isinstance(v, float) and math.isnan(v)) for v in values)


def _cell(metric: str, row: Mapping[str, Any] | None) -> str:
    """``mean ± std [CI low, CI high]`` as the app's "All metrics" table (failure ratio at 3 decimals,
    without std; instructability, a run-level number, alone); ``n/a`` without a number."""
    if row is None or row.get("n", 0) == 0 and math.isnan(row.get("mean", math.nan)):
        return "n/a"
    digits = 3 if metric == "failure_ratio" else 2
    text = _fmt(row["mean"], digits)
    if metric not in ("failure_ratio", "instructability") and _defined(row.get("std")):
        text += f" ± {_fmt(row['std'])}"
    if _defined(row.get("ci_low"), row.get("ci_high")):
        text += f" [{_fmt(row['ci_low'], digits)}, {_fmt(row['ci_high'], digits)}]"
    return text


def _blocks(board: pd.DataFrame, overall: pd.DataFrame | None = None, rank_by: str | None = None
            ) -> list[dict[str, Any]]:
    """Display blocks, one per board (dataset, mode, protocol) and profile: models (in rank order, see
    :func:`ranked_board`), metrics, cells, sample counts, notes."""
    board = _with_board_column(board)
    overall = overall_table(board) if overall is None else overall
    ranking = ranked_board(board, overall, rank_by)
    order = {m: i for i, m in enumerate(_metric_order())}
    blocks = []
    for (dataset, mode, board_name, profile), group in board.groupby(_BLOCK_KEYS, sort=True):
        available = group[group["status"] != "unavailable"]
        metrics = sorted(available["metric"].unique(), key=lambda m: (order.get(m, len(order)), m))
        ov = overall[(overall["dataset"] == dataset) & (overall["mode"] == mode) & (overall["board"] == board_name)
                     & (overall["profile"] == profile)]
        ranked = ranking[(ranking["dataset"] == dataset) & (ranking["mode"] == mode)
                         & (ranking["board"] == board_name) & (ranking["profile"] == profile)]
        models = list(ranked["model"])
        cells = {(r["model"], r["metric"]): r for r in group.to_dict("records")}
        counts = group[group["metric"] == "failure_ratio"]
        sizes = {r["model"]: (int(r["n"]), int(r["run_n"])) for r in counts.to_dict("records")}
        notes = [rank_note(ranked)] if len(ranked) else []
        sets = sample_set_note(group)
        notes += [sets] if sets else sample_notes(sizes)
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
                       "ranking": {r["model"]: r for r in ranked.to_dict("records")},
                       "invalid": group["invalid"].iloc[0] if "invalid" in group else ""})
    return blocks


def rank_note(ranked: pd.DataFrame) -> str:
    """What the rank column of one board (its :func:`ranked_board` rows) means."""
    rank_by = str(ranked["rank_by"].iloc[0])
    direction = "higher" if bool(ranked["higher_is_better"].iloc[0]) else "lower"
    unranked = int(ranked["rank"].isna().sum())
    return (f"ranked by {rank_by} ({direction} is better); models whose 95% CIs overlap share a rank, marked ="
            + (f"; {unranked} without a {rank_by} value unranked (–)" if unranked else ""))


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


def _title(block: Mapping[str, Any], text: Callable[[Any], str] = str) -> str:
    """A block's header; ``text`` escapes the parts that come from stored runs for the format."""
    policy = {"worst": "invalid replies scored worst (paper)", "exclude": "invalid replies excluded"}.get(
        block["invalid"], f"invalid replies: {text(block['invalid'])}")
    labeller = f" · {text(block['labeller'])}" if block.get("labeller") else ""
    disjoint = f" · {NO_SHARED_SAMPLES}" if block.get("disjoint") else ""
    heading = protocol_heading(str(block["board"]), str(block["mode"]))
    return (f"{text(block['dataset'])} · {text(heading)} · profile {text(block['profile'])}"
            f"{labeller} · {policy}{disjoint}")


def _grid(block: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows (models as rows in rank order: rank, model, n, metrics, overall) of one block."""
    header = ["rank", "model", "n"] + [m + ("*" if m in block["degraded"] else "") for m in block["metrics"]]
    header += ["overall", "overall_paper"]
    rows = []
    for model in block["models"]:
        n = block["sizes"].get(model, (None, None))[0]
        rank = block["ranking"].get(model, {}).get("rank_label", "–")
        row = [rank, model, "–" if n is None else str(n)]
        row += [_cell(m, block["cells"].get((model, m))) for m in block["metrics"]]
        ov = block["overall"].get(model, {})
        overall = _fmt(ov.get("overall", math.nan))
        if _defined(ov.get("overall"), ov.get("overall_ci_low"), ov.get("overall_ci_high")):
            overall += f" [{_fmt(ov['overall_ci_low'])}, {_fmt(ov['overall_ci_high'])}]"
        row += [overall, _fmt(ov.get("overall_paper", math.nan))]
        rows.append(row)
    return header, rows


#: The grid's columns whose cells are data (model labels); the others are numbers and ranks.
_DATA_COLUMNS = ("model",)


def _text_table(board: pd.DataFrame, overall: pd.DataFrame | None, rank_by: str | None) -> str:
    out = []
    for block in _blocks(board, overall, rank_by):
        header, rows = _grid(block)
        # Metrics as rows, models as columns (in rank order): fits a terminal with many metrics.
        at = header.index("model")
        table = [["metric"] + [r[at] for r in rows]]
        table += [[header[j]] + [r[j] for r in rows] for j in range(len(header)) if j != at]
        widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
        out.append(f"== {_title(block)} ==")
        for k, line in enumerate(table):
            out.append("  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(line)))
            if k == 0:
                out.append("  ".join("-" * w for w in widths))
        out.extend(f"  {note}" for note in block["notes"])
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n" if out else "(no results)\n"


#: Characters of untrusted text escaped in Markdown: those that make links, images, HTML, entities,
#: code, emphasis, strikethrough, math, headings and table cells (CommonMark lets any be escaped).
#: ``_`` is left as it is: inside a word it emphasises nothing, and metric names are full of it.
_MARKDOWN_SPECIAL = frozenset("\\`*[]<>&|~$#!")


def markdown_text(value: Any) -> str:
    """``value`` (untrusted) as one line of inert Markdown that renders as the same characters: the
    characters of :data:`_MARKDOWN_SPECIAL` backslash-escaped, and the bare web links GFM would make
    (``scheme://``, ``www.``) broken by an escaped ``:`` or ``.``."""
    text = " ".join(str(value).split())
    text = "".join("\\" + ch if ch in _MARKDOWN_SPECIAL else ch for ch in text)
    return text.replace("://", "\\://").replace("www.", "www\\.")


def _markdown(board: pd.DataFrame, overall: pd.DataFrame | None, rank_by: str | None) -> str:
    out = []
    for block in _blocks(board, overall, rank_by):
        header, rows = _grid(block)
        out.append(f"### {_title(block, markdown_text)}\n")
        out.append("| " + " | ".join(markdown_text(h) for h in header) + " |")
        out.append("|" + "|".join([" ---: ", " --- "] + [" ---: "] * (len(header) - 2)) + "|")
        data = {header.index(c) for c in _DATA_COLUMNS}
        for row in rows:
            out.append("| " + " | ".join(markdown_text(cell) if i in data else cell for i, cell in enumerate(row))
                       + " |")
        if block["notes"]:
            out.append("")
            out.extend(f"- {markdown_text(note)}" for note in block["notes"])
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n" if out else "(no results)\n"


_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def _latex_escape(text: str) -> str:
    """One line of LaTeX text: special characters escaped, line breaks as spaces (a blank line would end
    the table's row; a line break would end a comment line and run what follows)."""
    text = " ".join(str(text).split())
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in text).replace("±", r"$\pm$").replace("–", "--")


def _latex_comment(text: str) -> str:
    """``% text`` on one line, whatever ``text`` holds."""
    return "% " + " ".join(str(text).split())


def _latex(board: pd.DataFrame, overall: pd.DataFrame | None, rank_by: str | None) -> str:
    out = []
    for block in _blocks(board, overall, rank_by):
        header, rows = _grid(block)
        out.append(_latex_comment(_title(block)))
        out.append(r"\begin{table}[ht]")
        out.append(r"\centering")
        out.append(r"\caption{" + _latex_escape(_title(block)) + "}")
        out.append(r"\begin{tabular}{rl" + "r" * (len(header) - 2) + "}")
        out.append(r"\hline")
        out.append(" & ".join(_latex_escape(h) for h in header) + r" \\")
        out.append(r"\hline")
        for row in rows:
            out.append(" & ".join(_latex_escape(c) for c in row) + r" \\")
        out.append(r"\hline")
        out.append(r"\end{tabular}")
        out.append(r"\end{table}")
        out.extend(_latex_comment(note) for note in block["notes"])
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n" if out else "% (no results)\n"


def html_table(header: list[str], rows: list[list[Any]], *, css: str = "board") -> str:
    """``<table>`` of ``header`` and ``rows``, every cell escaped as element text (the HTML export's and
    the report's tables)."""
    def cell(tag: str, value: Any) -> str:
        return f"<{tag}>{html.escape('' if value is None else str(value), quote=True)}</{tag}>"

    body = "".join("<tr>" + "".join(cell("td", value) for value in row) + "</tr>\n" for row in rows)
    return (f'<div class="scroll"><table class="{css}"><thead><tr>' + "".join(cell("th", h) for h in header)
            + f"</tr></thead><tbody>\n{body}</tbody></table></div>")


#: The HTML export's policy: no request of any kind, its own inline style only.
HTML_CSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'none'; base-uri 'none'"
_HTML_STYLE = ("body{font-family:system-ui,sans-serif;margin:1.5em;color:#222} table{border-collapse:collapse;"
               "font-size:13px} th,td{border:1px solid #ddd;padding:3px 7px;text-align:right;white-space:nowrap}"
               " th{background:#f4f4f4} td:nth-child(2),th:nth-child(2){text-align:left;white-space:normal}"
               " .notes{color:#555;font-size:13px} .scroll{overflow-x:auto}")


def _html(board: pd.DataFrame, overall: pd.DataFrame | None, rank_by: str | None) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f'<meta http-equiv="Content-Security-Policy" content="{HTML_CSP}">',
             '<meta name="referrer" content="no-referrer">', "<title>PersoBench leaderboard</title>",
             f"<style>{_HTML_STYLE}</style></head><body>"]
    blocks = _blocks(board, overall, rank_by)
    for block in blocks:
        header, rows = _grid(block)
        parts.append(f"<h2>{html.escape(_title(block))}</h2>")
        parts.append(html_table(header, rows))
        if block["notes"]:
            parts.append('<ul class="notes">' + "".join(f"<li>{html.escape(n)}</li>" for n in block["notes"]) + "</ul>")
    if not blocks:
        parts.append("<p>(no results)</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _jsonable(value: Any) -> Any:
    if value is None or value is pd.NA:
        return None
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    return value


def _ranked_rows(board: pd.DataFrame, overall: pd.DataFrame | None, rank_by: str | None) -> pd.DataFrame:
    """The board's rows (one per run and metric) in rank order, each with its model's ``rank`` and the
    board's ``rank_by``: boards in order, models by rank, metrics in the registry's order."""
    board = _with_board_column(board)
    ranking = ranked_board(board, overall, rank_by)
    keys = _BLOCK_KEYS + ["model"]
    position = ranking[keys + ["rank", "rank_by"]].assign(_position=np.arange(len(ranking)))
    rows = board.merge(position, on=keys, how="left")
    order = {m: i for i, m in enumerate(_metric_order())}
    rows["_metric"] = rows["metric"].map(lambda m: order.get(m, len(order)))
    rows = rows.sort_values(["_position", "_metric", "metric"], kind="stable", na_position="last")
    return rows.drop(columns=["_position", "_metric"]).reset_index(drop=True)


def _csv(board: pd.DataFrame, overall: pd.DataFrame | None, rank_by: str | None) -> str:
    rows = _ranked_rows(board, overall, rank_by)
    return csv_text(rows[rows["n"] > 0][CSV_COLUMNS])


def _protocol_fields(label: str) -> dict[str, Any]:
    """``protocol_<field>`` of a protocol label (all None for a label that is not one)."""

    try:
        fields = Protocol.from_label(str(label)).to_dict()
    except ValueError:
        fields = {}
    return {f"protocol_{name}": fields.get(name) for name in PROTOCOL_FIELDS}


def _json(board: pd.DataFrame, overall: pd.DataFrame | None, rank_by: str | None) -> str:
    overall = overall_table(_with_board_column(board)) if overall is None else overall
    labels = {label: _protocol_fields(label) for label in board["protocol"].unique()} if "protocol" in board else {}

    def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
        return [{str(k): _jsonable(v) for k, v in row.items()} for row in frame.to_dict("records")]

    payload = {
        "profiles": sorted(board["profile"].unique().tolist()) if len(board) else [],
        "nli_labels": board_labeller(board),
        "invalid": sorted(board["invalid"].unique().tolist()) if len(board) else [],
        "protocols": sorted(labels),
        "ranking": records(ranked_board(board, overall, rank_by)),
        "metrics": [row | labels.get(row.get("protocol"), {}) for row in records(_ranked_rows(board, overall, rank_by))],
        "overall": records(overall),
    }
    return json.dumps(payload, indent=2, ensure_ascii=False) + "\n"


#: Format -> renderer ``(board, overall, rank_by) -> text``.
EXPORT_FORMATS: dict[str, Callable[[pd.DataFrame, pd.DataFrame | None, str | None], str]] = {
    "table": _text_table, "csv": _csv, "markdown": _markdown, "latex": _latex, "html": _html, "json": _json}


def export_board(board: pd.DataFrame, fmt: str = "table", *, overall: pd.DataFrame | None = None,
                 rank_by: str | None = None) -> str:
    """Render a board, its models in rank order (:func:`ranked_board`; ``rank_by`` default: each board's
    :func:`default_rank_by`; ``overall``: an :func:`~persobench.aggregate.overall_with_ci` table, so the
    overall score shows and ranks with its CI).

    ``table`` (terminal text, models as columns), ``markdown``, ``latex`` and ``html`` (a self-contained
    page that loads nothing): models as rows with rank (``1=`` when tied), n, every metric as "mean ± std
    [95% CI]" at 2 decimals (failure ratio at 3, with its Wilson interval), overall and overall_paper,
    under a header naming dataset, protocol and profile, with the board's notes. ``csv``: long, exactly
    :data:`CSV_COLUMNS`, numbers unrounded, unavailable metrics left out. ``json``: ``ranking`` (one row
    per model, :data:`RANKING_COLUMNS`), ``metrics`` (every board column plus rank and rank_by), the
    ``overall`` table and the protocols; NaN as null."""
    try:
        render = EXPORT_FORMATS[fmt]
    except KeyError:
        raise ConfigurationError(f"unknown format {fmt!r}; expected one of {', '.join(EXPORT_FORMATS)}") from None
    return render(board, overall, rank_by)


def board_sections(board: pd.DataFrame, overall: pd.DataFrame | None = None,
                   rank_by: str | None = None) -> list[dict[str, Any]]:
    """The boards of ``board`` as the ``table``/``markdown`` exports lay them out, for other renderers
    (the HTML report): one dict per board with ``dataset``, ``mode``, ``board``, ``profile``, ``title``
    (the header the other exports print), ``header`` and ``rows`` (models as rows in rank order, the
    same cell text) and ``notes``. ``overall`` and ``rank_by`` as :func:`export_board`."""
    sections = []
    for block in _blocks(board, overall, rank_by):
        header, rows = _grid(block)
        sections.append({"dataset": block["dataset"], "mode": block["mode"], "board": block["board"],
                         "profile": block["profile"], "title": _title(block), "header": header, "rows": rows,
                         "notes": list(block["notes"])})
    return sections
