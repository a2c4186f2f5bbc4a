"""A launch form generated from a configuration's field table (:mod:`persobench.config.fields`): one
widget per field that has one, its key ``<prefix>_<Ui.key>`` (a public interface), each value checked
by its field and a bad one said under its widget in the line the CLI prints for the same value."""

from __future__ import annotations

from typing import Any

from persobench.app.text import md_escape
from persobench.config import ConfigModel, OfferedField, number_kind, offered_fields, text_value
from persobench.errors import ConfigurationError


def widget_value(offered: OfferedField, shown: Any) -> Any:
    """What a widget's value stands for in the field: a text's stripped text (empty: ``None`` for an
    optional field), a select's choice, a number (``0`` as ``None`` where the widget says so)."""
    widget = offered.ui.widget
    if widget == "text":
        text = str(shown or "").strip()
        return text if text or offered.info.is_required() else None
    if widget == "select":
        return text_value(offered, str(shown))
    if widget == "number":
        return None if offered.ui.zero_is_none and shown == 0 else shown
    return bool(shown)


def form_values(model: type[ConfigModel], shown: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The fields of ``model`` a form's widgets give (``shown``: widget value by :attr:`Ui.key`), and the
    error line of each bad one by its key. A nested field fills its parent only when it differs from
    the nested default (a form left alone gives what the CLI gives without the flag)."""
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for offered in offered_fields(model):
        key = offered.ui.key
        if offered.ui.widget is None or key is None or key not in shown:
            continue
        value = widget_value(offered, shown[key])
        try:
            value = offered.check(value)
        except ConfigurationError as exc:
            errors[key] = str(exc)
            continue
        if len(offered.path) == 1:
            values[offered.path[0]] = value
        elif value != offered.default:
            parent, sub = offered.path
            values[parent] = {**(values.get(parent) or {}), sub: value}
    return values, errors


def field_widget(offered: OfferedField, prefix: str, place: Any) -> Any:
    """The widget of one offered field in ``place`` (a column, or ``st``), keyed ``<prefix>_<Ui.key>``."""
    ui = offered.ui
    key = f"{prefix}_{ui.key}"
    initial = ui.initial if ui.initial is not None else offered.default
    if ui.widget == "text":
        return place.text_input(ui.label, value=initial or "", key=key, help=ui.widget_help, placeholder=ui.placeholder)
    if ui.widget == "select":
        return place.selectbox(ui.label, list(ui.options), key=key, help=ui.widget_help)
    if ui.widget == "number":
        whole = number_kind(offered.info) is int  # an int widget gives ints ("10", not "10.0")
        kind = int if whole else float
        return place.number_input(ui.label, value=kind(initial or 0), step=kind(ui.step or 1), key=key,
                                  help=ui.widget_help)
    return place.checkbox(ui.label, value=bool(initial), key=key, help=ui.widget_help)


def config_widgets(model: type[ConfigModel], prefix: str, places: dict[str, Any]) -> \
        tuple[dict[str, Any], dict[str, str]]:
    """The widgets of ``model``'s offered fields whose key ``places`` names, each in its place and each
    bad value in red under it; (:func:`form_values`' fields, errors by key)."""
    shown = {offered.ui.key: field_widget(offered, prefix, places[offered.ui.key])
             for offered in offered_fields(model) if offered.ui.widget and offered.ui.key in places}
    values, errors = form_values(model, shown)
    for key, line in errors.items():
        places[key].error(md_escape(line))
    return values, errors


def config_form(model: type[ConfigModel], prefix: str, widths: dict[str, float] | None = None) -> \
        tuple[dict[str, Any], dict[str, str]]:
    """Every offered field's widget (checkboxes under a row of the others): :func:`config_widgets`."""
    import streamlit as st

    table = [offered for offered in offered_fields(model) if offered.ui.widget and offered.ui.key]
    row = [offered.ui.key or "" for offered in table if offered.ui.widget != "checkbox"]
    columns = st.columns([(widths or {}).get(key, 1) for key in row]) if row else []
    places: dict[str, Any] = {offered.ui.key or "": st for offered in table}
    places.update(zip(row, columns))
    return config_widgets(model, prefix, places)
