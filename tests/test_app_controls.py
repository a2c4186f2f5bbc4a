"""No control of the app raises (issue 37 item 1): every select, radio, toggle and multiselect
option of every page, and every chart tab of the Leaderboard, driven through Streamlit's AppTest on
the demo store and on the store a user has after importing the paper's 58 published runs.

One option at a time from the page's first view (each widget is put back before the next one), so
a widget that only appears after another's change (a tab's own controls) is driven too when it is
on the page that change leads to: tabs are opened one by one and their controls driven there.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from streamlit.proto.WidgetStates_pb2 import WidgetState
from streamlit.testing.v1 import AppTest, element_tree

from tests.app_store import build_demo_store, shared_paper_store

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
PAGES = ["pages/leaderboard.py", "pages/new_run.py", "pages/explore.py", "pages/failures.py",
         "pages/compare.py", "pages/data.py", "pages/metrics.py"]
#: The kinds of control the issue names (AppTest's element lists).
KINDS = ("selectbox", "radio", "toggle", "checkbox", "multiselect")
#: Pickers of one row among a dataset's (a thousand dialogues): their first, middle and last option.
ROW_PICKERS = {"explore_pick"}
#: The Leaderboard's controls that change what every chart tab draws: driven again inside each tab,
#: with the tab's own controls (the rest were driven on the first view).
BOARD_KEYS = {"lb_dataset", "lb_mode", "lb_invalid", "lb_side_by_side"}
#: Tabs that track state, by key: each of their labels is opened and its own controls driven.
TABS = {"pages/leaderboard.py": ("lb_chart_tab", ("Ranking (95% CI)", "Radar", "Time, failures, engagingness",
                                                   "Distributions", "Vanilla vs CoT"))}


@pytest.fixture(scope="module")
def demo_home(tmp_path_factory):
    return build_demo_store(tmp_path_factory.mktemp("demo-controls") / "home")["home"]


@pytest.fixture(scope="module")
def paper_home(tmp_path_factory, reference_dir):
    return shared_paper_store(tmp_path_factory, reference_dir)["home"]


def _errors(at: AppTest) -> list[str]:
    return [e.message for e in at.exception]


def _widget(at: AppTest, kind: str, key: str) -> Any:
    return next((w for w in getattr(at, kind) if w.key == key), None)


def _keys(at: AppTest) -> list[tuple[str, str]]:
    return [(kind, w.key) for kind in KINDS for w in getattr(at, kind) if w.key and not w.disabled]


def _by_label(original: property) -> property:
    """AppTest's ``_widget_state`` of a selectbox, radio or multiselect, but a control given labels by
    :func:`_choose` sends those: the way the browser sets it, by the label it shows (AppTest's own
    setters format the value again, which fails for a control with a ``format_func``)."""

    def state(widget: Any) -> WidgetState:
        labels = widget.__dict__.get("_labels")
        if labels is None:
            return original.fget(widget)
        message = WidgetState()
        message.id = widget.id
        if isinstance(labels, list):
            message.string_array_value.data[:] = labels
        else:
            message.string_value = labels
        return message

    return property(state)


@pytest.fixture(autouse=True)
def controls_set_by_label(monkeypatch):
    for cls in (element_tree.Selectbox, element_tree.Radio, element_tree.Multiselect):
        monkeypatch.setattr(cls, "_widget_state", _by_label(cls._widget_state))


def _choose(widget: Any, labels: str | list[str]) -> None:
    """Set a selectbox or radio to one shown label, a multiselect to a list of them."""
    widget.__dict__["_labels"] = labels


def _shown(widget: Any, kind: str) -> Any:
    """The control's current setting as the labels it shows."""
    if kind in ("toggle", "checkbox"):
        return widget.value
    if kind == "multiselect":
        return list(widget.values)
    return widget.options[widget.index] if widget.index is not None else None


