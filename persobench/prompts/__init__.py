"""Prompts: a sample turned into chat messages, and the protocol a run's outputs depend on.

* :mod:`~persobench.prompts.templates`: the prompt templates and message construction.
* :mod:`~persobench.prompts.protocol`: a run's protocol (template family, tokens, temperature, parse
  policy, structured output), so that boards compare like with like.
"""
