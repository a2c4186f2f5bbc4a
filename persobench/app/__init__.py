"""The Streamlit app's helpers (``app.py`` and ``pages/`` call them; pages stay thin).

* :mod:`~persobench.app.text`: untrusted text made inert for Markdown and Plotly, display formats.
* :mod:`~persobench.app.page_cache`: lazily applied Streamlit caches keyed on the store's modification state.
* :mod:`~persobench.app.loaders`: cached tables read through the run store (runs, dialogues, failures,
  datasets, imports).
* :mod:`~persobench.app.boards`: cached leaderboards, overall scores and comparisons (the numbers come
  from :mod:`persobench.aggregate`).
* :mod:`~persobench.app.dialogues`: persona sentence marks and prompts as plain text.
* :mod:`~persobench.app.chrome`: navigation, page set-up, sidebar, empty-store notice, errors.
* :mod:`~persobench.app.widgets`: reusable widgets (a sample, a background job card).
* :mod:`persobench.report.charts` (below both front ends): the Plotly figures of the pages.

Streamlit, pandas and Plotly are imported inside the functions: importing these modules is cheap.
"""
