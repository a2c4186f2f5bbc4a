"""The field table every configuration is written in: a pydantic model (:class:`ConfigModel`) whose
fields carry their type, default and bounds (pydantic), their help (the field's ``description``) and,
in a :class:`Ui` marker beside them in ``Annotated[...]``, their CLI flag and widget. The CLI's flags
(:mod:`persobench.config.flags`) and the app's forms (:mod:`persobench.app.forms`) are generated from
it, and both refuse a bad value with the one line of :func:`field_error`.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal, Mapping, Sequence, TypeVar, Union

import annotated_types
import typing_extensions
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from persobench.errors import ConfigurationError


@dataclass(frozen=True)
class Ui:
    """How a field is offered to a user: its CLI flag and its widget (both optional)."""

    flag: str | None = None
    """The CLI flag (``--judge-timeout``); ``None``: no flag. Its form follows from the field's type
    (:mod:`persobench.config.flags`: a switch, ``on|off``, ``KEY=VALUE``, or one value)."""
    metavar: str | None = None
    """The flag's value in ``--help`` (``SECONDS``)."""
    help: str | None = None
    """The flag's ``--help`` text (public: tests/fixtures/cli_flags.json); default: the field's description."""
    choices: Callable[[], Sequence[str]] | None = None
    """The flag's choices, read when the parser is built (a registry's names: ``--executor``); the
    field's validator checks the value."""
    split: str | None = None
    """The flag's text is a list joined by this separator (``--metrics a,b``)."""
    dest: str | None = None
    """The argparse destination, when not the flag's name (``--models`` -> ``models_file``)."""
    widget: str | None = None
    """``text``, ``number``, ``select`` or ``checkbox``; ``None``: no widget."""
    key: str | None = None
    """The widget's key after the form's prefix (``judge_timeout`` -> ``metrics_judge_timeout``; a public
    interface), and the field's name in an error line (default: the field's own name)."""
    label: str = ""
    """The widget's label."""
    widget_help: str | None = None
    """The widget's tooltip."""
    options: tuple[str, ...] = ()
    """What a ``select`` offers (as text); the value is still checked by the field's type."""
    initial: Any = None
    """What the widget shows first when it is not the field's default (a required field's suggestion,
    or ``0`` standing for ``None`` in a number widget: see :attr:`zero_is_none`)."""
    zero_is_none: bool = False
    """A number widget's 0 means ``None`` ("0 = no cap")."""
    placeholder: str | None = None
    """A text widget's placeholder."""
    step: float | None = None
    """A number widget's step."""
    unit: str = ""
    """What the number counts, said in the error line (``seconds for the whole request``)."""
    nested: Mapping[str, "Ui"] = field(default_factory=dict)
    """A nested model's fields, or a typed dict's keys, offered here by name (``retry`` -> ``timeout`` as
    ``--judge-timeout``; ``options`` -> ``max_reply_bytes`` as ``--max-reply-bytes``); a value given
    fills the nested model (its other fields at their defaults) or that key of the dict."""