def _settings(widget: Any, kind: str, *, brief: bool = False) -> list[Any]:
    """What to set, one after the other: every option (multiselect: each option alone, then none;
    ``brief``: the first alone and none; a row picker: its first, middle and last row)."""
    if kind in ("toggle", "checkbox"):
        return [not widget.value]
    if kind == "multiselect":
        return [[option] for option in widget.options[:1 if brief else None]] + [[]]
    if widget.key in ROW_PICKERS:
        return list(dict.fromkeys(widget.options[i] for i in (0, len(widget.options) // 2, -1)))
    return list(widget.options)


def _apply(widget: Any, kind: str, setting: Any) -> None:
    if kind in ("toggle", "checkbox"):
        widget.set_value(setting)
    else:
        _choose(widget, setting)


def drive(at: AppTest, where: str, skip: set[str] = frozenset()) -> int:
    """Every option of every control on the page as it is now (but those in ``skip``, whose
    multiselects get a brief drive); returns how many were set."""
    done = 0
    for kind, key in _keys(at):
        widget = _widget(at, kind, key)
        if widget is None or (key in skip and kind != "multiselect"):  # an earlier control's change removed it
            continue
        original = _shown(widget, kind)
        for setting in _settings(widget, kind, brief=key in skip):
            widget = _widget(at, kind, key)
            if widget is None:
                break
            _apply(widget, kind, setting)
            at.run()
            done += 1
            assert not at.exception, f"{where}: {kind} {key} = {setting}: {_errors(at)}"
        widget = _widget(at, kind, key)
        if widget is not None and _shown(widget, kind) != original and original is not None:
            _apply(widget, kind, original)
            at.run()
            assert not at.exception, f"{where}: {kind} {key} put back: {_errors(at)}"
    return done


def drive_every_page(home: Path, monkeypatch) -> dict[str, int]:
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    monkeypatch.delenv("PERSOBENCH_MODELS", raising=False)
    # No dataset hub is reachable here: New run's estimate of a hub dataset says so at once.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    # The libraries read those variables when imported: imported by an earlier test of the session, they
    # tried the hub, with back-off, at every rerun of New run (65 of the 100 s each test took in the suite).
    for module, names in (("huggingface_hub.constants", ("HF_HUB_OFFLINE",)),
                          ("datasets.config", ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))):
        if module in sys.modules:
            for name in names:
                monkeypatch.setattr(sys.modules[module], name, True)
    counts = {}
    for page in PAGES:
        at = AppTest.from_file(APP, default_timeout=300).run()
        if page != PAGES[0]:
            at.switch_page(page).run()
        assert not at.exception, f"{page}: {_errors(at)}"
        first_view = {key for _, key in _keys(at)}
        counts[page] = drive(at, page)
        key, labels = TABS.get(page, (None, ()))
        for label in labels:
            at.session_state[key] = label
            at.run()
            assert not at.exception, f"{page}: tab {label}: {_errors(at)}"
            again = BOARD_KEYS | ({"lb_rank_by"} if label == labels[0] else set())  # the rank chart draws it
            counts[page] += drive(at, f"{page} tab {label}", skip=first_view - again)
    return counts


def test_every_control_of_every_page_on_the_demo_store(demo_home, monkeypatch):
    counts = drive_every_page(demo_home, monkeypatch)
    assert counts["pages/leaderboard.py"] > 20 and all(counts[p] > 0 for p in PAGES if "data" not in p), counts


def test_every_control_of_every_page_on_the_imported_paper_store(paper_home, monkeypatch):
    counts = drive_every_page(paper_home, monkeypatch)
    assert counts["pages/leaderboard.py"] > 30, counts


def test_rank_by_every_metric_puts_the_better_value_first(paper_home, monkeypatch):
    """Issue 37: Rank by failure_ratio or response_time raised "Duplicate column names"; lower-is-better
    metrics rank the lowest value first."""
    monkeypatch.setenv("PERSOBENCH_HOME", str(paper_home))
    at = AppTest.from_file(APP, default_timeout=300).run()
    rank_by = at.selectbox(key="lb_rank_by")
    assert {"failure_ratio", "response_time", "rougeL", "dist2"} <= set(rank_by.options)
    for metric in rank_by.options:
        at.selectbox(key="lb_rank_by").set_value(metric).run()
        assert not at.exception, (metric, _errors(at))
        table = next(f.value for f in at.dataframe if {"rank", "model"} <= set(f.value.columns))
        assert table.columns.is_unique
        if metric in table.columns:
            values = table[metric].dropna().tolist()
            lower_better = metric in ("failure_ratio", "response_time")
            first = min(values) if lower_better else max(values)
            assert values[0] == pytest.approx(first), (metric, values)
