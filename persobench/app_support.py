"""Support code for the Streamlit app (``app.py`` and ``pages/``): everything that is not a widget.

* **Safe text.** Replies, personas, contexts, raw outputs and prompts are untrusted. They are shown
  with ``st.text``/``st.code``/``st.dataframe``, or through :func:`md_escape` when they must sit inside
  Markdown (every ASCII punctuation character backslash-escaped, so no HTML, link, image, emoji or
  directive can form). :func:`plot_escape` does the same for Plotly labels, :func:`redact` strips
  credentials from any text (error messages, logs) before it is displayed or exported.
* **Cached loaders** keyed on the store's modification state (:func:`store_signature`), so a page
  rerun reuses the parsed tables until a run changes on disk.
* **Background jobs** (:class:`JobManager`): a "New run" or "Import" launched from the app runs in a
  detached process (``python -m persobench.app_support job DIR``) that writes to the run store; a
  lock file makes a second click or a page rerun a no-op while it is alive, progress is read from
  each run's ``progress.json`` and a ``cancel`` file stops it. Relaunching a cancelled or crashed job
  resumes it (the generation cache keeps every reply already received).

Streamlit is imported lazily: the job runner and the tests use this module without it.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import html
import json
import os
import re
import signal
import string
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:  # pandas is imported inside the functions that need it
    import pandas as pd

# ---------------------------------------------------------------------------------------------
# Safe text
# ---------------------------------------------------------------------------------------------

_PUNCTUATION = frozenset(string.punctuation)


def md_escape(text: Any, *, max_chars: int | None = None) -> str:
    """``text`` as inert Markdown: it renders as the same characters, never as markup.

    Every ASCII punctuation character is backslash-escaped (CommonMark allows escaping all of them),
    which defeats HTML tags and entities, links and autolinks, images, emphasis, headings, lists,
    tables, math (``$``), Streamlit's ``:color[...]`` directives and ``:emoji:`` shortcodes. Line
    breaks are kept as hard breaks; leading indentation is dropped so no code block forms.
    """
    if text is None:
        return ""
    value = str(text)
    if max_chars is not None and len(value) > max_chars:
        value = value[:max_chars] + "…"
    value = value.replace("\r\n", "\n").replace("\r", "\n")
    escaped_lines = []
    for line in value.split("\n"):
        line = line.strip()
        escaped_lines.append("".join("\\" + ch if ch in _PUNCTUATION else ch for ch in line))
    # A hard break is "two spaces + newline"; blank lines keep paragraphs apart.
    return "  \n".join(escaped_lines)


def plot_escape(text: Any) -> str:
    """A label for Plotly, which interprets a subset of HTML (``<b>``, ``<br>``, ``<a href>``)."""
    return html.escape(str(text), quote=True)


#: (pattern, keep the first group) pairs; the rest of each match becomes "[redacted]".
_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], bool], ...] = (
    (re.compile(r"\b(?:sk|rk|pk)-(?:ant-)?[A-Za-z0-9_\-]{8,}"), False),  # OpenAI / Anthropic keys
    (re.compile(r"\b(?:hf|gsk|xai|ghp|gho|github_pat)_[A-Za-z0-9_]{8,}"), False),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{20,}"), False),  # Google API keys
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-~+/=]{8,}"), True),
    (re.compile(r"(?i)((?:api[_-]?key|token|secret|password|authorization)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]{4,}"), True),
)
_SECRET_ENV = re.compile(r"(?i)(KEY|TOKEN|SECRET|PASSWORD)")


def redact(text: Any) -> str:
    """``text`` with credentials removed: values of secret-looking environment variables and
    strings shaped like API keys or bearer tokens become ``[redacted]``."""
    if text is None:
        return ""
    value = str(text)
    for name, secret in os.environ.items():
        if _SECRET_ENV.search(name) and secret and len(secret) >= 8 and secret in value:
            value = value.replace(secret, "[redacted]")
    for secret in _SECRET_VALUES:
        value = value.replace(secret, "[redacted]")
    for pattern, keep_prefix in _SECRET_PATTERNS:
        if keep_prefix:
            value = pattern.sub(lambda m: m.group(1) + "[redacted]", value)
        else:
            value = pattern.sub("[redacted]", value)
    return value


_STATUS_COLOURS = {"ok": "green", "truncated": "orange", "invalid_json": "red", "missing_field": "red",
                   "empty": "gray", "refused": "violet", "api_error": "red"}


def status_badge(status: Any) -> str:
    """Markdown for a coloured reply-status badge; unknown statuses are shown escaped, uncoloured."""
    value = str(status)
    colour = _STATUS_COLOURS.get(value)
    if colour is None:
        return md_escape(value)
    return f":{colour}-badge[{value.replace('_', ' ')}]"


def format_seconds(seconds: float | None) -> str:
    """``75`` -> ``1 min 15 s``; ``None`` -> ``?``."""
    if seconds is None or seconds != seconds:
        return "?"
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    minutes, rest = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def load_or_stop(loader: Callable[..., Any], *args: Any) -> Any:
    """Call a data loader; on failure show a redacted, escaped error and stop the page (no traceback)."""
    try:
        return loader(*args)
    except Exception as exc:  # noqa: BLE001 - any broken table must not take the page down
        import streamlit as st

        st.error("Could not load the results: " + safe_message(exc))
        st.caption("Fix or delete the run folder named above (see also the sidebar), then reload.")
        st.stop()


def safe_message(exc: BaseException | str) -> str:
    """An error for display inside Markdown (``st.error``/``st.warning``): redacted and escaped."""
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    return md_escape(redact(text), max_chars=2000)


# ---------------------------------------------------------------------------------------------
# Store state and cache keys
# ---------------------------------------------------------------------------------------------

#: Files whose changes invalidate the app's caches.
WATCHED_FILES = ("manifest.json", "generations.parquet", "scores.parquet", "persona_details.parquet")


def store_home(home: str | os.PathLike[str] | None = None) -> Path:
    """The run store folder the app shows: ``home``, ``$PERSOBENCH_HOME`` or ``./cache``."""
    from persobench.store import default_home

    return Path(home) if home is not None else default_home()


def run_signature(run_dir: Path) -> tuple[tuple[str, int, int], ...]:
    """(file, mtime_ns, size) of the files of one run that the app reads."""
    entries = []
    for name in WATCHED_FILES:
        try:
            stat = os.stat(run_dir / name)
        except OSError:
            continue
        entries.append((name, stat.st_mtime_ns, stat.st_size))
    return tuple(entries)


def store_signature(home: str | os.PathLike[str] | None = None) -> str:
    """A short digest of the store's modification state; changes whenever a run's files change.

    Costs one ``stat`` per watched file (a few milliseconds for hundreds of runs).
    """
    runs_dir = store_home(home) / "runs"
    digest = hashlib.sha1()
    try:
        entries = sorted(os.scandir(runs_dir), key=lambda e: e.name)
    except OSError:
        return "empty"
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        digest.update(entry.name.encode())
        digest.update(repr(run_signature(Path(entry.path))).encode())
    return digest.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# Cached data access for the pages
# ---------------------------------------------------------------------------------------------


def cache_data(**kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``st.cache_data`` applied on first call, so importing this module does not import Streamlit."""
    return _lazy_cache("cache_data", kwargs)


