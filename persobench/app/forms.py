"""A launch form generated from a configuration's field table (:mod:`persobench.config.fields`): one
widget per field that has one, its key ``<prefix>_<Ui.key>`` (a public interface), each value checked
by its field and a bad one said under its widget in the line the CLI prints for the same value."""

from __future__ import annotations

from typing import Any

from persobench.app.text import md_escape
from persobench.config import ConfigModel, OfferedField, offered_fields, text_value
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


def config_form(model: type[ConfigModel], prefix: str, widths: dict[str, float] | None = None) -> \
        tuple[dict[str, Any], dict[str, str]]:
    """The widgets of ``model``'s offered fields (checkboxes under a row of the others), each bad value
    in red under its widget; (:func:`form_values`' fields, errors by key)."""
    import streamlit as st

    table = [offered for offered in offered_fields(model) if offered.ui.widget and offered.ui.key]
    row = [offered for offered in table if offered.ui.widget != "checkbox"]
    columns = st.columns([(widths or {}).get(offered.ui.key or "", 1) for offered in row]) if row else []
    places = {offered.ui.key: column for offered, column in zip(row, columns)}
    shown: dict[str, Any] = {}
    for offered in table:
        ui = offered.ui
        key = f"{prefix}_{ui.key}"
        place = places.get(ui.key, st)
        initial = ui.initial if ui.initial is not None else offered.default
        if ui.widget == "text":
            shown[ui.key] = place.text_input(ui.label, value=initial or "", key=key, help=ui.widget_help,
                                             placeholder=ui.placeholder)
        elif ui.widget == "select":
            shown[ui.key] = place.selectbox(ui.label, list(ui.options), key=key, help=ui.widget_help)
        elif ui.widget == "number":
            shown[ui.key] = place.number_input(ui.label, value=float(initial or 0.0), step=ui.step, key=key,
                                               help=ui.widget_help)
        else:
            shown[ui.key] = place.checkbox(ui.label, value=bool(initial), key=key, help=ui.widget_help)
    values, errors = form_values(model, shown)
    for key, line in errors.items():
        places.get(key, st).error(md_escape(line))
    return values, errors
