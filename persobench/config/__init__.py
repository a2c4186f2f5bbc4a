"""Configurations as field tables: each a pydantic model whose fields carry their type, default,
bounds, help, CLI flag and widget (:mod:`~persobench.config.fields`). The CLI's flags
(:mod:`~persobench.config.flags`) and the app's forms (:mod:`persobench.app.forms`) are generated from
them, and both refuse a bad value with the same line. Imports only pydantic, :mod:`persobench.errors`
and :mod:`persobench.core`, so the CLI builds its parser without loading a stage.

* :mod:`~persobench.config.fields`: :class:`Ui`, :class:`ConfigModel`, :func:`changed`, :func:`config_error`.
* :mod:`~persobench.config.flags`: :func:`add_config_flags`, :func:`config_values`, :func:`config_argv` (their inverse).
* :mod:`~persobench.config.retry_policy`: :class:`RetryPolicy`.
* :mod:`~persobench.config.judge`: :class:`JudgeConfig`, the LLM judge as a user gives it.
"""

from persobench.config.fields import (ConfigModel, OfferedField, Ui, changed, config_error, number_kind, offered_field,
                                      offered_fields, validated)
from persobench.config.flags import add_config_flags, config_argv, config_from_args, config_values, text_value
from persobench.config.judge import JUDGE_TIMEOUT_FLAG, JudgeConfig
from persobench.config.retry_policy import RetryPolicy
from persobench.config.run_config import TIMEOUT_FLAG, GenerationConfig, ModelOptions

__all__ = ["ConfigModel", "GenerationConfig", "JUDGE_TIMEOUT_FLAG", "JudgeConfig", "ModelOptions", "OfferedField",
           "RetryPolicy", "TIMEOUT_FLAG", "Ui", "add_config_flags", "changed", "config_argv", "config_error",
           "config_from_args", "config_values", "number_kind", "offered_field", "offered_fields", "text_value",
           "validated"]