def cache_resource(**kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``st.cache_resource`` applied lazily: for large read-only frames (no copy per access)."""
    return _lazy_cache("cache_resource", kwargs)


def _lazy_cache(kind: str, kwargs: Mapping[str, Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    import functools

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        holder: dict[str, Any] = {}

        @functools.wraps(fn)
        def call(*args: Any, **kw: Any) -> Any:
            if "wrapped" not in holder:
                import streamlit as st

                holder["wrapped"] = getattr(st, kind)(**kwargs)(fn)
            return holder["wrapped"](*args, **kw)

        def clear() -> None:
            if "wrapped" in holder:
                holder["wrapped"].clear()

        call.clear = clear  # type: ignore[attr-defined]
        return call

    return decorate


def model_label(model: Mapping[str, Any]) -> str:
    label = model.get("label")
    if label:
        return str(label)
    return f"{model.get('provider', '?')}:{model.get('model', '?')}"


@cache_data(show_spinner=False, max_entries=8)
def runs_table(home: str, signature: str) -> "pd.DataFrame":  # noqa: ARG001 (signature is the cache key)
    """One row per readable run: id, dataset, mode, model, source, status, size, scored profiles."""
    import pandas as pd

    from persobench.store import RunStore

    runs, _ = RunStore(home).scan()
    rows = []
    for run in runs:
        m = run.manifest
        scores = (m.extra or {}).get("scores") or {}
        rows.append({
            "run_id": m.run_id, "dataset": m.dataset, "mode": m.mode, "model": model_label(m.model),
            "baseline": bool((m.model or {}).get("baseline")) or (m.model or {}).get("provider") == "baseline",
            "source": m.source, "status": m.status, "samples": len(m.sample_ids),
            "has_generations": run.has_table("generations"), "has_scores": run.has_table("scores"),
            "profiles": ", ".join(sorted(scores)) if isinstance(scores, Mapping) else "",
            "created_at": m.created_at, "updated_at": m.updated_at,
        })
    columns = ["run_id", "dataset", "mode", "model", "baseline", "source", "status", "samples",
               "has_generations", "has_scores", "profiles", "created_at", "updated_at"]
    return pd.DataFrame(rows, columns=columns)


@cache_data(show_spinner=False, max_entries=8)
def store_problems(home: str, signature: str) -> list[tuple[str, str]]:  # noqa: ARG001
    from persobench.store import RunStore

    _, problems = RunStore(home).scan()
    return [(str(p.path), redact(p.reason)) for p in problems]


@cache_data(show_spinner=False, max_entries=4)
def manifests(home: str, signature: str) -> dict[str, dict[str, Any]]:  # noqa: ARG001
    """run id -> manifest dict (secrets already stripped by the store)."""
    from persobench.store import RunStore

    runs, _ = RunStore(home).scan()
    return {r.run_id: r.manifest.to_dict() for r in runs}


def _read_columns(path: Path, columns: Sequence[str] | None) -> "pd.DataFrame":
    """Read the wanted columns of a Parquet table (those that exist)."""
    import pyarrow.parquet as pq

    from persobench.store import StoreError

    try:
        if columns is not None:
            names = set(pq.read_schema(path).names)
            columns = [c for c in columns if c in names]
        return pq.read_table(path, columns=columns).to_pandas()
    except FileNotFoundError as exc:
        raise StoreError(f"{path}: table not found") from exc
    except Exception as exc:  # noqa: BLE001 - pyarrow raises unrelated types for damaged files
        raise StoreError(f"{path}: unreadable or corrupt Parquet table ({type(exc).__name__})") from exc


def scores_wide(frame: "pd.DataFrame", profile: str | None = None) -> "pd.DataFrame":
    """A scores table as one row per sample id and one column per metric.

    Accepts the long layout (``sample_id, metric, value[, profile]``) and the wide one.
    """
    import pandas as pd

    if frame is None or frame.empty or "sample_id" not in frame.columns:
        return pd.DataFrame(columns=["sample_id"])
    if {"metric", "value"} <= set(frame.columns):
        long = frame
        if profile is not None and "profile" in long.columns:
            long = long[long["profile"] == profile]
        wide = long.pivot_table(index="sample_id", columns="metric", values="value", aggfunc="first")
        wide.columns.name = None
        return wide.reset_index()
    drop = [c for c in ("profile",) if c in frame.columns]
    if profile is not None and "profile" in frame.columns:
        frame = frame[frame["profile"] == profile]
    return frame.drop(columns=drop)


@cache_resource(show_spinner=False, max_entries=16)
def dataset_samples(name: str) -> dict[str, Any]:
    """sample id -> Sample for a registered dataset; ``{}`` when it cannot be loaded here."""
    from persobench.datasets import samples_by_id

    try:
        return samples_by_id(name)
    except Exception:  # noqa: BLE001 - a dataset whose source is absent still has runs to show
        return {}


@cache_data(show_spinner=False, max_entries=16)
def dataset_error(name: str) -> str:
    """Why a dataset cannot be loaded here ('' when it can)."""
    from persobench.datasets import samples_by_id

    try:
        samples_by_id(name)
    except Exception as exc:  # noqa: BLE001
        return redact(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    return ""


def natural_key(sample_id: str) -> tuple[Any, ...]:
    """Sort key that puts ``sample:2`` before ``sample:10``."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(sample_id)))


def score_profiles(manifest: Mapping[str, Any]) -> list[str]:
    scores = (manifest.get("extra") or {}).get("scores") or {}
    return sorted(scores) if isinstance(scores, Mapping) else []


REPLY_COLUMNS = ("sample_id", "status", "response", "reasoning", "raw_text", "finish_reason", "error", "prompt")


@cache_data(show_spinner="Loading dialogues…", max_entries=6)
def dialogue_data(home: str, signature: str, dataset: str, profile: str | None) -> dict[str, Any]:
    """Everything the Explore page needs for one dataset, in long tables keyed by run and sample.

    ``replies``: run_id, model, mode, sample_id, status, response, reasoning, raw_text, error ...
    ``scores``: run_id, sample_id and one column per metric (the chosen profile's).
    ``details``: the per-persona-sentence rows (run_id, sample_id, ...), when the run has them.
    ``order``: sample ids in dataset order; ``search``: sample id -> lower-cased text to search.
    """
    import pandas as pd

    runs = runs_table(home, signature)
    runs = runs[(runs["dataset"] == dataset) & runs["has_generations"]]
    replies, scores, details = [], [], []
    for run in runs.itertuples():
        run_dir = Path(home) / "runs" / run.run_id
        try:
            g = _read_columns(run_dir / "generations.parquet", list(REPLY_COLUMNS))
        except Exception:  # noqa: BLE001 - a broken table is reported on the Data page, not fatal here
            continue
        g = g.assign(run_id=run.run_id, model=run.model, mode=run.mode)
        replies.append(g)
        if (run_dir / "scores.parquet").exists():
            try:
                wide = scores_wide(_read_columns(run_dir / "scores.parquet", None), profile)
                scores.append(wide.assign(run_id=run.run_id))
            except Exception:  # noqa: BLE001
                pass
        if (run_dir / "persona_details.parquet").exists():
            try:
                d = _read_columns(run_dir / "persona_details.parquet", None)
                if profile is not None and "profile" in d.columns:
                    d = d[d["profile"] == profile]
                details.append(d.assign(run_id=run.run_id))
            except Exception:  # noqa: BLE001
                pass
    reply_frame = pd.concat(replies, ignore_index=True) if replies else pd.DataFrame(
        columns=[*REPLY_COLUMNS, "run_id", "model", "mode"])
    for column in REPLY_COLUMNS:
        if column not in reply_frame.columns:
            reply_frame[column] = None
    score_frame = pd.concat(scores, ignore_index=True) if scores else pd.DataFrame(columns=["sample_id", "run_id"])
    detail_frame = pd.concat(details, ignore_index=True) if details else pd.DataFrame(columns=["sample_id", "run_id"])
    samples = dataset_samples(dataset)
    ids = set(reply_frame["sample_id"].astype(str))
    order = sorted(ids, key=natural_key)
    text: dict[str, list[str]] = {i: [] for i in order}
    for sample_id, group in reply_frame.groupby("sample_id")["response"]:
        text[str(sample_id)].extend(str(v) for v in group.dropna())
    for sample_id in order:
        sample = samples.get(sample_id)
        if sample is not None:
            text[sample_id].extend(sample.persona_sentences())
            text[sample_id].extend(t.text for t in sample.context)
            text[sample_id].append(sample.reference)
    search = {i: " \n".join(parts).lower() for i, parts in text.items()}
    return {"replies": reply_frame, "scores": score_frame, "details": detail_frame, "order": order,
            "search": search}


#: Plain words (not emoji): data grids draw on a canvas whose font may lack symbol glyphs.
MARK_USED = "used"
MARK_CONTRADICTED = "contradicted"
MARK_NEUTRAL = "not engaged"


def _first_column(frame: "pd.DataFrame", *names: str) -> str | None:
    return next((n for n in names if n in frame.columns), None)


def coverage_threshold() -> float:
    """Similarity at or above which a persona sentence counts as engaged without an NLI model."""
    try:
        from persobench.metrics.scoring import COVERAGE_SIMILARITY_THRESHOLD

        return float(COVERAGE_SIMILARITY_THRESHOLD)
    except Exception:  # noqa: BLE001 - the scoring stage is optional for the app
        return 0.45


def persona_marks(persona: Any, marks: "pd.DataFrame") -> "pd.DataFrame":
    """A persona's sentences with how one reply treated each (used, contradicted, not engaged).

    ``marks`` holds that reply's rows of the run's ``persona_details`` table (``sentence``,
    ``speaker``, ``nli_label``, ``similarity``). With an NLI label, entailment = used and
    contradiction = contradicted; without one (offline profile), a sentence whose embedding
    similarity to the reply reaches the coverage threshold counts as used.
    """
    import pandas as pd

    frame = pd.DataFrame({"sentence": list(persona.sentences)}, columns=["sentence"])
    if marks is None or marks.empty:
        return frame
    text_col = _first_column(marks, "sentence", "persona_sentence", "text")
    if text_col is None:
        return frame
    label_col = _first_column(marks, "nli_label", "label", "nli")
    sim_col = _first_column(marks, "similarity", "embedding_similarity", "cosine")
    if "speaker" in marks.columns:
        mine = marks[marks["speaker"].astype(str) == str(persona.speaker)]
        marks = mine if not mine.empty else marks
    by_text = {str(row[text_col]): row for _, row in marks.iterrows()}
    threshold = coverage_threshold()
    mark_values, sims, labels = [], [], []
    for sentence in persona.sentences:
        row = by_text.get(sentence)
        label = row[label_col] if row is not None and label_col else None
        label = None if label is None or (isinstance(label, float) and label != label) else str(label)
        sim = row[sim_col] if row is not None and sim_col else None
        sim = None if sim is None or (isinstance(sim, float) and sim != sim) else float(sim)
        if row is None:
            mark = ""
        elif label is not None:
            mark = (MARK_CONTRADICTED if label.startswith("contradict") else
                    MARK_USED if label.startswith("entail") else MARK_NEUTRAL)
        elif sim is not None:
            mark = MARK_USED if sim >= threshold else MARK_NEUTRAL
        else:
            mark = MARK_NEUTRAL
        mark_values.append(mark)
        sims.append(sim)
        labels.append(label)
    frame["mark"] = mark_values
    if any(v is not None for v in sims):
        frame["similarity"] = sims
    if any(v is not None for v in labels):
        frame["nli"] = labels
    return frame


def profiles_in_store(home: str, signature: str) -> list[str]:
    """Score profiles recorded in any run's manifest, ``offline`` first."""
    found: set[str] = set()
    for manifest in manifests(home, signature).values():
        found.update(score_profiles(manifest))
    return sorted(found, key=lambda p: (p != "offline", p))


def _metric_records(entry: Any) -> Mapping[str, Any]:
    """The per-metric provenance of one profile entry of ``extra["scores"]`` (both layouts)."""
    if not isinstance(entry, Mapping):
        return {}
    metrics = entry.get("metrics")
    if isinstance(metrics, Mapping):
        return metrics
    return {k: v for k, v in entry.items() if isinstance(v, Mapping) and "status" in v}


@cache_data(show_spinner=False, max_entries=4)
def metric_provenance(home: str, signature: str) -> "pd.DataFrame":
    """One row per (profile, metric, backend state) across the store's runs, with the run count.

    Columns: profile, metric, status (ok, degraded, unavailable), model_id, revision, backend,
    metric_version, reason, runs.
    """
    import pandas as pd

    counts: dict[tuple[str, ...], int] = {}
    for manifest in manifests(home, signature).values():
        scores = (manifest.get("extra") or {}).get("scores") or {}
        if not isinstance(scores, Mapping):
            continue
        for profile, entry in scores.items():
            for metric, record in _metric_records(entry).items():
                if not isinstance(record, Mapping):
                    continue
                key = (str(profile), str(metric), str(record.get("status") or ""),
                       str(record.get("model_id") or ""), str(record.get("revision_or_hash") or ""),
                       str(record.get("backend") or ""), str(record.get("metric_version") or ""),
                       redact(record.get("reason") or ""))
                counts[key] = counts.get(key, 0) + 1
    columns = ["profile", "metric", "status", "model_id", "revision", "backend", "metric_version", "reason", "runs"]
    return pd.DataFrame([(*k, n) for k, n in counts.items()], columns=columns)


def unavailable_metrics(provenance: "pd.DataFrame", profile: str | None) -> dict[str, str]:
    """metric -> why it has no number under ``profile`` (unavailable in every run that tried it)."""
    if provenance.empty or profile is None:
        return {}
    mine = provenance[provenance["profile"] == profile]
    result = {}
    for metric, group in mine.groupby("metric"):
        if (group["status"] == "unavailable").all():
            reasons = [r for r in group["reason"] if r]
            result[str(metric)] = reasons[0] if reasons else "no model available for it in this profile"
    return result


@cache_data(show_spinner=False)
def profile_slots(name: str) -> "pd.DataFrame":
    """The models a profile uses per slot (``offline``, ``standard``), without loading any."""
    import pandas as pd

    try:
        from persobench.metrics import get_profile

        described = get_profile(name).describe()
    except Exception as exc:  # noqa: BLE001
        return pd.DataFrame([{"slot": "?", "model": "", "source": "", "note": redact(str(exc))}])
    rows = []
    for slot, info in (described.get("slots") or {}).items():
        rows.append({"slot": slot, "model": info.get("model_id") or "", "source": info.get("source") or "",
                     "note": redact(info.get("unavailable_reason") or "")})
    return pd.DataFrame(rows, columns=["slot", "model", "source", "note"])


FAILURE_STATUSES = ("truncated", "invalid_json", "missing_field", "empty", "refused", "api_error")


@cache_data(show_spinner="Counting reply statuses…", max_entries=4)
def status_counts(home: str, signature: str) -> "pd.DataFrame":
    """One row per run and status: run_id, dataset, mode, model, status, count."""
    import pandas as pd

    runs = runs_table(home, signature)
    parts = []
    for run in runs[runs["has_generations"]].itertuples():
        try:
            g = _read_columns(Path(home) / "runs" / run.run_id / "generations.parquet", ["status"])
        except Exception:  # noqa: BLE001 - unreadable tables are listed in the sidebar
            continue
        counts = g["status"].astype(str).value_counts()
        parts.append(pd.DataFrame({"run_id": run.run_id, "dataset": run.dataset, "mode": run.mode,
                                   "model": run.model, "status": counts.index, "count": counts.values}))
    if not parts:
        return pd.DataFrame(columns=["run_id", "dataset", "mode", "model", "status", "count"])
    return pd.concat(parts, ignore_index=True)


@cache_data(show_spinner="Loading failed replies…", max_entries=4)
def failed_replies(home: str, signature: str, run_ids: tuple[str, ...]) -> "pd.DataFrame":
    """The invalid replies of the given runs: run_id, model, mode, dataset, sample_id, status, error,
    finish_reason, raw_text, prompt (None when the run did not store it)."""
    import pandas as pd

    runs = runs_table(home, signature).set_index("run_id")
    parts = []
    for run_id in run_ids:
        if run_id not in runs.index:
            continue
        try:
            g = _read_columns(Path(home) / "runs" / run_id / "generations.parquet",
                              ["sample_id", "status", "error", "finish_reason", "raw_text", "prompt"])
        except Exception:  # noqa: BLE001
            continue
        g = g[g["status"].astype(str) != "ok"]
        if g.empty:
            continue
        info = runs.loc[run_id]
        parts.append(g.assign(run_id=run_id, model=info["model"], mode=info["mode"], dataset=info["dataset"]))
    columns = ["run_id", "model", "mode", "dataset", "sample_id", "status", "error", "finish_reason", "raw_text", "prompt"]
    if not parts:
        return pd.DataFrame(columns=columns)
    frame = pd.concat(parts, ignore_index=True)
    for column in columns:
        if column not in frame.columns:
            frame[column] = None
    return frame[columns]


def prompt_text(prompt: Any, dataset: str, sample_id: str, mode: str) -> tuple[str, str]:
    """(the prompt as plain text, a note). Uses the stored prompt; for runs that did not store one
    (imported results) it is rebuilt from the sample with the current built-in template."""
    if isinstance(prompt, str) and prompt.strip():
        try:
            messages = json.loads(prompt)
        except ValueError:
            return prompt, ""
        if isinstance(messages, list):
            return format_messages(messages), ""
        return prompt, ""
    sample = dataset_samples(dataset).get(sample_id)
    if sample is None:
        return "", "the run did not store its prompt and the dataset is not available here to rebuild it"
    try:
        from persobench.prompts import build_messages, get_template

        return (format_messages(build_messages(sample, get_template(mode))),
                f"rebuilt with the current built-in {mode} template (the run did not store its prompt)")
    except Exception as exc:  # noqa: BLE001
        return "", f"cannot rebuild the prompt: {redact(exc)}"


def format_messages(messages: Sequence[Any]) -> str:
    """Chat messages as readable plain text (role headers, then content)."""
    parts = []
    for message in messages:
        if isinstance(message, Mapping):
            parts.append(f"[{str(message.get('role', '?')).upper()}]\n{message.get('content', '')}")
        else:
            parts.append(str(message))
    return "\n\n".join(parts)


@cache_data(show_spinner="Measuring datasets…", max_entries=2)
def dataset_table() -> "pd.DataFrame":
    """Every registered dataset: name, kind, samples (when loadable here), description, note."""
    import pandas as pd

    from persobench.datasets import dataset_names, get_dataset_info

    rows = []
    for name in dataset_names():
        info = get_dataset_info(name)
        size: int | None = None
        note = ""
        if info.kind in ("hub", "file"):
            note = "loaded on demand (hub or file)"
        else:
            samples = dataset_samples(name)
            if samples:
                size = len(samples)
            else:
                note = "unavailable here: " + dataset_error(name)
        rows.append({"dataset": name, "kind": info.kind, "samples": size, "description": info.description,
                     "note": note})
    return pd.DataFrame(rows, columns=["dataset", "kind", "samples", "description", "note"])


def show_sample(sample: Any) -> None:
    """A sample as personas by speaker, context turn by turn and the reference (all plain text)."""
    import streamlit as st

    st.markdown(f"**{md_escape(sample.id)}** · responder {md_escape(sample.responder)}"
                + (" · single question" if sample.is_single_query else f" · {len(sample.context)} turns"))
    left, right = st.columns([2, 3])
    with left:
        if not sample.personas:
            st.caption("No personas.")
        for persona in sample.personas:
            st.markdown(f"*Persona of {md_escape(persona.speaker)}*")
            st.text("\n".join(f"• {s}" for s in persona.sentences))
    with right:
        for turn in sample.context:
            st.markdown(f"**{md_escape(turn.speaker)}**")
            st.text(turn.text)
        st.markdown(f"*Reference ({md_escape(sample.responder)})*")
        st.text(sample.reference)


@cache_data(show_spinner=False, ttl=10)
def import_preview(folder: str) -> tuple["pd.DataFrame", str]:
    """(what an import of ``folder`` would bring in, a problem message or '')."""
    import pandas as pd

    path = Path(folder).expanduser()
    if not path.is_dir():
        return pd.DataFrame(), f"{path}: no such folder"
    if not (path / "Prompts").is_dir():
        return pd.DataFrame(), f"{path}: no Prompts/ folder (expected the paper's layout: Prompts/, Responses/, Raw Responses/)"
    try:
        from persobench.importer import dataset_for_folder, find_response_files

        entries = find_response_files(path)
    except Exception as exc:  # noqa: BLE001
        return pd.DataFrame(), redact(str(exc))
    rows = [{"folder": e["dataset_folder"], "dataset": dataset_for_folder(e["dataset_folder"]) or "(unknown)",
             "model": e["model"], "mode": e["mode"],
             "replies from": "Raw Responses (paper policy)" if e["raw"] else "Responses (processed)"}
            for e in entries]
    if not rows:
        return pd.DataFrame(), f"{path}: no response files under Responses/ or Raw Responses/"
    return pd.DataFrame(rows), ""


#: Metrics that need no model: fast enough to score all published replies right after an import.
LEXICAL_METRICS = ("bleu", "rouge1", "rouge2", "rougeL", "dist1", "dist2", "idf_overlap")


def import_steps(folder: str, *, score: str) -> list[JobStep]:
    """Import a folder in the paper's layout, then score (``lexical``, ``offline`` or ``none``)."""
    steps = [JobStep(label="import", argv=("import-persobench", str(Path(folder).expanduser().resolve())),
                     kind="import")]
    if score == "lexical":
        steps.append(JobStep(label="score (lexical metrics)", kind="score",
                             argv=("score", "--profile", "offline", "--metrics", ",".join(LEXICAL_METRICS),
                                   "--no-progress")))
    elif score == "offline":
        steps.append(JobStep(label="score (offline profile)", kind="score",
                             argv=("score", "--profile", "offline", "--no-progress")))
    return steps


# -- leaderboard ---------------------------------------------------------------------------------


@cache_resource(show_spinner="Loading scores…", max_entries=3)
def results_frame(home: str, signature: str, profile: str) -> "pd.DataFrame":  # noqa: ARG001
    """``aggregate.load_results`` for one profile: shared, read-only (never modify the frame)."""
    from persobench.aggregate import load_results
    from persobench.store import RunStore

    return load_results(RunStore(home), profile=profile)


@cache_data(show_spinner=False, max_entries=4)
def available_profiles(home: str, signature: str) -> list[str]:  # noqa: ARG001
    from persobench.aggregate import available_profiles as _available
    from persobench.store import RunStore

    return _available(RunStore(home))


@cache_data(show_spinner="Aggregating…", max_entries=48)
def board_for(home: str, signature: str, profile: str, dataset: str, invalid: str) -> "pd.DataFrame":
    """The leaderboard of one dataset (both modes): one row per run and metric."""
    from persobench.aggregate import leaderboard

    results = results_frame(home, signature, profile)
    return leaderboard(results, dataset=dataset, invalid=invalid, profile=profile)


def overall_with_ci(home: str, signature: str, profile: str, dataset: str, invalid: str) -> "pd.DataFrame":
    """``aggregate.overall_table`` plus a bootstrap 95% CI of each overall score.

    The CI resamples the samples of the per-sample composite (the four per-sample components x100
    and the run's instructability, averaged), which has the overall score as its mean when every
    component is defined on the same samples.
    """
    return _overall_with_ci(home, signature, profile, dataset, invalid)


@cache_data(show_spinner=False, max_entries=48)
def _overall_with_ci(home: str, signature: str, profile: str, dataset: str, invalid: str) -> "pd.DataFrame":
    import numpy as np

    from persobench import stats
    from persobench.aggregate import OVERALL_COMPONENTS, overall_table
    from persobench.metrics import METRICS

    board = board_for(home, signature, profile, dataset, invalid)
    table = overall_table(board)
    for column in ("overall_ci_low", "overall_ci_high", "overall_paper_ci_low", "overall_paper_ci_high"):
        table[column] = np.nan
    if table.empty or table["overall"].isna().all():
        return table
    results = results_frame(home, signature, profile)
    rows = results[results["dataset"] == dataset]
    per_sample = list(OVERALL_COMPONENTS[:-1])
    instr = board[board["metric"] == "instructability"].set_index("run_id")["mean"]
    run_of = board.drop_duplicates(["mode", "model"]).set_index(["mode", "model"])["run_id"]
    for index, row in table.iterrows():
        if np.isnan(row["overall"]):
            continue
        run_id = run_of.get((row["mode"], row["model"]))
        mine = rows[(rows["run_id"] == run_id) & rows["metric"].isin(per_sample)]
        wide = mine.pivot_table(index="sample_id", columns="metric", values="value", aggfunc="first", dropna=False)
        status = rows[rows["run_id"] == run_id].drop_duplicates("sample_id").set_index("sample_id")["status"]
        wide = wide.reindex(index=status.index, columns=per_sample)
        bad = (status != "ok").to_numpy()
        for metric in per_sample:
            worst = METRICS[metric].worst_value
            values = wide[metric].to_numpy(dtype="float64")
            values[bad] = worst if invalid == "worst" and worst is not None else np.nan
            wide[metric] = values
        components = wide.to_numpy(dtype="float64") * 100.0
        i_value = float(instr.get(run_id, np.nan))
        composite = (components.sum(axis=1) + 100.0 * i_value) / 5.0
        composite_paper = (components.sum(axis=1) + i_value) / 5.0
        table.loc[index, ["overall_ci_low", "overall_ci_high"]] = stats.bootstrap_ci(composite)
        table.loc[index, ["overall_paper_ci_low", "overall_paper_ci_high"]] = stats.bootstrap_ci(composite_paper)
    return table


@cache_data(show_spinner=False, max_entries=32)
def sample_values(home: str, signature: str, profile: str, dataset: str, mode: str, metric: str,
                  invalid: str) -> "pd.DataFrame":
    """Per-sample values (model, sample_id, value) of one metric, with the invalid-reply policy
    applied as the leaderboard does (worst value, or left out)."""
    import numpy as np

    from persobench.metrics import METRICS

    results = results_frame(home, signature, profile)
    rows = results[(results["dataset"] == dataset) & (results["mode"] == mode) & (results["metric"] == metric)]
    values = rows["value"].to_numpy(dtype="float64", copy=True)
    if metric != "response_time":
        bad = (rows["status"] != "ok").to_numpy()
        info = METRICS.get(metric)
        worst = info.worst_value if info is not None else None
        values[bad] = worst if invalid == "worst" and worst is not None else np.nan
    frame = rows[["model", "sample_id"]].assign(value=values)
    return frame.dropna(subset=["value"]).reset_index(drop=True)


@cache_data(show_spinner="Comparing…", max_entries=32)
def comparison_table(home: str, signature: str, profile: str, run_a: str, run_b: str, invalid: str,
                     metrics: tuple[str, ...]) -> tuple["pd.DataFrame", list[tuple[str, str]]]:
    """Paired tests of two runs for each metric: (table, [(metric, why it was skipped)])."""
    import pandas as pd

    from persobench.aggregate import compare_models

    results = results_frame(home, signature, profile)
    rows, skipped = [], []
    for metric in metrics:
        try:
            c = compare_models(results, run_a, run_b, metric, invalid=invalid)
        except ValueError as exc:
            skipped.append((metric, redact(str(exc))))
            continue
        rows.append({"metric": metric, "n": c.n, "mean A": c.mean_a, "mean B": c.mean_b, "A - B": c.mean_diff,
                     "CI low": c.ci_low, "CI high": c.ci_high, "t-test p": c.t_pvalue,
                     "Wilcoxon p": c.wilcoxon_pvalue, "bootstrap p": c.bootstrap_pvalue,
                     "A wins": c.wins, "ties": c.ties, "B wins": c.losses,
                     "better": "higher" if c.higher_is_better else "lower"})
    return pd.DataFrame(rows), skipped


@cache_data(show_spinner=False, max_entries=32)
def paired_sample_values(home: str, signature: str, profile: str, run_a: str, run_b: str, metric: str,
                         invalid: str) -> "pd.DataFrame":
    """sample_id, A, B, difference (A - B) of one metric on the samples both runs share."""
    import numpy as np

    from persobench.metrics import METRICS

    results = results_frame(home, signature, profile)
    info = METRICS.get(metric)
    worst = info.worst_value if info is not None else None
    columns = {}
    for name, run_id in (("A", run_a), ("B", run_b)):
        rows = results[(results["run_id"] == run_id) & (results["metric"] == metric)]
        values = rows["value"].to_numpy(dtype="float64", copy=True)
        if metric != "response_time":
            bad = (rows["status"] != "ok").to_numpy()
            values[bad] = worst if invalid == "worst" and worst is not None else np.nan
        columns[name] = dict(zip(rows["sample_id"].astype(str), values))
    import pandas as pd

    common = [i for i in columns["A"] if i in columns["B"]]
    frame = pd.DataFrame({"sample_id": common, "A": [columns["A"][i] for i in common],
                          "B": [columns["B"][i] for i in common]})
    frame["difference"] = frame["A"] - frame["B"]
    return frame.dropna(subset=["difference"]).reset_index(drop=True)


def rank_with_ties(frame: "pd.DataFrame", value: str, low: str, high: str, *, higher_is_better: bool) -> "pd.DataFrame":
    """Rank rows by ``value`` and show ties where confidence intervals overlap.

    ``rank`` is 1 + the number of rows whose CI lies entirely on the better side of this row's CI
    (so rows that cannot be told apart share a rank, marked with "="); ``overlaps`` lists the other
    rows whose CI overlaps this one. Rows without a value are unranked.
    """
    import numpy as np

    frame = frame.copy()
    values = frame[value].to_numpy(dtype="float64")
    lows = frame[low].to_numpy(dtype="float64")
    highs = frame[high].to_numpy(dtype="float64")
    # Without a CI (a single sample, or a run-level number) a row's interval is its value.
    lows = np.where(np.isnan(lows), values, lows)
    highs = np.where(np.isnan(highs), values, highs)
    labels = frame["model"].astype(str).tolist()
    ranks: list[str] = []
    overlaps: list[str] = []
    numeric: list[float] = []
    for i in range(len(frame)):
        if np.isnan(values[i]):
            ranks.append("–")
            overlaps.append("")
            numeric.append(np.inf)
            continue
        valid = ~np.isnan(values)
        if higher_is_better:
            better = valid & (lows > highs[i])
        else:
            better = valid & (highs < lows[i])
        rank = 1 + int(better.sum())
        overlap = [labels[j] for j in range(len(frame)) if j != i and valid[j]
                   and not (lows[j] > highs[i] or highs[j] < lows[i])]
        numeric.append(rank)
        ranks.append(str(rank))
        overlaps.append(", ".join(overlap))
    counts: dict[str, int] = {}
    for r in ranks:
        counts[r] = counts.get(r, 0) + 1
    frame["rank"] = [f"{r}=" if r != "–" and counts[r] > 1 else r for r in ranks]
    frame["overlaps"] = overlaps
    frame["_rank"] = numeric
    frame["_value"] = -values if higher_is_better else values
    frame = frame.sort_values(["_rank", "_value"], na_position="last").drop(columns=["_rank", "_value"])
    return frame.reset_index(drop=True)


def cell_text(mean: float, std: float, low: float, high: float, *, digits: int = 3) -> str:
    """``mean ± std [low, high]`` for display (numbers stay numbers everywhere else)."""
    import math

    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "n/a"
    text = f"{mean:.{digits}f}"
    if std is not None and not (isinstance(std, float) and math.isnan(std)):
        text += f" ± {std:.{digits}f}"
    if low is not None and high is not None and not (math.isnan(low) or math.isnan(high)):
        text += f" [{low:.{digits}f}, {high:.{digits}f}]"
    return text


def model_kind(label: str) -> str:
    """"ceiling baseline", "floor baseline" or "model" for a model label."""
    text = str(label)
    if text.startswith("baseline:reference"):
        return "baseline (ceiling)"
    if text.startswith("baseline:"):
        return "baseline (floor)"
    return "model"


def current_home() -> str:
    """The store folder, resolved now (``$PERSOBENCH_HOME`` may differ between test sessions)."""
    return str(store_home())


def current_state() -> tuple[str, str]:
    """(home, signature): the pair every cached loader is keyed on."""
    home = current_home()
    return home, store_signature(home)


def page_setup() -> None:
    """Call first in every page: make sure the page runs inside ``app.py``'s navigation.

    Streamlit switches to its legacy multipage mode when a ``pages/`` folder sits next to the main
    script, until ``st.navigation`` has run once in the server process. A browser that opens a deep
    link (``/explore?sample=...``) as the server's very first request would otherwise get the page
    without the app's layout and sidebar; here the legacy mode is switched off and the run restarted,
    which goes through ``app.py`` (query parameters are kept).
    """
    import streamlit as st

    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # pragma: no cover - a future Streamlit without the legacy mode
        return
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


def sidebar_store_summary() -> None:
    """Sidebar: which store is shown, how many runs, and any unreadable run folder."""
    import streamlit as st

    home, sig = current_state()
    runs = runs_table(home, sig)
    with st.sidebar:
        st.caption(f"Run store: `{home.replace('`', '')}` · {len(runs)} runs")
        problems = store_problems(home, sig)
        if problems:
            with st.expander(f"{len(problems)} unreadable run folder(s)"):
                for path, reason in problems:
                    st.text(f"{path}: {reason}")


def empty_store_notice() -> None:
    """What to do when the store has no runs yet."""
    import streamlit as st

    st.info(
        "No runs in the store yet. Prepare the offline demo with `python -m persobench demo` "
        "(or `make run`), launch one from **New run**, or import the paper's published replies on the "
        "**Data** page (`python -m persobench import-persobench DIR`), then score them with "
        "`python -m persobench score --profile offline`."
    )


# ---------------------------------------------------------------------------------------------
# Background jobs: generation runs and imports launched from the app
# ---------------------------------------------------------------------------------------------

JOB_STATES = ("launching", "running", "completed", "failed", "cancelled", "interrupted")
#: A lock without a pid yet is considered alive for this long (the launcher writes it first).
LAUNCH_GRACE_S = 30.0
#: After a cancel request, the runner waits this long for the child to stop on its own.
CANCEL_GRACE_S = 20.0


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _write_json(path: Path, value: Any) -> None:
    from persobench.store import atomic_write_json

    atomic_write_json(path, value)


def pid_alive(pid: int | None, *, marker: str | None = "persobench") -> bool:
    """True when ``pid`` is a live (not zombie) process whose command line contains ``marker``
    (any command line when ``marker`` is None)."""
    if not pid or pid <= 0:
        return False
    try:  # reap it if it is our own finished child, so it does not linger as a zombie
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except OSError:  # not our child
        pass
    proc = Path(f"/proc/{pid}")
    if proc.exists():
        try:
            stat = (proc / "stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return False
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return False
        return marker is None or marker in cmdline
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class JobStep:
    """One command of a job: ``python -m persobench ARGV``.

    ``expect`` (dataset, model, mode) lets the runner and the page find the run the step writes,
    to read its ``progress.json`` and, on cancel, to drop a ``cancel`` file into it.
    """

    label: str
    argv: tuple[str, ...]
    expect: Mapping[str, str] = field(default_factory=dict)
    kind: str = "run"
    run_id: str | None = None
    """The run the step writes, when known in advance (``plan_generation`` computes it)."""

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "argv": list(self.argv), "expect": dict(self.expect), "kind": self.kind,
                "run_id": self.run_id}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "JobStep":
        return cls(str(data["label"]), tuple(data["argv"]), dict(data.get("expect") or {}),
                   str(data.get("kind") or "run"), data.get("run_id"))

    def run_dir(self, home: Path) -> Path | None:
        """The folder of the run this step writes (None until it exists)."""
        if self.run_id:
            path = Path(home) / "runs" / self.run_id
            return path if path.is_dir() else None
        return find_run_dir(home, self.expect) if self.expect else None


@dataclass
class JobStatus:
    """What the page shows about a job."""

    job_id: str
    title: str
    state: str
    steps: list[JobStep]
    step_index: int = 0
    message: str = ""
    created_at: str = ""
    finished_at: str = ""
    log_tail: str = ""
    run_ids: list[str] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.state in ("launching", "running")

    @property
    def resumable(self) -> bool:
        return self.state in ("failed", "cancelled", "interrupted")


def job_id_for(title: str, steps: Sequence[JobStep]) -> str:
    """Deterministic id: the same configuration is the same job (so it cannot run twice at once)."""
    payload = json.dumps([title, [s.to_dict() for s in steps]], sort_keys=True)
    digest = hashlib.sha256(payload.encode()).hexdigest()[:10]
    slug = re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-")[:40] or "job"
    return f"{slug}-{digest}"


def score_step_marker() -> str:
    """Placeholder in a score step's argv replaced by the ids of the runs the job wrote."""
    return "@RUNS"


class JobManager:
    """Launches, lists, cancels and resumes background jobs under ``<home>/jobs``."""

    def __init__(self, home: str | os.PathLike[str] | None = None) -> None:
        self.home = store_home(home)
        self.jobs_dir = self.home / "jobs"

    # -- paths ---------------------------------------------------------------------------------
    def job_dir(self, job_id: str) -> Path:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", job_id):
            raise ValueError(f"invalid job id {job_id!r}")
        return self.jobs_dir / job_id

    # -- launching -----------------------------------------------------------------------------
    def launch(self, title: str, steps: Sequence[JobStep], *, env: Mapping[str, str] | None = None) -> tuple[str, bool]:
        """Start the job in a detached process; ``(job_id, started)``.

        ``started`` is False when the same job is already running (a second click, a page rerun or
        another browser tab): nothing new is started. A finished, cancelled or crashed job with the
        same configuration is started again, which resumes it from the caches.
        """
        steps = list(steps)
        job_id = job_id_for(title, steps)
        wanted = {s.run_id for s in steps if s.run_id}
        for other in self.jobs():  # another job already writing one of these runs: do not race it
            if other.job_id != job_id and other.active and wanted & {s.run_id for s in other.steps if s.run_id}:
                return other.job_id, False
        folder = self.job_dir(job_id)
        folder.mkdir(parents=True, exist_ok=True)
        lock = folder / "lock"
        if not self._acquire(lock):
            return job_id, False
        try:
            (folder / "cancel").unlink(missing_ok=True)
            _write_json(folder / "job.json", {"job_id": job_id, "title": title, "steps": [s.to_dict() for s in steps],
                                              "created_at": _now(), "home": str(self.home.resolve())})
            _write_json(folder / "state.json", {"state": "launching", "step": 0, "updated_at": _now()})
            child_env = dict(os.environ if env is None else env)
            child_env["PERSOBENCH_HOME"] = str(self.home.resolve())
            child_env.setdefault("PYTHONUNBUFFERED", "1")
            # The child imports this same persobench, installed or not.
            package_root = str(Path(__file__).resolve().parents[1])
            paths = [p for p in child_env.get("PYTHONPATH", "").split(os.pathsep) if p]
            child_env["PYTHONPATH"] = os.pathsep.join([package_root, *[p for p in paths if p != package_root]])
            log = open(folder / "log.txt", "ab")
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "persobench.app_support", "job", str(folder.resolve())],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=child_env,
                    cwd=str(Path.cwd()), start_new_session=True, close_fds=True,
                )
            finally:
                log.close()
            lock.write_text(f"{proc.pid}\n")
        except BaseException:
            lock.unlink(missing_ok=True)
            raise
        return job_id, True

    def _acquire(self, lock: Path) -> bool:
        for _ in range(2):
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if self._lock_alive(lock):
                    return False
                lock.unlink(missing_ok=True)  # stale: the runner died without cleaning up
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write("")
            return True
        return False

    def _lock_alive(self, lock: Path) -> bool:
        try:
            text = lock.read_text().strip()
            age = time.time() - lock.stat().st_mtime
        except OSError:
            return False
        if not text:
            return age < LAUNCH_GRACE_S
        try:
            pid = int(text.split()[0])
        except ValueError:
            return False
        # Right after the launch the child may not have exec'd yet (its command line is still the
        # app's); later, the marker guards against a recycled pid.
        return pid_alive(pid, marker=None if age < LAUNCH_GRACE_S else "persobench.app_support")

    # -- reading -------------------------------------------------------------------------------
    def job_ids(self) -> list[str]:
        if not self.jobs_dir.exists():
            return []
        folders = [p for p in self.jobs_dir.iterdir() if (p / "job.json").exists()]
        folders.sort(key=lambda p: (p / "job.json").stat().st_mtime, reverse=True)
        return [p.name for p in folders]

    def status(self, job_id: str) -> JobStatus | None:
        folder = self.job_dir(job_id)
        spec = _read_json(folder / "job.json")
        if spec is None:
            return None
        state = _read_json(folder / "state.json") or {}
        value = str(state.get("state") or "launching")
        alive = self._lock_alive(folder / "lock")
        if value in ("launching", "running") and not alive:
            value = "interrupted"  # the process died (killed, machine restart) without finishing
        log_tail = ""
        if value in ("failed", "interrupted"):
            log_tail = tail_text(folder / "log.txt")
        return JobStatus(
            job_id=job_id, title=str(spec.get("title", job_id)), state=value,
            steps=[JobStep.from_dict(s) for s in spec.get("steps", [])],
            step_index=int(state.get("step") or 0), message=redact(state.get("message") or ""),
            created_at=str(spec.get("created_at", "")), finished_at=str(state.get("finished_at") or ""),
            log_tail=log_tail, run_ids=list(state.get("run_ids") or []),
        )

    def jobs(self) -> list[JobStatus]:
        return [s for s in (self.status(j) for j in self.job_ids()) if s is not None]

    def cancel(self, job_id: str) -> None:
        """Ask the job to stop: the runner forwards it to the run in progress (its ``cancel`` file)."""
        folder = self.job_dir(job_id)
        (folder / "cancel").write_text(_now())
        status = self.status(job_id)
        if status is not None:
            for run_dir in self._run_dirs(status):
                (run_dir / "cancel").write_text(_now())

    def resume(self, job_id: str, *, env: Mapping[str, str] | None = None) -> tuple[str, bool]:
        """Start a cancelled, failed or interrupted job again (cached replies are not requested again)."""
        spec = _read_json(self.job_dir(job_id) / "job.json")
        if spec is None:
            raise ValueError(f"no job {job_id!r}")
        return self.launch(spec["title"], [JobStep.from_dict(s) for s in spec["steps"]], env=env)

    def forget(self, job_id: str) -> None:
        """Remove a finished job's folder (its runs stay in the store)."""
        import shutil

        status = self.status(job_id)
        if status is not None and status.active:
            raise ValueError("the job is still running; cancel it first")
        shutil.rmtree(self.job_dir(job_id), ignore_errors=True)

    def _run_dirs(self, status: JobStatus) -> list[Path]:
        runs_dir = self.home / "runs"
        dirs = [runs_dir / r for r in status.run_ids if (runs_dir / r).is_dir()]
        for step in status.steps:
            found = step.run_dir(self.home)
            if found is not None and found not in dirs:
                dirs.append(found)
        return dirs

    def progress(self, status: JobStatus) -> list[dict[str, Any]]:
        """One row per run step: label, run id and the run's ``progress.json`` counts."""
        rows = []
        for index, step in enumerate(status.steps):
            row: dict[str, Any] = {"step": step.label, "kind": step.kind}
            run_dir = step.run_dir(self.home)
            if run_dir is not None:
                row["run_id"] = run_dir.name
                row.update(read_progress(run_dir))
            if index < status.step_index:
                row.setdefault("state", "done")
            elif index == status.step_index and status.active:
                row["state"] = "running"
            else:
                row.setdefault("state", "done" if status.state == "completed" else "waiting")
            rows.append(row)
        return rows


