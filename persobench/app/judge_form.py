"""The LLM judge in the app: the form that picks it (New run's scoring step, the Metrics page) and
its cost estimate, shown before anything is launched. Keys never pass through here: the job's
process reads them from the app's environment."""

from __future__ import annotations

from typing import Any

from persobench.app.text import md_escape
from persobench.scoring import JUDGED_METRICS_TEXT
from persobench.app.page_cache import current_home
from persobench.errors import PersoBenchError
from persobench.app.forms import config_form
from persobench.config import JudgeConfig, validated
from persobench.metrics import resolve_judge
from persobench.core import redact
from persobench.llm import batch_cost

#: What the judge toggle's help says, on both pages.
JUDGE_HELP = (f"Label the NLI pairs of {JUDGED_METRICS_TEXT} with an LLM "
              "instead of the NLI model (the offline profile has none). Judge numbers are stored under a "
              "profile of their own (its name carries the judge and the prompt version) and never share a "
              "board with NLI-model numbers.")


def judge_form(prefix: str) -> tuple[Any, bool]:
    """A toggle and, when on, the judge's form, generated from its field table
    (:class:`~persobench.config.judge.JudgeConfig`: the fields ``score --judge`` takes, with
    the same defaults and checks); each bad value in red under its widget, in the line the CLI prints.
    Returns (the resolved :class:`~persobench.metrics.judge.judge_config.Judge` or None, whether the
    form can launch: off, or on with every field valid and the judge resolved). Widget keys:
    ``<prefix>_judge_on``, ``_judge_model``, ``_judge_base_url``, ``_judge_concurrency``,
    ``_judge_max_cost``, ``_judge_timeout``, ``_judge_batch``."""
    import streamlit as st

    if not st.toggle("Score the NLI metrics with an LLM judge", key=f"{prefix}_judge_on", help=JUDGE_HELP):
        return None, True
    # The job waits for a batch and collects it (a job stopped before then leaves the batch id in the
    # store: judging again collects it, never submitting twice).
    values, errors = config_form(JudgeConfig, prefix, widths={"judge_model": 2, "judge_base_url": 2})
    if errors:
        return None, False
    try:
        return resolve_judge(validated(JudgeConfig, values), home=current_home()), True
    except PersoBenchError as exc:

        st.warning(f"LLM judge: {md_escape(redact(' '.join(str(exc).split())))}")
        return None, False


def show_estimate(estimate: Any, problem: str, *, note: str = "", judge: Any = None) -> bool:
    """The judge's estimate as one caption (or the problem as a warning); True when it can launch.
    With ``judge`` sending through the batch API, the caption gives the batch cost too."""
    import streamlit as st

    if estimate is None:
        st.warning(f"LLM judge: {md_escape(problem)}")
        return False
    cost = _usd(estimate.cost_usd)
    if judge is not None and judge.batch is not None:
        cost += f" ({_usd(batch_cost(judge.spec, estimate.prompt_tokens, estimate.completion_tokens))} through the Batch API)"
    st.caption(f"LLM judge: {estimate.pairs:,} pair(s) to label, {estimate.cached:,} in the response cache, "
               f"{estimate.requests:,} request(s) to send, about {estimate.prompt_tokens:,} prompt tokens; "
               f"estimated cost {cost}." + (f" {note}" if note else ""))
    return True


def _usd(value: float | None) -> str:
    return "unknown (no prices for this judge)" if value is None else f"at most {value:.4f} USD"
