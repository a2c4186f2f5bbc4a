"""PersoBench: the leaderboard and exploration app.

Run with ``make run`` (prepares the offline demo first) or ``streamlit run app.py``.
The run store shown is ``$PERSOBENCH_HOME`` (default ``./cache``).
"""

from __future__ import annotations

import streamlit as st

from persobench.app.chrome import app_pages, inside_app, sidebar_store_summary

st.set_page_config(page_title="PersoBench", page_icon=":material/forum:", layout="wide")

page = st.navigation(app_pages())
sidebar_store_summary()
with inside_app():
    page.run()