def tail_text(path: Path, *, lines: int = 30, max_bytes: int = 20000) -> str:
    """The last lines of a log file, redacted (progress-bar carriage returns collapsed)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    cleaned = [line.rsplit("\r", 1)[-1] for line in data.split("\n")]
    kept = [line for line in cleaned if line.strip()][-lines:]
    return redact("\n".join(kept))


def read_progress(run_dir: Path) -> dict[str, Any]:
    """A run's ``progress.json`` (done, failed, cached, total, eta...), or ``{}`` when absent."""
    data = _read_json(Path(run_dir) / "progress.json") or {}
    return {k: v for k, v in data.items() if isinstance(v, (int, float, str, bool)) or v is None}


def model_matches(model: Mapping[str, Any], spec: str) -> bool:
    """True when a manifest's model dict is the model named by ``spec`` ("provider:model" or label)."""
    provider, _, name = spec.partition(":")
    label = str(model.get("label") or "")
    registry_name = str(model.get("name") or model.get("registry_name") or "")
    return (
        spec in (label, registry_name)
        or (str(model.get("provider", "")) == provider and str(model.get("model", "")) == name)
    )


def find_run_dir(home: Path, expect: Mapping[str, str]) -> Path | None:
    """The most recently updated run whose manifest has this dataset, model and mode."""
    runs_dir = Path(home) / "runs"
    best: tuple[str, Path] | None = None
    try:
        entries = list(os.scandir(runs_dir))
    except OSError:
        return None
    for entry in entries:
        manifest = _read_json(Path(entry.path) / "manifest.json")
        if not manifest:
            continue
        if expect.get("dataset") and manifest.get("dataset") != expect["dataset"]:
            continue
        if expect.get("mode") and manifest.get("mode") != expect["mode"]:
            continue
        if expect.get("model") and not model_matches(manifest.get("model") or {}, expect["model"]):
            continue
        if expect.get("limit") and len(manifest.get("sample_ids") or ()) != int(expect["limit"]):
            continue
        key = str(manifest.get("updated_at") or "")
        if best is None or key > best[0]:
            best = (key, Path(entry.path))
    return best[1] if best else None


