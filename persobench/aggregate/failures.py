"""Invalid replies counted the way the boards count them: one row per run (a run's last row per
sample, as :func:`persobench.aggregate.run_samples`), runs of different protocols never added
together, and why a reply was cut off decided from what the run stored. Part of
:mod:`persobench.aggregate` (not re-exported).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

#: Reply statuses other than ``ok``, in the order the pages list them.
FAILURE_STATUSES = ("truncated", "invalid_json", "missing_field", "empty", "refused", "api_error")
#: Finish reasons that mean the token limit was hit, as providers spell them.
LENGTH_REASONS = frozenset({"length", "max_tokens", "max_output_tokens", "token_limit"})
#: What post-processing appends when a reply ends inside its JSON object and no finish reason says
#: why: a guess, which :func:`stated_error` replaces with what the stored token count shows.
GUESSED_CUT = " (cut off by the token limit)"
#: Columns of :func:`failure_summary` before the per-status counts.
SUMMARY_COLUMNS = ["dataset", "mode", "protocol", "model", "total", "ok", "failed", "failure ratio"]


def latest_rows(generations: pd.DataFrame) -> pd.DataFrame:
    """A generations table with one row per sample id, its last (a resumed run may have written a
    sample twice; the boards count the last row too)."""
    if "sample_id" not in generations.columns or not generations["sample_id"].duplicated().any():
        return generations
    return generations.drop_duplicates("sample_id", keep="last").reset_index(drop=True)


def failure_summary(counts: pd.DataFrame) -> pd.DataFrame:
    """One row per run of ``counts`` (one row per run and status: run_id, dataset, mode, protocol,
    model, status, count), as the boards group them: dataset, mode, protocol, model, total, ok,
    failed, failure ratio, then one column per status; rows of one board (dataset, mode, protocol)
    together, the most failing first. Runs are never added together, so a model run under two
    protocols has two rows."""
    keys = ["run_id", "dataset", "mode", "protocol", "model"]
    if counts.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS + list(FAILURE_STATUSES))
    wide = counts.pivot_table(index=keys, columns="status", values="count", aggfunc="sum", fill_value=0)
    wide.columns = [str(c) for c in wide.columns]
    for status in ("ok", *FAILURE_STATUSES):
        if status not in wide.columns:
            wide[status] = 0
    extra = sorted(c for c in wide.columns if c not in ("ok", *FAILURE_STATUSES))
    wide["total"] = wide[["ok", *FAILURE_STATUSES, *extra]].sum(axis=1)
    wide["failed"] = wide["total"] - wide["ok"]
    wide["failure ratio"] = wide["failed"] / wide["total"].where(wide["total"] > 0)
    wide = wide.reset_index().sort_values(["dataset", "mode", "protocol", "failure ratio", "model"],
                                          ascending=[True, True, True, False, True])
    return wide[SUMMARY_COLUMNS + list(FAILURE_STATUSES) + extra].reset_index(drop=True)


def _count(value: Any) -> int | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else int(number)


def truncation_cause(finish_reason: Any, completion_tokens: Any, max_tokens: Any) -> str:
    """Why a truncated reply stopped, from what its run stored: the token count against the run's
    limit when both are known, else a finish reason that names the limit, else ``unknown`` (an
    imported reply that ends inside its JSON object may have been cut by the limit or not: the paper's
    files keep no token count)."""
    tokens, limit = _count(completion_tokens), _count(max_tokens)
    if tokens is not None and limit is not None:
        if tokens >= limit:
            return f"token limit: {tokens} of {limit} tokens"
        return f"not the token limit: {tokens} of {limit} tokens"
    reason = str(finish_reason).strip().lower() if isinstance(finish_reason, str) else ""
    if reason in LENGTH_REASONS:
        return f"token limit (finish reason {reason!r})"
    if tokens is not None:
        return f"unknown: {tokens} tokens, the run recorded no limit"
    return "unknown: no token count stored"


def stated_error(error: Any, status: Any, cause: str) -> str:
    """The parse error as shown: a truncated reply's guess at its cause replaced by ``cause``
    (:func:`truncation_cause`)."""
    text = error if isinstance(error, str) else ""
    if status != "truncated":
        return text
    return f"{text.removesuffix(GUESSED_CUT)}; cause: {cause}" if text else f"cause: {cause}"


def run_row_labels(runs: pd.DataFrame) -> dict[str, str]:
    """run id -> how a row names the run when several boards are on one page (``runs``: run_id,
    dataset, mode, protocol, model and optionally created_at, one row per run or more): the model and
    its mode, the dataset when several are shown, the protocol when two runs share all that, then when
    the run was made, and the run's id only if they still do: never the hash where a name tells the
    runs apart."""
    rows = runs.drop_duplicates("run_id")
    several_datasets = rows["dataset"].nunique() > 1
    labels = {str(r.run_id): " · ".join([str(r.model), str(r.mode), *([str(r.dataset)] if several_datasets else [])])
              for r in rows.itertuples()}
    for extra in ("protocol", "created_at", "run_id"):
        if extra not in rows.columns:
            continue
        counts = pd.Series(list(labels.values())).value_counts()
        for r in rows.itertuples():
            if counts[labels[str(r.run_id)]] > 1:
                value = str(getattr(r, extra))
                labels[str(r.run_id)] += f" · {value[:16].replace('T', ' ') if extra == 'created_at' else value}"
    return labels
