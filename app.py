"""PersoBench: the leaderboard and exploration app.

Run with ``make run`` (prepares the offline demo first) or ``streamlit run app.py``.
The run store shown is ``$PERSOBENCH_HOME`` (default ``./cache``).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from persobench.app.chrome import app_pages, inside_app, sidebar_store_summary

# The icon is served by the app itself: a Material symbol as page icon makes every browser fetch it
# from fonts.gstatic.com, and the app makes no request off this machine.
st.set_page_config(page_title="PersoBench", page_icon=str(Path(__file__).parent / "persobench" / "app" / "icon.png"),
                   layout="wide")

page = st.navigation(app_pages())
sidebar_store_summary()
with inside_app():
    page.run()