# -- planning a launch from the New run page ---------------------------------------------------

#: Models every installation can run without a key or a server.
BUILTIN_MODEL_CHOICES = ("local:smollm2", "baseline:reference", "baseline:persona-echo")

_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
#: Secret values read from Streamlit secrets; ``redact`` removes them like environment secrets.
_SECRET_VALUES: set[str] = set()


def secret_environment(secrets: Mapping[str, Any] | None) -> dict[str, str]:
    """Environment-style credentials (``OPENAI_API_KEY = "..."``) found at the top level of
    Streamlit secrets. Only names that look like key variables are taken."""
    found: dict[str, str] = {}
    if secrets is None:
        return found
    try:  # st.secrets raises on any access when no secrets file exists
        items = list(secrets.items())
    except Exception:  # noqa: BLE001 - st.secrets raises when no secrets file exists
        return found
    for name, value in items:
        if isinstance(value, str) and value and _ENV_NAME.match(str(name)) and _SECRET_ENV.search(str(name)):
            found[str(name)] = value
            if len(value) >= 8:
                _SECRET_VALUES.add(value)
    return found


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


def missing_key(spec: Any, env: Mapping[str, str] | None = None) -> str | None:
    """Name of the environment variable a model needs and ``env`` (default: the app's environment)
    lacks, else None. Only the variable's name is ever reported, never a value."""
    from persobench.providers import missing_key_env

    return missing_key_env(spec, env)