class ConfigModel(BaseModel):
    """A configuration: frozen, no unknown field, no NaN or infinity, defaults checked too. Built by a
    front end through :func:`validated` (a bad value: one :class:`ConfigurationError` line); built
    directly, a bad value is pydantic's ``ValidationError``."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, validate_default=True)


Config = TypeVar("Config", bound=ConfigModel)


def changed(config: Config, **updates: Any) -> Config:
    """``config`` with ``updates``, checked (pydantic's ``model_copy(update=...)`` checks nothing)."""
    return type(config).model_validate({**dict(config), **updates})


def ui_of(info: FieldInfo) -> Ui | None:
    """The :class:`Ui` marker of a field, if it has one."""
    return next((item for item in info.metadata if isinstance(item, Ui)), None)


@dataclass(frozen=True)
class OfferedField:
    """One field as a front end offers it: a field of the model, or a nested model's field offered by
    its parent (``retry.timeout``)."""

    path: tuple[str, ...]
    """``("concurrency",)``, or ``("retry", "timeout")`` for a nested field."""
    info: FieldInfo
    """The (innermost) field's pydantic description: annotation, default, bounds."""
    ui: Ui
    """Its flag and widget."""

    @property
    def name(self) -> str:
        """The name in an error line: the widget key, else the field's (or key's) own name."""
        return self.ui.key or self.path[-1]

    @property
    def dest(self) -> str:
        """The argparse destination: the flag without dashes (``--judge-timeout`` -> ``judge_timeout``)."""
        return self.ui.dest or (self.ui.flag or self.path[-1]).lstrip("-").replace("-", "_")

    @property
    def help(self) -> str | None:
        return self.ui.help if self.ui.help is not None else self.info.description

    @property
    def default(self) -> Any:
        return self.info.get_default(call_default_factory=True)

    def adapter(self) -> TypeAdapter[Any]:
        return _adapter(self.info)

    def check(self, value: Any) -> Any:
        """``value`` as the field holds it, or :class:`ConfigurationError` with :func:`field_error`'s line."""
        try:
            return self.adapter().validate_python(value)
        except ValidationError:
            raise ConfigurationError(field_error(self, value)) from None


_ADAPTERS: dict[int, TypeAdapter[Any]] = {}


def _adapter(info: FieldInfo) -> TypeAdapter[Any]:
    adapter = _ADAPTERS.get(id(info))
    if adapter is None:
        constraints = [item for item in info.metadata if not isinstance(item, Ui)]
        annotated: Any = typing.Annotated[(info.annotation, *constraints)] if constraints else info.annotation
        # a leaf field (never a model): the model's own rule on NaN and infinity
        adapter = _ADAPTERS[id(info)] = TypeAdapter(annotated, config=ConfigDict(allow_inf_nan=False))
    return adapter


def offered_fields(model: type[ConfigModel], names: tuple[str, ...] | None = None) -> Iterator[OfferedField]:
    """The fields of ``model`` that have a :class:`Ui`, in declaration order, each followed by the
    nested fields or keys it offers (a parent that only nests, ``retry``, is not offered itself);
    ``names``: only these top-level fields."""
    for name, info in model.model_fields.items():
        ui = ui_of(info)
        if ui is None or (names is not None and name not in names):
            continue
        if ui.flag or ui.widget:
            yield OfferedField((name,), info, ui)
        inner = nested_fields(info) if ui.nested else {}
        for sub, sub_ui in ui.nested.items():
            yield OfferedField((name, sub), inner[sub], sub_ui)


def offered_field(model: type[ConfigModel], *path: str) -> OfferedField:
    """The offered field of ``model`` at ``path`` (``"retry", "timeout"``): its flag, bounds and error line."""
    return next(offered for offered in offered_fields(model) if offered.path == path)


def nested_fields(info: FieldInfo) -> dict[str, FieldInfo]:
    """The fields of the model a nested field holds (``RetryPolicy`` of ``RetryPolicy | None``), or the
    typed keys of the ``TypedDict`` it holds (``ModelOptions``)."""
    for member in _members(info.annotation):
        if isinstance(member, type) and issubclass(member, ConfigModel):
            return dict(member.model_fields)
        if typing_extensions.is_typeddict(member):
            return {key: FieldInfo.from_annotation(hint)
                    for key, hint in typing.get_type_hints(member, include_extras=True).items()}
    raise TypeError(f"{info.annotation!r} holds no model or typed dict to offer fields of")


def nested_value(value: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` in a configuration (``("options", "max_reply_bytes")``: a key of a dict,
    ``None`` when it is absent)."""
    for part in path:
        if value is None:
            return None
        value = value.get(part) if isinstance(value, Mapping) else getattr(value, part)
    return value


def _members(annotation: Any) -> list[Any]:
    """The members of a union (``int | Literal["auto"] | None`` -> int, Literal, NoneType), Annotated unwrapped."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _members(arg)]
    return [annotation]


def _constraints(info: FieldInfo) -> list[Any]:
    found = list(info.metadata)
    stack = [info.annotation]
    while stack:
        annotation = stack.pop()
        if typing.get_origin(annotation) is typing.Annotated:
            base, *extra = typing.get_args(annotation)
            for item in extra:
                found += list(item.metadata) if isinstance(item, FieldInfo) else [item]
            stack.append(base)
        elif typing.get_origin(annotation) in (Union, types.UnionType):
            stack += list(typing.get_args(annotation))
    return found


def literal_choices(info: FieldInfo) -> tuple[Any, ...]:
    """The values of the field's ``Literal[...]`` members."""
    return tuple(value for member in _members(info.annotation) if typing.get_origin(member) is Literal
                 for value in typing.get_args(member))


def number_kind(info: FieldInfo) -> type | None:
    """``int`` or ``float`` for a number field (bool is not a number), else ``None``."""
    members = _members(info.annotation)
    return int if int in members else float if float in members else None


def number_requirement(*, whole: bool, low: float, low_open: bool = False, high: float | None = None,
                       unit: str = "") -> str:
    """The words for a number's range: ``a finite number > 0 (seconds for the whole request)``,
    ``at least 1``, ``a finite number >= 0 and <= 2`` (the wording of every number's error line)."""
    kind = "a whole number" if whole else "a finite number"
    bound = f"{'>' if low_open else '>='} {low:g}"
    if whole and not low_open and high is None:
        text = f"at least {low:g}"
    elif high is None:
        text = f"{kind} {bound}"
    else:  # a whole bound in full (1073741824), not as 1.07374e+09
        shown = f"{high}" if isinstance(high, int) else f"{high:g}"
        text = f"{kind} {bound} and <= {shown}"
    return text + (f" ({unit})" if unit else "")


def requirement(offered: OfferedField) -> str:
    """What the field takes, in words."""
    info = offered.info
    choices = literal_choices(info)
    kind = number_kind(info)
    if kind is not None:
        low, low_open, high = -math.inf, False, None
        for item in _constraints(info):
            # the tables' bounds are numbers, kept as given (a whole bound prints whole); annotated_types
            # types them as any comparable
            if isinstance(item, annotated_types.Gt):
                low, low_open = typing.cast(float, item.gt), True
            elif isinstance(item, annotated_types.Ge):
                low = typing.cast(float, item.ge)
            elif isinstance(item, annotated_types.Le):
                high = typing.cast(float, item.le)
        text = number_requirement(whole=kind is int, low=low, low_open=low_open, high=high, unit=offered.ui.unit)
        return text + "".join(f" or {c!r}" for c in choices)
    if choices:
        return "one of " + ", ".join(str(c) for c in choices)
    if bool in _members(info.annotation):
        return "true or false"
    return "a non-empty text"


def shown(value: Any) -> str:
    """A value as an error line quotes it: numbers as numbers (``nan``, ``0.5``), the rest as repr."""
    return f"{value:g}" if isinstance(value, float) else repr(value)


def field_error(offered: OfferedField, value: Any) -> str:
    """The one line both front ends show for a bad value: ``judge_timeout must be a finite number > 0
    (seconds for the whole request), got nan (--judge-timeout)``."""
    where = f" ({offered.ui.flag})" if offered.ui.flag else ""
    return f"{offered.name} must be {requirement(offered)}, got {shown(value)}{where}"


def config_error(exc: ValidationError, model: type[ConfigModel]) -> ConfigurationError:
    """The :class:`ConfigurationError` line of the first error of ``exc`` (a validation of ``model``),
    in the field table's words when the field is offered."""
    error = exc.errors()[0]
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigurationError):  # a validator's own line ("unknown executor 'spark'; ...")
        return cause
    path = tuple(str(part) for part in error["loc"])
    matching = [offered for offered in offered_fields(model) if path[:len(offered.path)] == offered.path]
    if matching:  # the most specific: a dict's key offered by a flag of its own, not the dict's flag
        return ConfigurationError(field_error(max(matching, key=lambda offered: len(offered.path)),
                                              error.get("input")))
    where = ".".join(path) or model.__name__
    return ConfigurationError(f"{where}: {error['msg']}, got {shown(error.get('input'))}")


def validated(model: type[Config], data: Mapping[str, Any], **context: Any) -> Config:
    """``model`` of ``data``, a bad value one :class:`ConfigurationError` line (:func:`config_error`)."""
    try:
        return model.model_validate(data, context=context or None)
    except ValidationError as exc:
        raise config_error(exc, model) from None
