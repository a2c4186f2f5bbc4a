"""Every view a link: a page keeps its state in the URL's query string, and a URL opened in a fresh
browser shows the same view.

The one pattern every page follows (Explore's, made general): before a control is drawn,
:func:`seed` puts the value it shall show into ``st.session_state[key]``: the value the session
already holds when it is still one of the options, else the URL's, else the page's default (so the
control is created without ``index``/``default``, and a value that no longer fits, such as another
dataset's model, falls back instead of raising). After the controls, :func:`publish` writes the page's
state into the query string (only when it changed). The URL is read only when the session has no
value yet: at the first render of a shared link, or when a control keyed on another one (the models
of a dataset) first appears. Widget keys stay what they were; the query string uses short names.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence
from urllib.parse import urlencode

#: A query-string value: one string, several (a multiselect: the name repeated), or None (left out).
Param = "str | list[str] | None"


def _text(value: Any) -> str:
    return str(value)


def seed(key: str, param: str, options: Sequence[Any], default: Any, *,
         to_text: Callable[[Any], str] = _text) -> Any:
    """Before ``st.selectbox``/``st.radio``/``st.tabs`` with ``key``: the value it shall show, put in
    the session (the session's when still an option, else the URL's ``param`` matched through
    ``to_text``, else ``default``). Returns that value."""
    import streamlit as st

    options = list(options)
    if key in st.session_state and st.session_state[key] in options:
        return st.session_state[key]
    wanted = st.query_params.get(param)
    by_text = {to_text(option): option for option in options}
    value = by_text[wanted] if wanted in by_text else default
    st.session_state[key] = value
    return value


def seed_many(key: str, param: str, options: Sequence[Any], default: Sequence[Any], *,
              to_text: Callable[[Any], str] = _text) -> list[Any]:
    """:func:`seed` for a multiselect: the session's selection (the options it still names), else the
    URL's (``param`` repeated; one empty value = nothing selected), else ``default``."""
    import streamlit as st

    options = list(options)
    current = st.session_state.get(key)
    if isinstance(current, list) and (not current or set(current) & set(options)):
        value = [v for v in current if v in options]
    else:
        wanted = st.query_params.get_all(param)
        by_text = {to_text(option): option for option in options}
        picked = [by_text[text] for text in wanted if text in by_text]
        value = picked if picked or wanted == [""] else list(default)
    st.session_state[key] = value
    return value


def seed_flag(key: str, param: str, default: bool = False) -> bool:
    """:func:`seed` for a toggle or checkbox (``1`` / ``0`` in the URL)."""
    import streamlit as st

    if isinstance(st.session_state.get(key), bool):
        return bool(st.session_state[key])
    wanted = st.query_params.get(param)
    value = {"1": True, "0": False}.get(str(wanted), default)
    st.session_state[key] = value
    return value


def seed_text(key: str, param: str, default: str = "") -> str:
    """:func:`seed` for a text input."""
    import streamlit as st

    if isinstance(st.session_state.get(key), str):
        return str(st.session_state[key])
    value = str(st.query_params.get(param) or default)
    st.session_state[key] = value
    return value


def flag(value: bool) -> str:
    """A toggle's value in the URL."""
    return "1" if value else "0"


def many(values: Sequence[Any], everything: Sequence[Any], *, to_text: Callable[[Any], str] = _text) -> "list[str] | None":
    """A multiselect's value in the URL: left out when it holds every option (the default), one empty
    value when it holds none."""
    if set(values) == set(everything):
        return None
    return [to_text(v) for v in values] or [""]


def query(params: Mapping[str, Any]) -> dict[str, "str | list[str]"]:
    """``params`` without the ones left out (None), as ``st.query_params`` holds them."""
    return {name: value for name, value in params.items() if value is not None}


def publish(params: Mapping[str, Any]) -> None:
    """After the page's controls: its state in the query string, the page's parameters only (those of
    another page, or of a link that brought the user here, are dropped). Writes only on a change."""
    import streamlit as st

    wanted = query(params)
    current = {name: (st.query_params.get_all(name) if len(st.query_params.get_all(name)) > 1
                      else st.query_params.get(name)) for name in st.query_params}
    if current != wanted:
        st.query_params.from_dict(wanted)


def share_url(params: Mapping[str, Any]) -> str:
    """The address of this view: the page's URL in the user's browser (``st.context.url``) with the
    page's state as its query string."""
    import streamlit as st

    base = st.context.url or ""
    text = urlencode(query(params), doseq=True)
    return f"{base}?{text}" if text else base


def copy_link(params: Mapping[str, Any], *, where: Any = None) -> None:
    """A "Copy link" popover holding this view's address (the code box's copy button copies it)."""
    import streamlit as st

    with (where or st).popover("Copy link", icon=":material/link:",
                               help="The address of exactly this view: open it in any browser to see the same."):
        st.caption("Anyone who can reach this app opens the same view with it:")
        st.code(share_url(params), language=None, wrap_lines=True)