def registry_models(home: str | os.PathLike[str]) -> tuple[list[str], str]:
    """(names in the model registry file, a note: the file used or why it could not be read)."""
    from persobench.models_registry import find_registry_file, load_registry

    try:
        path = find_registry_file(home=home)
        if path is None:
            return [], "no models file (models.toml / $PERSOBENCH_MODELS)"
        return sorted(load_registry(path)), f"models from {path}"
    except Exception as exc:  # noqa: BLE001 - a broken file is reported, the page still works
        return [], redact(str(exc))


@dataclass(frozen=True)
class LaunchChoice:
    """One (dataset, model, mode) to generate."""

    dataset: str
    model: str
    mode: str
    base_url: str | None = None


def plan_launch(home: str | os.PathLike[str], choices: Sequence[LaunchChoice], *, limit: int | None,
                seed: int = 0, env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """For each choice: run id, samples, requests to send, cache hits, prompt-token and cost estimates
    and any problem (unknown model, missing key), without sending anything."""
    from persobench.generation import GenerationConfig, plan_generation
    from persobench.store import RunStore

    store = RunStore(home)
    rows = []
    for choice in choices:
        row: dict[str, Any] = {"dataset": choice.dataset, "model": choice.model, "mode": choice.mode,
                               "base_url": choice.base_url or ""}
        try:
            plan = plan_generation(
                GenerationConfig(dataset=choice.dataset, model=choice.model, mode=choice.mode,
                                 base_url=choice.base_url or None, limit=limit, seed=seed),
                store=store,
            )
        except Exception as exc:  # noqa: BLE001 - shown next to the choice, never raised
            row.update(run_id="", samples=0, requests=0, cached=0, prompt_tokens=0, max_cost_usd=None,
                       problem=redact(" ".join(str(exc).split()) or type(exc).__name__))
            rows.append(row)
            continue
        need = missing_key(plan.spec, env) if plan.n_requests else None
        row.update(
            run_id=plan.run_id, samples=len(plan.samples), requests=plan.n_requests, cached=len(plan.hits),
            prompt_tokens=plan.estimated_prompt_tokens, max_cost_usd=plan.estimated_max_cost(),
            problem=(f"set {need} in the environment of the app or in Streamlit secrets before launching"
                     if need else ""),
        )
        rows.append(row)
    return rows


def launch_steps(plans: Sequence[Mapping[str, Any]], *, limit: int | None, seed: int = 0,
                 profile: str | None = "offline") -> list[JobStep]:
    """The job for planned runs: one ``run`` step each, then one ``score`` step for them all."""
    steps = []
    for plan in plans:
        argv = ["run", "--dataset", plan["dataset"], "--model", plan["model"], "--mode", plan["mode"],
                "--seed", str(seed), "--no-progress"]
        if limit:
            argv += ["--limit", str(limit)]
        if plan.get("base_url"):
            argv += ["--base-url", plan["base_url"]]
        steps.append(JobStep(label=f"{plan['model']} · {plan['mode']} · {plan['dataset']}", argv=tuple(argv),
                             expect={"dataset": plan["dataset"], "model": plan["model"], "mode": plan["mode"]},
                             kind="run", run_id=plan.get("run_id") or None))
    if profile and steps:
        steps.append(JobStep(label=f"score ({profile} profile)", kind="score",
                             argv=("score", "--profile", profile, "--no-progress", score_step_marker())))
    return steps


# -- the runner (executed in the detached process) ---------------------------------------------


def run_job(folder: Path) -> int:
    """Execute a job's steps in order; the body of ``python -m persobench.app_support job DIR``.

    A failing run step is recorded and the next step still runs (one unreachable model does not
    stop the others); a score step scores the runs whose generation succeeded. A ``cancel`` file in
    the job folder stops the job: it is forwarded to the run in progress, which ends "cancelled".
    """
    folder = Path(folder)
    spec = _read_json(folder / "job.json")
    if spec is None:
        print(f"{folder}: no job.json", file=sys.stderr)
        return 2
    lock = folder / "lock"
    lock.write_text(f"{os.getpid()}\n")
    home = Path(spec.get("home") or store_home())
    steps = [JobStep.from_dict(s) for s in spec["steps"]]
    state: dict[str, Any] = {"state": "running", "step": 0, "pid": os.getpid(), "started_at": _now(),
                             "run_ids": [], "failures": []}

    def save(**changes: Any) -> None:
        state.update(changes, updated_at=_now())
        _write_json(folder / "state.json", state)

    def on_term(signum: int, frame: Any) -> None:  # noqa: ARG001
        (folder / "cancel").write_text(_now())

    signal.signal(signal.SIGTERM, on_term)
    save()
    outcome = "completed"
    try:
        for index, step in enumerate(steps):
            if (folder / "cancel").exists():
                outcome = "cancelled"
                break
            save(step=index, message=f"running {step.label}")
            argv = list(step.argv)
            if score_step_marker() in argv:
                position = argv.index(score_step_marker())
                argv[position:position + 1] = list(state["run_ids"])
                if not state["run_ids"]:
                    continue
            print(f"\n=== {step.label}: python -m persobench {' '.join(argv)}", flush=True)
            returncode = _run_child(argv, folder, home, step)
            if step.kind == "run":
                run_dir = step.run_dir(home)
                if returncode == 0 and run_dir is not None and run_dir.name not in state["run_ids"]:
                    state["run_ids"].append(run_dir.name)
            if (folder / "cancel").exists():
                outcome = "cancelled"
                break
            if returncode != 0:
                state["failures"].append(f"{step.label} exited with status {returncode}")
            save()
    except Exception as exc:  # recorded for the page; the traceback goes to the log
        import traceback

        traceback.print_exc()
        state["failures"].append(f"{type(exc).__name__}: {exc}")
    finally:
        if outcome == "completed" and state["failures"]:
            outcome = "failed"
        message = "; ".join(state["failures"]) if state["failures"] else ""
        if outcome == "cancelled":
            message = "cancelled by request" + (f"; {message}" if message else "")
        save(state=outcome, message=redact(message), finished_at=_now())
        lock.unlink(missing_ok=True)
    return 0 if outcome == "completed" else 1


def _run_child(argv: list[str], folder: Path, home: Path, step: JobStep) -> int:
    """Run ``python -m persobench ARGV``, forwarding a cancel request to the run it writes."""
    proc = subprocess.Popen([sys.executable, "-m", "persobench", *argv], stdin=subprocess.DEVNULL)
    cancel_sent_at: float | None = None
    while proc.poll() is None:
        time.sleep(0.3)
        if cancel_sent_at is None and (folder / "cancel").exists():
            cancel_sent_at = time.monotonic()
            run_dir = step.run_dir(home)
            if run_dir is not None:
                (run_dir / "cancel").write_text(_now())
            elif step.kind != "run":
                proc.terminate()
        if cancel_sent_at is not None and time.monotonic() - cancel_sent_at > CANCEL_GRACE_S:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    return int(proc.returncode)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 2 and args[0] == "job":
        return run_job(Path(args[1]))
    print("usage: python -m persobench.app_support job JOB_DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
