"""What every page shares: the navigation, the set-up call at the top of a page, the sidebar, the
empty-store notice, errors without tracebacks, and the environment background runs get.

Only Streamlit's public multipage API is used: ``app.py`` builds ``st.navigation`` over
:func:`app_pages` and runs the chosen page inside :func:`inside_app`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Callable, Iterator, Mapping

from persobench.app.page_cache import current_state
from persobench.app.loaders import store_problems, store_scan
from persobench.app.text import safe_message
from persobench.core import secret_environment

#: (file, title, icon, URL path) of every page, in the navigation's order; the first is the default.
PAGES = (
    ("pages/leaderboard.py", "Leaderboard", ":material/leaderboard:", "leaderboard"),
    ("pages/new_run.py", "New run", ":material/play_circle:", "new-run"),
    ("pages/explore.py", "Explore", ":material/forum:", "explore"),
    ("pages/failures.py", "Failures", ":material/error:", "failures"),
    ("pages/compare.py", "Compare", ":material/compare_arrows:", "compare"),
    ("pages/data.py", "Data", ":material/dataset:", "data"),
    ("pages/metrics.py", "Metrics", ":material/straighten:", "metrics"),
)

#: The landing page's internal path (it is served at ``/``; its public path, ``/leaderboard``, is a
#: hidden page that leads to ``/``).
LANDING_PATH = "landing"

_running = threading.local()  # each browser session's script runs in its own thread


def app_pages() -> list[Any]:
    """The ``st.Page`` objects of :data:`PAGES` (paths relative to ``app.py``), and the route of the
    landing page's own path.

    Streamlit serves the default page at ``/`` only, so ``/leaderboard`` would open "Page not found":
    a hidden page on that path sends the browser to ``/`` with the query string it came with (a
    shared link of the landing page works under either address)."""
    import streamlit as st

    skip_direct_execution_check()
    pages = [st.Page(path, title=title, icon=icon, url_path=LANDING_PATH if index == 0 else url, default=index == 0)
             for index, (path, title, icon, url) in enumerate(PAGES)]
    landing = pages[0]

    def to_landing() -> None:
        st.switch_page(landing, query_params={name: st.query_params.get_all(name) for name in st.query_params})

    pages.append(st.Page(to_landing, title=PAGES[0][1], icon=PAGES[0][2], url_path=PAGES[0][3], visibility="hidden"))
    return pages


def skip_direct_execution_check() -> None:
    """Mark Streamlit's once-per-process check "is this running outside ``streamlit run``?" as done.

    At the first element a process draws, Streamlit decides whether to print that warning by calling
    ``inspect.stack()``, which reads the source file of every frame on the script's stack: 0.1 s of
    the landing page's first render in a new server process. The app only ever runs under
    ``streamlit run`` (or its test harness), so the answer is known. Should Streamlit rename the
    flag, this sets an unused attribute and the check simply costs its 0.1 s again."""
    import streamlit.delta_generator as delta_generator

    delta_generator._use_warning_has_been_displayed = True


@contextlib.contextmanager
def inside_app() -> Iterator[None]:
    """Wrap ``page.run()`` in ``app.py``: tells :func:`page_setup` the page runs in the app's layout."""
    _running.inside = True
    try:
        yield
    finally:
        _running.inside = False


def page_setup() -> None:
    """Call first in every page: make sure the page runs inside ``app.py``'s navigation.

    Streamlit runs a script of the ``pages/`` folder on its own (without ``app.py``'s layout and
    sidebar) when a deep link (``/explore?sample=...``) is the server's very first request, because
    ``st.navigation`` has not run yet. Here the page then declares the app's navigation itself (the
    public ``st.navigation``, which turns that legacy mode off) and reruns, which goes through
    ``app.py``; query parameters are kept.
    """
    if getattr(_running, "inside", False):
        return
    import streamlit as st

    st.navigation(app_pages(), position="hidden")
    st.rerun()


def sidebar_store_summary() -> None:
    """Sidebar: which store is shown, how many runs, and any unreadable run folder."""
    import streamlit as st

    home, sig = current_state()
    runs, _ = store_scan(home, sig)  # no table yet: the page's first element goes out before pandas loads
    with st.sidebar:
        st.caption(f"Run store: `{home.replace('`', '')}` · {len(runs)} runs")
        problems = store_problems(home, sig)
        if problems:
            with st.expander(f"{len(problems)} unreadable run folder(s)"):
                for path, reason in problems:
                    st.text(f"{path}: {reason}")


def empty_store_notice(*, unscored: bool = False) -> None:
    """What to do when the store has no runs yet (``unscored``: runs, but none scored)."""
    import streamlit as st

    if unscored:
        st.info("The store has runs but none is scored yet. Score them with "
                "`python -m persobench score --profile offline` (packaged models, no network), then reload.")
        return
    st.info(
        "No runs in the store yet. Prepare the offline demo with `python -m persobench demo` "
        "(or `make run`), launch one from **New run**, or import the paper's published replies on the "
        "**Data** page (`python -m persobench import-persobench DIR`), then score them with "
        "`python -m persobench score --profile offline`."
    )


def load_or_stop(loader: Callable[..., Any], *args: Any) -> Any:
    """Call a data loader; on failure show a redacted, escaped error and stop the page (no traceback)."""
    try:
        return loader(*args)
    except Exception as exc:  # noqa: BLE001 - any broken table must not take the page down
        import streamlit as st

        st.error("Could not load the results: " + safe_message(exc))
        st.caption("Fix or delete the run folder named above (see also the sidebar), then reload.")
        st.stop()


def app_environment(secrets: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The environment background runs get: the app's environment plus credentials from Streamlit
    secrets (keys only ever travel through environments, never to disk)."""
    if secrets is None:
        try:
            import streamlit as st

            secrets = st.secrets
        except Exception:  # noqa: BLE001 - outside a Streamlit app
            secrets = None
    return {**os.environ, **secret_environment(secrets)}
