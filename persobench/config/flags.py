"""The CLI's flags, generated from a configuration's field table (:mod:`persobench.config.fields`):
:func:`add_config_flags` adds one flag per offered field (its help, default, metavar and choices from
the field), each parsed by :func:`value_parser`; :func:`config_from_args` reads the parsed flags back as
the model, a bad value refused with the line the app's form shows for it (:func:`~persobench.config.fields.config_error`).
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

from persobench.config.fields import (Config, ConfigModel, OfferedField, literal_choices, number_kind, offered_fields,
                                      validated)


def text_value(offered: OfferedField, text: str) -> Any:
    """The value a flag's (or a text widget's) text stands for: one of the field's literal choices,
    else a number for a number field, else the text; never checked here (see :meth:`OfferedField.check`)."""
    text = text.strip()
    for choice in literal_choices(offered.info):
        if text.lower() == str(choice).lower():
            return choice
    kind = number_kind(offered.info)
    try:
        return kind(text) if kind is not None else text
    except ValueError:
        return text


def value_parser(offered: OfferedField) -> Callable[[str], Any]:
    """An argparse ``type``: the flag's text as the field's value, unchecked. The model checks it when
    :func:`config_from_args` builds the configuration, so a bad value is the one line (exit 2) the app's
    form shows under its widget for the same value, not argparse's usage text."""

    def parse(text: str) -> Any:
        if offered.ui.split:
            return tuple(part.strip() for part in text.split(offered.ui.split) if part.strip())
        return text_value(offered, text)

    parse.__name__ = offered.dest
    return parse


def flag_default(model: type[ConfigModel], offered: OfferedField) -> Any:
    """What the flag holds when not given: the field's default; a nested field's default when its
    parent's default holds one, else ``None`` (the parent stays at ``None``)."""
    if len(offered.path) == 1:
        return offered.default if not offered.info.is_required() else None
    parent = model.model_fields[offered.path[0]].get_default(call_default_factory=True)
    return None if parent is None else getattr(parent, offered.path[1])


def add_config_flags(parser: Any, model: type[ConfigModel], names: tuple[str, ...] | None = None) -> None:
    """One flag per offered field of ``model`` (``names``: these top-level fields only, in this order)."""
    table = list(offered_fields(model, names))
    if names is not None:
        table.sort(key=lambda offered: names.index(offered.path[0]))
    for offered in table:
        ui = offered.ui
        if ui.flag is None:
            continue
        if offered.info.annotation is bool:
            parser.add_argument(ui.flag, action="store_true", dest=offered.dest, help=offered.help)
            continue
        choices = tuple(ui.choices()) if ui.choices else literal_choices(offered.info)
        if choices and number_kind(offered.info) is None:  # a pure choice: argparse lists it in --help
            parser.add_argument(ui.flag, choices=choices, default=flag_default(model, offered), dest=offered.dest,
                                help=offered.help, metavar=ui.metavar)
            continue
        parser.add_argument(ui.flag, type=value_parser(offered), default=flag_default(model, offered),
                            dest=offered.dest, metavar=ui.metavar, help=offered.help)


def config_values(model: type[ConfigModel], args: argparse.Namespace,
                  names: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The parsed flags of :func:`add_config_flags` as ``model``'s fields; a nested field given fills its
    parent, the parent's other fields at their defaults (no nested flag given: the parent's default)."""
    values: dict[str, Any] = {}
    for offered in offered_fields(model, names):
        if offered.ui.flag is None:
            continue
        value = getattr(args, offered.dest)
        if len(offered.path) == 1:
            values[offered.path[0]] = value
            continue
        parent, sub = offered.path
        default = model.model_fields[parent].get_default(call_default_factory=True)
        if value is None and default is None:
            values.setdefault(parent, None)
            continue
        current = values.get(parent) or (dict(default) if default is not None else {})
        values[parent] = {**current, sub: value}
    return values


def config_from_args(model: type[Config], args: argparse.Namespace, names: tuple[str, ...] | None = None,
                     **extra: Any) -> Config:
    """``model`` of the parsed flags (and ``extra`` fields the command builds itself); one
    :class:`~persobench.errors.ConfigurationError` line for a bad value."""
    return validated(model, {**config_values(model, args, names), **extra})
