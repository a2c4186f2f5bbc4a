"""The LLM judge: NLI labels from any provider's model, in the NLI model's place.

* :mod:`~persobench.metrics.judge.judge_config`: :class:`Judge`, a
  :class:`~persobench.config.judge.JudgeConfig` resolved (:func:`resolve_judge`).
* :mod:`~persobench.metrics.judge.labeller`: :class:`JudgeLabeller`, pairs labelled through the LLM layer.
* :mod:`~persobench.metrics.judge.judge_session`: :class:`JudgeSession`, one scoring pass's judge and its
  answers (:class:`NLIAnswers`), read by the NLI family.
* :mod:`~persobench.metrics.judge.judge_prompt`: the versioned prompt templates (``judge_templates/*.toml``).
* :mod:`~persobench.metrics.judge.judge_batch`: the judge's requests through a provider's batch API.
"""

from persobench.metrics.judge.judge_batch import pending_note
from persobench.metrics.judge.judge_config import (JUDGE_FLAGS, JUDGE_TIMEOUT_FLAG, Judge, JudgeConfig, make_judge,
                                                   resolve_judge)
from persobench.metrics.judge.judge_prompt import DEFAULT_PROMPT, JudgeTemplate, load_template, template_versions
from persobench.metrics.judge.judge_session import JudgeSession, NLIAnswers, judge_session
from persobench.metrics.judge.labeller import (Agreement, JudgeError, JudgeEstimate, JudgeLabeller, JudgeStats,
                                               agreement, judge_provenance, labeller_note)

__all__ = [
    "Agreement", "DEFAULT_PROMPT", "JUDGE_FLAGS", "JUDGE_TIMEOUT_FLAG", "Judge", "JudgeConfig", "JudgeError", "JudgeEstimate",
    "JudgeLabeller", "JudgeSession", "JudgeStats", "JudgeTemplate", "NLIAnswers", "agreement",
    "judge_provenance", "judge_session", "labeller_note", "load_template", "make_judge", "pending_note",
    "resolve_judge", "template_versions",
]
