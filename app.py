"""PersoBench: the leaderboard and exploration app.

Run with ``make run`` (prepares the offline demo first) or ``streamlit run app.py``.
The run store shown is ``$PERSOBENCH_HOME`` (default ``./cache``).
"""

from __future__ import annotations

import streamlit as st

from persobench import app_support as sup

st.set_page_config(page_title="PersoBench", page_icon=":material/forum:", layout="wide")

PAGES = [
    st.Page("pages/leaderboard.py", title="Leaderboard", icon=":material/leaderboard:", default=True,
            url_path="leaderboard"),
    st.Page("pages/new_run.py", title="New run", icon=":material/play_circle:", url_path="new-run"),
    st.Page("pages/explore.py", title="Explore", icon=":material/forum:", url_path="explore"),
    st.Page("pages/failures.py", title="Failures", icon=":material/error:", url_path="failures"),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare_arrows:", url_path="compare"),
    st.Page("pages/data.py", title="Data", icon=":material/dataset:", url_path="data"),
    st.Page("pages/metrics.py", title="Metrics", icon=":material/straighten:", url_path="metrics"),
]

page = st.navigation(PAGES)
sup.sidebar_store_summary()
page.run()
