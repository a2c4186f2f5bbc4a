"""The LLM judge: NLI labels from any provider's model, in the NLI model's place.

* :mod:`~persobench.metrics.judge.judge_config`: :class:`Judge`, a
  :class:`~persobench.config.judge.JudgeConfig` resolved (:func:`resolve_judge`).
* :mod:`~persobench.metrics.judge.labeller`: :class:`JudgeLabeller`, pairs labelled through the LLM layer.
* :mod:`~persobench.metrics.judge.judge_session`: :class:`JudgeSession`, one scoring pass's judge and its
  answers (:class:`NLIAnswers`), read by the NLI family.
* :mod:`~persobench.metrics.judge.judge_prompt`: the versioned prompt templates (``judge_templates/*.toml``).
* :mod:`~persobench.metrics.judge.judge_batch`: the judge's requests through a provider's batch API.
"""
