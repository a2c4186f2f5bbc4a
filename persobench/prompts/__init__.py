"""Prompts: a sample turned into chat messages, and the protocol a run's outputs depend on.

* :mod:`~persobench.prompts.templates`: the prompt templates and message construction.
* :mod:`~persobench.prompts.protocol`: a run's protocol (template family, tokens, temperature, parse
  policy, structured output), so that boards compare like with like.
"""

from persobench.prompts.protocol import (PAPER, PAPER_MAX_TOKENS, PAPER_POLICY, PAPER_TEMPERATURE, Protocol,
                                         default_policy, paper_protocol, protocol_of)
from persobench.prompts.templates import (BUILTIN_TEMPLATES, DEFAULT_LOCAL_TEMPLATE, DEFAULT_TEMPLATE, MODES,
                                          TEMPLATE_ALIASES, TEMPLATE_NAMES, PromptTemplate, TemplateError,
                                          build_messages, default_template_name, get_template, load_template,
                                          render_context, render_personas)

__all__ = [
    "BUILTIN_TEMPLATES", "DEFAULT_LOCAL_TEMPLATE", "DEFAULT_TEMPLATE", "MODES", "PAPER", "PAPER_MAX_TOKENS",
    "PAPER_POLICY", "PAPER_TEMPERATURE", "PromptTemplate", "Protocol", "TEMPLATE_ALIASES", "TEMPLATE_NAMES",
    "TemplateError", "build_messages", "default_policy", "default_template_name", "get_template", "load_template",
    "paper_protocol", "protocol_of", "render_context", "render_personas",
]
