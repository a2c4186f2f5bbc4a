"""The LLM judge in the app: the form that picks it (New run's scoring step, the Metrics page) and
its cost estimate, shown before anything is launched. Keys never pass through here: the job's
process reads them from the app's environment."""

from __future__ import annotations

from typing import Any

from persobench.app.text import md_escape
from persobench.scoring import JUDGED_METRICS_TEXT
from persobench.app.page_cache import current_home
from persobench.errors import PersoBenchError
from persobench.metrics import JudgeConfig
from persobench.core import redact
from persobench.llm import batch_cost

#: What the judge toggle's help says, on both pages.
JUDGE_HELP = (f"Label the NLI pairs of {JUDGED_METRICS_TEXT} with an LLM "
              "instead of the NLI model (the offline profile has none). Judge numbers are stored under a "
              "profile of their own (its name carries the judge and the prompt version) and never share a "
              "board with NLI-model numbers.")


#: What the judge's batch checkbox says.
BATCH_HELP = ("Send the judge's requests through the provider's batch API (OpenAI Batch API, Anthropic Message "
              "Batches): about half the price, answered within 24 hours; the job waits for the batch. Judges "
              "without a batch API cannot use it.")


def judge_form(prefix: str) -> Any:
    """A toggle and, when on, a widget per field of the judge (the fields ``score --judge`` takes:
    :data:`~persobench.metrics.judge.judge_config.JUDGE_FLAGS`); the checked
    :class:`~persobench.metrics.judge.judge_config.JudgeConfig`, or None (off, no model, or a bad field,
    said in a warning). Widget keys: ``<prefix>_judge_on``, ``_judge_model``, ``_judge_base_url``,
    ``_judge_concurrency``, ``_judge_max_cost``, ``_judge_batch``."""
    import streamlit as st

    if not st.toggle("Score the NLI metrics with an LLM judge", key=f"{prefix}_judge_on", help=JUDGE_HELP):
        return None
    c1, c2, c3, c4 = st.columns([2, 2, 1, 1])
    fields: dict[str, Any] = {
        "model": c1.text_input("Judge model", value="openai:gpt-4o-mini", key=f"{prefix}_judge_model",
                               help="Any model a run takes: provider:model, a preset, or a models-file name.").strip(),
        "base_url": c2.text_input("Judge base URL (OpenAI-compatible servers)", key=f"{prefix}_judge_base_url",
                                  placeholder="http://localhost:11434/v1").strip() or None,
        "concurrency": c3.selectbox("Judge requests in flight", ["8", "auto", "1", "4", "16", "32"],
                                    key=f"{prefix}_judge_concurrency"),
        "max_cost": float(c4.number_input("Max judge cost (USD, 0 = no cap)", min_value=0.0, value=0.0, step=0.5,
                                          key=f"{prefix}_judge_max_cost")) or None,
    }
    # The job waits for the batch and collects it (a job stopped before then leaves the batch id in the
    # store: judging again collects it, never submitting twice).
    fields["batch"] = st.checkbox("Batch API", key=f"{prefix}_judge_batch", help=BATCH_HELP)
    if not fields["model"]:
        return None
    fields["concurrency"] = "auto" if fields["concurrency"] == "auto" else int(fields["concurrency"])

    try:
        return JudgeConfig.from_dict(fields, home=current_home())
    except PersoBenchError as exc:

        st.warning(f"LLM judge: {md_escape(redact(' '.join(str(exc).split())))}")
        return None


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
