"""The CLI's flags, generated from a configuration's field table (:mod:`persobench.config.fields`):
:func:`add_config_flags` adds one flag per offered field (its help, default, metavar and choices from
the field), each parsed by :func:`value_parser`; :func:`config_from_args` reads the parsed flags back as
the model, a bad value refused with the line the app's form shows for it (:func:`~persobench.config.fields.config_error`);
:func:`config_argv` is the inverse: the flags that give a configuration back.

A flag's form follows from its field's type:

* ``bool``: a switch without a value (``--structured``), set when given;
* ``bool | None``: ``on`` or ``off`` (``--chat-template``); not given, ``None`` (the field's own default);
* a dict: ``KEY=VALUE``, repeatable, VALUE parsed as JSON when it can be (``--option``); a key typed in
  the dict's ``TypedDict`` may have a flag of its own (``--max-reply-bytes``), which wins;
* a list (:attr:`~persobench.config.fields.Ui.split`), a choice, a number or a text: one value.
"""

from __future__ import annotations

import argparse
import json
import typing
from typing import Any, Callable, Mapping

import typing_extensions

from persobench.config.fields import (Config, ConfigModel, OfferedField, literal_choices, nested_value, number_kind,
                                      offered_fields, validated)
from persobench.errors import ConfigurationError

#: A ``bool | None`` field's flag: the words it takes (not given: ``None``).
SWITCH = {"on": True, "off": False}


def is_switch(offered: OfferedField) -> bool:
    """A ``bool | None`` field: its flag takes ``on`` or ``off``."""
    return set(typing.get_args(offered.info.annotation)) == {bool, type(None)}


def is_mapping(offered: OfferedField) -> bool:
    """A dict field (``dict[str, Any]`` or a ``TypedDict``): its flag takes ``KEY=VALUE``, repeatable."""
    annotation = offered.info.annotation
    return typing.get_origin(annotation) is dict or typing_extensions.is_typeddict(annotation)


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


def key_values(offered: OfferedField, items: list[str]) -> dict[str, Any]:
    """A dict flag's ``KEY=VALUE`` items as the dict (VALUE parsed as JSON when it can be); one line
    naming the flag for an item without a key."""
    values: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigurationError(f"{offered.ui.flag} expects KEY=VALUE, got {item!r}")
        try:
            values[key] = json.loads(value)
        except ValueError:
            values[key] = value
    return values


def flag_default(model: type[ConfigModel], offered: OfferedField) -> Any:
    """What the flag holds when not given: the field's default; a nested field's default when its
    parent's default holds one, else ``None`` (the parent stays as it is)."""
    if len(offered.path) == 1:
        if is_mapping(offered):
            return []  # the items given, none yet
        return offered.default if not offered.info.is_required() else None
    return nested_value(model.model_fields[offered.path[0]].get_default(call_default_factory=True), offered.path[1:])


def _place(offered: OfferedField, names: tuple[str, ...] | None) -> int | None:
    """Where ``names`` puts the field's flag in ``--help``: at its dotted path (``options.max_reply_bytes``),
    else at its top-level field's name; ``None``: not there."""
    if names is None:
        return 0
    for name in (".".join(offered.path), offered.path[0]):
        if name in names:
            return names.index(name)
    return None


def add_config_flags(parser: Any, model: type[ConfigModel], names: tuple[str, ...] | None = None) -> None:
    """One flag per offered field of ``model`` (``names``: these fields only, in this order; a nested
    field goes where its dotted path is named, else with its parent)."""
    placed = [(place, offered) for offered in offered_fields(model)
              if offered.ui.flag and (place := _place(offered, names)) is not None]
    for _, offered in sorted(placed, key=lambda item: item[0]):
        ui = offered.ui
        common = {"dest": offered.dest, "help": offered.help}
        if offered.info.annotation is bool:
            parser.add_argument(ui.flag, action="store_true", **common)
        elif is_switch(offered):
            parser.add_argument(ui.flag, choices=tuple(SWITCH), default=None, metavar=ui.metavar, **common)
        elif is_mapping(offered):
            parser.add_argument(ui.flag, action="append", default=[], metavar=ui.metavar, **common)
        elif (choices := tuple(ui.choices()) if ui.choices else literal_choices(offered.info)) \
                and number_kind(offered.info) is None:  # a pure choice: argparse lists it in --help
            parser.add_argument(ui.flag, choices=choices, default=flag_default(model, offered), metavar=ui.metavar,
                                **common)
        else:
            parser.add_argument(ui.flag, type=value_parser(offered), default=flag_default(model, offered),
                                metavar=ui.metavar, **common)


def _flag_value(offered: OfferedField, value: Any) -> Any:
    """A top-level field's parsed flag as the field's value (a switch's word, a dict's items)."""
    if is_switch(offered) and value is not None:
        return SWITCH[value]
    if is_mapping(offered):
        return key_values(offered, value)
    return value


def config_values(model: type[ConfigModel], args: argparse.Namespace,
                  names: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The parsed flags of :func:`add_config_flags` as ``model``'s fields; a nested field given fills its
    parent (a model's other fields at their defaults, a dict's other keys as given), a nested field not
    given leaves its parent as it is."""
    values: dict[str, Any] = {}
    for offered in offered_fields(model, names):
        if offered.ui.flag is None:
            continue
        value = getattr(args, offered.dest)
        parent = offered.path[0]
        if len(offered.path) == 1:
            values[parent] = _flag_value(offered, value)
            continue
        default = model.model_fields[parent].get_default(call_default_factory=True)
        if value is None:
            values.setdefault(parent, default)
            continue
        current = values.get(parent)
        values[parent] = {**dict(current if current is not None else default or {}), offered.path[1]: value}
    return values


def config_from_args(model: type[Config], args: argparse.Namespace, names: tuple[str, ...] | None = None,
                     **extra: Any) -> Config:
    """``model`` of the parsed flags (and ``extra`` fields the command builds itself); one
    :class:`~persobench.errors.ConfigurationError` line for a bad value."""
    return validated(model, {**config_values(model, args, names), **extra})


def config_argv(config: ConfigModel, always: tuple[str, ...] = ()) -> list[str]:
    """The flags that give ``config`` back through :func:`add_config_flags` and :func:`config_from_args`
    (the inverse of the flags): each offered field whose value is not its flag's default (``always``:
    these fields whatever their value), in the field table's order. A dict's key with a flag of its own
    is given with that flag; a value starting with ``-`` as ``--flag=VALUE``. Fields without a flag
    are not given (their defaults come back)."""
    model = type(config)
    argv: list[str] = []
    for offered in offered_fields(model):
        flag = offered.ui.flag
        value = nested_value(config, offered.path)
        if flag is None or value is None or (value == flag_default(model, offered) and offered.path[0] not in always):
            continue
        if offered.info.annotation is bool:
            argv += [flag] if value else []
        elif is_switch(offered):
            argv += [flag, next(word for word, meant in SWITCH.items() if meant is value)]
        elif is_mapping(offered):
            argv += [item for key, item_value in typing.cast(Mapping[str, Any], value).items()
                     if key not in offered.ui.nested for item in (flag, f"{key}={json.dumps(item_value)}")]
        else:
            text = offered.ui.split.join(value) if offered.ui.split else str(value)
            argv += [f"{flag}={text}"] if text.startswith("-") else [flag, text]
    return argv

