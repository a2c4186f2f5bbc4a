"""Every view a link: a page keeps its state in the URL's query string, and a URL opened in a fresh
browser shows the same view.

The one pattern every page follows (Explore's, made general): before a control is drawn,
:func:`seed` puts the value it shall show into ``st.session_state[key]``: the value the session
already holds when it is still one of the options, else the URL's, else the page's default (so the
control is created without ``index``/``default``, and a value that no longer fits, such as another
dataset's model, falls back instead of raising). After the controls, :func:`publish` writes the page's
state into the query string (only when it changed). The URL is read only when it says something
new: when it is not the query string the session itself last wrote (a shared link opened in a fresh
browser, a link from another page, a step back in the browser's history); then it wins over what the
session holds. Otherwise a control keeps the session's value, and a control that first appears (keyed
on another one, as the models of a dataset) starts at its default, not at the URL's value of another
view. Widget keys stay what they were; the query string uses short names.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence
from urllib.parse import urlencode

#: Where a session keeps the query string it last wrote (:func:`publish`): a URL that differs from it
#: came from outside (a shared link, a link from another page, the browser's history) and is read.
PUBLISHED_KEY = "_persobench_published_query"


def _text(value: Any) -> str:
    return str(value)


def seed(key: str, param: str, options: Sequence[Any], default: Any, *,
         to_text: Callable[[Any], str] = _text) -> Any:
    """Before ``st.selectbox``/``st.radio``/``st.tabs`` with ``key``: the value it shall show, put in
    the session (the session's when still an option, else the URL's ``param`` matched through
    ``to_text``, else ``default``). Returns that value."""
    import streamlit as st

    options = list(options)
    by_text = {to_text(option): option for option in options}
    wanted = st.query_params.get(param) if _url_is_new() else None
    if wanted in by_text:
        value = by_text[wanted]
    elif key in st.session_state and st.session_state[key] in options:
        return st.session_state[key]
    else:
        value = default
    st.session_state[key] = value
    return value


def seed_many(key: str, param: str, options: Sequence[Any], default: Sequence[Any], *,
              to_text: Callable[[Any], str] = _text) -> list[Any]:
    """:func:`seed` for a multiselect: the session's selection (the options it still names), else the
    URL's (``param`` repeated; one empty value = nothing selected), else ``default``."""
    import streamlit as st

    options = list(options)
    by_text = {to_text(option): option for option in options}
    wanted = st.query_params.get_all(param) if _url_is_new() else []
    picked = [by_text[text] for text in wanted if text in by_text]
    current = st.session_state.get(key)
    if picked or wanted == [""]:
        value = picked
    elif isinstance(current, list) and (not current or set(current) & set(options)):
        value = [v for v in current if v in options]
    else:
        value = list(default)
    st.session_state[key] = value
    return value


def seed_flag(key: str, param: str, default: bool = False) -> bool:
    """:func:`seed` for a toggle or checkbox (``1`` / ``0`` in the URL)."""
    import streamlit as st

    wanted = {"1": True, "0": False}.get(str(st.query_params.get(param))) if _url_is_new() else None
    if wanted is None and isinstance(st.session_state.get(key), bool):
        return bool(st.session_state[key])
    value = default if wanted is None else wanted
    st.session_state[key] = value
    return value


def seed_text(key: str, param: str, default: str = "") -> str:
    """:func:`seed` for a text input."""
    import streamlit as st

    wanted = st.query_params.get(param) if _url_is_new() else None
    if wanted is None and isinstance(st.session_state.get(key), str):
        return str(st.session_state[key])
    value = str(default if wanted is None else wanted)
    st.session_state[key] = value
    return value


def flag(value: bool) -> str:
    """A toggle's value in the URL."""
    return "1" if value else "0"


def many(values: Sequence[Any], default: Sequence[Any], *, to_text: Callable[[Any], str] = _text) -> "list[str] | None":
    """A multiselect's value in the URL: left out when it is the control's default (what the page
    seeds it with), one empty value when it holds none."""
    if set(values) == set(default) and len(values) == len(default):
        return None
    return [to_text(v) for v in values] or [""]


def query(params: Mapping[str, Any]) -> dict[str, "str | list[str]"]:
    """``params`` without the ones left out (None), as ``st.query_params`` holds them."""
    return {name: value for name, value in params.items() if value is not None}


def _url() -> dict[str, list[str]]:
    import streamlit as st

    return {name: st.query_params.get_all(name) for name in st.query_params}


def _url_is_new() -> bool:
    """Whether the URL is not the query string this session last wrote (see the module's docstring)."""
    import streamlit as st

    return _url() != st.session_state.get(PUBLISHED_KEY)


def publish(params: Mapping[str, Any]) -> None:
    """After the page's controls: its state in the query string, the page's parameters only (those of
    another page, or of a link that brought the user here, are dropped). Writes only on a change; call
    it once per run, after every :func:`seed` (a seed after it no longer sees the URL as new)."""
    import streamlit as st

    wanted = query(params)
    written = {name: value if isinstance(value, list) else [value] for name, value in wanted.items()}
    if _url() != written:
        st.query_params.from_dict(wanted)
    st.session_state[PUBLISHED_KEY] = written


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
