"""Scoring: replies in, a long table of per-sample metric values (with provenance) out.

:func:`score_samples` scores in memory; :func:`score_run` scores a stored run's ``ok`` generations,
keeps results in the run folder and never recomputes a (sample, metric, profile) it already has.

What gets a number:

- only valid replies (a non-empty reply for the sample id; in a run, rows whose ``status`` is
  ``ok``). Invalid replies get **no** row here; aggregation decides whether they count as the
  paper's worst value or are excluded.
- reference-based metrics (BLEU, ROUGE, METEOR, BERTScore, ``ue_score``) only for samples with a
  non-empty reference; persona-based metrics (``c_score``, ``p_consistency``, ``ue_score``,
  ``persona_distance``, ``idf_overlap``, ``persona_coverage``, ``unieval_groundedness``,
  ``unieval_overall``) only for samples with at least one persona sentence.
- metrics whose model is unavailable get no rows, and their provenance says ``unavailable`` and why.

Persona sentences: all of the sample's persona sentences (every speaker), in source order; the
persona *text* joins them with one space.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from persobench.errors import MetricError
from persobench.metrics import NLI_METRICS, UNIEVAL_METRICS, metric_info, validate_metric_names
from persobench.metrics.backends import BackendUnavailable, Profile, get_profile, model_identity, package_version

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from persobench.records import Sample
    from persobench.store import Run

#: Cosine similarity (all-MiniLM-L6-v2 sentence embeddings, persona sentence vs reply) at or above
#: which a persona sentence counts as engaged when no NLI model is available. Calibrated on 965
#: persona sentences of IT-ConvAI2 and Blended Skill Talk with published replies: paired with an
#: unrelated reply, under 1% of sentences reach 0.45; pairs near 0.45 restate or build on the fact
#: ("two dogs live with me." / "I have two adorable dogs at home.").
COVERAGE_SIMILARITY_THRESHOLD = 0.45

SCORE_COLUMNS = ("sample_id", "metric", "value")
DETAIL_COLUMNS = ("sample_id", "persona_index", "speaker", "sentence", "nli_label", "similarity")
REFERENCE_METRICS = frozenset({"bleu", "rouge1", "rouge2", "rougeL", "meteor", "bertscore_p", "bertscore_r",
                               "bertscore_f1", "ue_score"})
PERSONA_METRICS = frozenset({"c_score", "p_consistency", "ue_score", "persona_distance", "idf_overlap",
                             "persona_coverage", "unieval_groundedness", "unieval_overall"})

ProgressFn = Callable[[str, int, int], None]


class ScoringError(MetricError, ValueError):
    """Inputs that cannot be scored (e.g. a run's sample ids missing from its dataset)."""


@dataclass
class ScoreResult:
    """What :func:`score_samples` returns."""

    scores: "pd.DataFrame"
    """Long table ``sample_id, metric, value`` (float), computed metrics only."""
    persona_details: "pd.DataFrame"
    """Per persona sentence: ``sample_id, persona_index, speaker, sentence, nli_label, similarity``
    (``nli_label`` None without an NLI model; ``similarity`` NaN without an embedding model)."""
    provenance: dict[str, dict[str, Any]]
    """Per requested metric: ``status`` (ok, degraded, unavailable), ``reason``, ``model_id``,
    ``revision_or_hash``, ``metric_version``, ``backend``, ``n`` (values computed)."""
    profile: str = "offline"
    """The profile key (name, plus a hash of the overrides when any)."""

    def unavailable(self) -> dict[str, str]:
        """metric -> reason, for metrics that produced no number because a model is missing."""
        return {m: p["reason"] for m, p in self.provenance.items() if p["status"] == "unavailable"}

    def wide(self) -> "pd.DataFrame":
        """One row per sample, one column per metric."""
        if self.scores.empty:
            import pandas as pd

            return pd.DataFrame(index=pd.Index([], name="sample_id"))
        return self.scores.pivot(index="sample_id", columns="metric", values="value")


@dataclass
class _Item:
    sample: "Sample"
    reply: str
    reference: str
    persona_sentences: list[tuple[str, str]]  # (speaker, sentence)

    @property
    def sid(self) -> str:
        return self.sample.id

    @property
    def persona_text(self) -> str:
        return " ".join(s for _, s in self.persona_sentences)


def applicable(metric: str, reference: str, has_persona: bool) -> bool:
    """Whether ``metric`` is defined for a sample with this reference and persona presence."""
    if metric in REFERENCE_METRICS and not reference.strip():
        return False
    if metric in PERSONA_METRICS and not has_persona:
        return False
    return True


def _prov(status: str, *, reason: str = "", model_id: str = "", revision: str = "", version: str = "",
          backend: str = "", n: int = 0) -> dict[str, Any]:
    return {"status": status, "reason": reason, "model_id": model_id, "revision_or_hash": revision,
            "metric_version": version, "backend": backend, "n": n}


class _Progress:
    def __init__(self, fn: ProgressFn | None) -> None:
        self.fn = fn

    def stage(self, name: str, total: int) -> Callable[[int], None]:
        done = [0]
        if self.fn is not None:
            self.fn(name, 0, total)

        def advance(k: int = 1) -> None:
            done[0] += k
            if self.fn is not None:
                self.fn(name, min(done[0], total), total)

        return advance


class _Scorer:
    def __init__(self, items: list[_Item], wanted: tuple[str, ...], profile: Profile, progress: _Progress) -> None:
        self.items = items
        self.wanted = wanted
        self.profile = profile
        self.progress = progress
        self.rows: list[tuple[str, str, float]] = []
        self.details: list[tuple[str, int, str, str, Any, float]] = []
        self.provenance: dict[str, dict[str, Any]] = {}
        self.persona_labels: dict[str, list[str]] | None = None
        self.nli_reason = "not requested"
        self.nli_identity: tuple[str, str, str] = ("", "", "")

    # helpers -------------------------------------------------------------------------------
    def want(self, *names: str) -> list[str]:
        return [n for n in names if n in self.wanted]

    def for_metric(self, metric: str) -> list[_Item]:
        return [it for it in self.items if applicable(metric, it.reference, bool(it.persona_sentences))]

    def add(self, sid: str, metric: str, value: float) -> None:
        self.rows.append((sid, metric, float(value)))

    def unavailable(self, metrics: Iterable[str], reason: str, model_id: str = "") -> None:
        for m in metrics:
            self.provenance[m] = _prov("unavailable", reason=reason, model_id=model_id)

    # families ------------------------------------------------------------------------------
    def lexical(self) -> None:
        from persobench.metrics import lexical

        metrics = self.want("bleu", "rouge1", "rouge2", "rougeL", "dist1", "dist2", "idf_overlap")
        if not metrics:
            return
        advance = self.progress.stage("lexical", len(self.items))
        rouge_wanted = any(m in metrics for m in ("rouge1", "rouge2", "rougeL"))
        counts = dict.fromkeys(metrics, 0)
        for it in self.items:
            has_ref = bool(it.reference.strip())
            if "bleu" in metrics and has_ref:
                self.add(it.sid, "bleu", lexical.bleu(it.reference, it.reply))
                counts["bleu"] += 1
            if rouge_wanted and has_ref:
                r1, r2, rl = lexical.rouge(it.reference, it.reply)
                for name, value in (("rouge1", r1), ("rouge2", r2), ("rougeL", rl)):
                    if name in metrics:
                        self.add(it.sid, name, value)
                        counts[name] += 1
            for n, name in ((1, "dist1"), (2, "dist2")):
                if name in metrics:
                    self.add(it.sid, name, lexical.distinct(it.reply, n))
                    counts[name] += 1
            if "idf_overlap" in metrics and it.persona_sentences:
                self.add(it.sid, "idf_overlap", lexical.idf_overlap(it.persona_text, it.reply))
                counts["idf_overlap"] += 1
            advance()
        for m in metrics:
            if m == "bleu":
                self.provenance[m] = _prov("ok", version=lexical.bleu_version(), backend="nltk", n=counts[m])
            elif m.startswith("rouge"):
                status, reason = lexical.rouge_status()
                self.provenance[m] = _prov(status, reason=reason, version=lexical.rouge_version(),
                                           backend="rouge" if status == "ok" else "rouge_score", n=counts[m])
            elif m.startswith("dist"):
                self.provenance[m] = _prov("ok", version=lexical.distinct_version(int(m[-1])), backend="python",
                                           n=counts[m])
            else:
                self.provenance[m] = _prov("ok", version=lexical.idf_overlap_version(), backend="python",
                                           n=counts[m])

    def meteor(self) -> None:
        if "meteor" not in self.wanted:
            return
        from persobench.metrics import meteor as meteor_mod

        spec = self.profile.spec("wordnet")
        wordnet, reason = meteor_mod.resolve_wordnet(spec)
        items = self.for_metric("meteor")
        advance = self.progress.stage("meteor", len(items))
        for it in items:
            self.add(it.sid, "meteor", meteor_mod.meteor(it.reference, it.reply, wordnet))
            advance()
        if wordnet is not None:
            model_id, revision = model_identity(spec)
            self.provenance["meteor"] = _prov("ok", model_id=model_id, revision=revision,
                                              version=meteor_mod.meteor_version(True), backend="nltk",
                                              n=len(items))
        else:
            self.provenance["meteor"] = _prov("degraded", reason=f"{meteor_mod.DEGRADED} ({reason})",
                                              version=meteor_mod.meteor_version(False), backend="nltk",
                                              n=len(items))

    def bertscore(self) -> None:
        metrics = self.want("bertscore_p", "bertscore_r", "bertscore_f1")
        if not metrics:
            return
        from persobench.metrics import embeddings

        spec = self.profile.spec("bertscore")
        try:
            loaded = embeddings.load_bertscorer(spec, self.profile.device)
        except BackendUnavailable as exc:
            self.unavailable(metrics, str(exc), spec.model_id or "")
            return
        items = self.for_metric("bertscore_f1")
        advance = self.progress.stage("bertscore", len(items))
        p, r, f = embeddings.bertscore(loaded, [it.reply for it in items], [it.reference for it in items])
        advance(len(items))
        values = {"bertscore_p": p, "bertscore_r": r, "bertscore_f1": f}
        model_id, revision = model_identity(spec, loaded.scorer._model)
        for m in metrics:
            for it, v in zip(items, values[m]):
                self.add(it.sid, m, v)
            self.provenance[m] = _prov("ok", model_id=model_id, revision=revision,
                                       version=embeddings.bertscore_version(loaded),
                                       backend=f"bert_score.BERTScorer on {self.profile.device}", n=len(items))

    def persona_distance(self) -> None:
        if "persona_distance" not in self.wanted:
            return
        from persobench.metrics import embeddings

        spec = self.profile.spec("word_vectors")
        try:
            vectors = embeddings.load_word_vectors(spec)
        except BackendUnavailable as exc:
            self.unavailable(["persona_distance"], str(exc), spec.model_id or "")
            return
        items = self.for_metric("persona_distance")
        advance = self.progress.stage("persona_distance", len(items))
        for it in items:
            self.add(it.sid, "persona_distance", embeddings.persona_distance(it.persona_text, it.reply, vectors))
            advance()
        model_id, revision = model_identity(spec)
        self.provenance["persona_distance"] = _prov(
            "ok", model_id=model_id, revision=revision, version=embeddings.persona_distance_version(vectors),
            backend="numpy", n=len(items))

    def nli(self) -> None:
        metrics = self.want(*NLI_METRICS)
        need_labels = "persona_coverage" in self.wanted
        if not metrics and not need_labels:
            return
        from persobench.metrics import nli as nli_mod

        spec = self.profile.spec("nli")
        try:
            model = nli_mod.load_nli(spec, self.profile.device)
        except BackendUnavailable as exc:
            self.unavailable(metrics, str(exc), spec.model_id or "")
            self.nli_reason = str(exc)
            return
        persona_items = [it for it in self.items if it.persona_sentences]
        pairs: list[tuple[str, str]] = []
        slots: list[tuple[str, _Item, int]] = []  # (kind, item, persona index)
        if metrics:
            for it in persona_items:
                pairs.append((it.persona_text, it.reply))
                slots.append(("persona", it, -1))
                if "ue_score" in metrics and it.reference.strip():
                    pairs.append((it.reference, it.reply))
                    slots.append(("reference", it, -1))
        if need_labels:
            for it in persona_items:
                for index, (_, sentence) in enumerate(it.persona_sentences):
                    pairs.append((sentence, it.reply))
                    slots.append(("sentence", it, index))
        advance = self.progress.stage("nli", len(pairs))
        predictions = model.predict(pairs, progress=advance)
        persona_label: dict[str, str] = {}
        reference_label: dict[str, str] = {}
        labels: dict[str, list[str]] = {it.sid: [""] * len(it.persona_sentences) for it in persona_items}
        for (kind, it, index), pred in zip(slots, predictions):
            if kind == "persona":
                persona_label[it.sid] = pred.label
            elif kind == "reference":
                reference_label[it.sid] = pred.label
            else:
                labels[it.sid][index] = pred.label
        model_id, revision = nli_mod.nli_identity(spec, model)
        backend = f"transformers sequence classification on {self.profile.device}"
        counts = dict.fromkeys(metrics, 0)
        for it in persona_items:
            label = persona_label.get(it.sid)
            if label is None:
                continue
            if "c_score" in metrics:
                self.add(it.sid, "c_score", nli_mod.c_score_of(label))
                counts["c_score"] += 1
            if "p_consistency" in metrics:
                self.add(it.sid, "p_consistency", nli_mod.p_consistency_of(label))
                counts["p_consistency"] += 1
            if "ue_score" in metrics and it.sid in reference_label:
                self.add(it.sid, "ue_score", nli_mod.ue_score_of(label, reference_label[it.sid]))
                counts["ue_score"] += 1
        for m in metrics:
            self.provenance[m] = _prov("ok", model_id=model_id, revision=revision, version=nli_mod.nli_version(m),
                                       backend=backend, n=counts[m])
        if need_labels:
            self.persona_labels = labels
            self.nli_identity = (model_id, revision, backend)

    def persona(self) -> None:
        """Per-persona-sentence details and ``persona_coverage``."""
        if "persona_coverage" not in self.wanted:
            return
        from persobench.metrics import embeddings, nli as nli_mod

        items = [it for it in self.items if it.persona_sentences]
        spec = self.profile.spec("embedding")
        similarities: dict[str, list[float]] = {}
        embed_reason = ""
        try:
            model = embeddings.load_embedding(spec, self.profile.device)
        except BackendUnavailable as exc:
            model, embed_reason = None, str(exc)
        if model is not None:
            left = [s for it in items for _, s in it.persona_sentences]
            right = [it.reply for it in items for _ in it.persona_sentences]
            advance = self.progress.stage("persona similarity", len(left))
            flat = embeddings.pair_similarities(model, left, right)
            advance(len(left))
            cursor = 0
            for it in items:
                similarities[it.sid] = flat[cursor:cursor + len(it.persona_sentences)]
                cursor += len(it.persona_sentences)
        labels = self.persona_labels
        for it in items:
            for index, (speaker, sentence) in enumerate(it.persona_sentences):
                label = labels[it.sid][index] if labels is not None else None
                sim = similarities[it.sid][index] if it.sid in similarities else float("nan")
                self.details.append((it.sid, index, speaker, sentence, label or None, sim))
        if labels is not None:
            for it in items:
                got = labels[it.sid]
                self.add(it.sid, "persona_coverage", sum(1 for g in got if g == "entailment") / len(got))
            model_id, revision, backend = self.nli_identity
            self.provenance["persona_coverage"] = _prov(
                "ok", model_id=model_id, revision=revision, version=nli_mod.nli_version("persona_coverage"),
                backend=f"nli-entailment; {backend}", n=len(items))
        elif model is not None:
            for it in items:
                sims = similarities[it.sid]
                self.add(it.sid, "persona_coverage",
                         sum(1 for s in sims if s >= COVERAGE_SIMILARITY_THRESHOLD) / len(sims))
            model_id, revision = model_identity(spec)
            self.provenance["persona_coverage"] = _prov(
                "ok", model_id=model_id, revision=revision,
                reason=f"no NLI model ({self.nli_reason}); embedding similarity used",
                version=(f"persona_coverage/1-embedding share of persona sentences with cosine >= "
                         f"{COVERAGE_SIMILARITY_THRESHOLD} to the reply (sentence-transformers=="
                         f"{package_version('sentence-transformers')})"),
                backend=f"embedding-similarity>={COVERAGE_SIMILARITY_THRESHOLD}", n=len(items))
        else:
            self.unavailable(["persona_coverage"], f"needs an NLI or an embedding model ({embed_reason})")

    def unieval(self) -> None:
        metrics = self.want(*UNIEVAL_METRICS)
        if not metrics:
            return
        from persobench.metrics import unieval as ue

        spec = self.profile.spec("unieval")
        try:
            model = ue.load_unieval(spec, self.profile.device)
        except BackendUnavailable as exc:
            self.unavailable(metrics, str(exc), spec.model_id or "")
            return
        dims = [d for d in ue.DIMENSIONS if f"unieval_{d}" in metrics or "unieval_overall" in metrics]
        replies = [it.reply for it in self.items]
        histories, facts = ue.histories_and_facts([it.sample for it in self.items])
        advance = self.progress.stage("unieval", ue.count_inputs(dims, replies))
        results = ue.score_dialog(model, replies, histories, facts, dims, progress=advance)
        model_id, revision = model_identity(spec, model.model)
        for m in metrics:
            values = results.get(m.removeprefix("unieval_"), [])
            n = 0
            for it, v in zip(self.items, values):
                if applicable(m, it.reference, bool(it.persona_sentences)):
                    self.add(it.sid, m, v)
                    n += 1
            self.provenance[m] = _prov("ok", model_id=model_id, revision=revision, version=ue.unieval_version(m),
                                       backend=f"transformers seq2seq on {self.profile.device}", n=n)


def _items(samples: Sequence["Sample"], replies: Mapping[str, str],
           references: Mapping[str, str] | None) -> list[_Item]:
    items: list[_Item] = []
    for sample in samples:
        reply = replies.get(sample.id)
        if reply is None or not isinstance(reply, str) or not reply.strip():
            continue
        reference = references.get(sample.id, sample.reference) if references else sample.reference
        personas = [(p.speaker, s) for p in sample.personas for s in p.sentences if str(s).strip()]
        items.append(_Item(sample, reply, str(reference or ""), personas))
    return items


def _frames(rows: list, details: list) -> tuple["pd.DataFrame", "pd.DataFrame"]:
    import pandas as pd

    scores = pd.DataFrame(rows, columns=list(SCORE_COLUMNS))
    scores["value"] = scores["value"].astype("float64")
    scores["sample_id"] = scores["sample_id"].astype(str)
    scores["metric"] = scores["metric"].astype(str)
    detail = pd.DataFrame(details, columns=list(DETAIL_COLUMNS))
    detail["persona_index"] = detail["persona_index"].astype("int64")
    detail["similarity"] = detail["similarity"].astype("float64")
    detail["nli_label"] = detail["nli_label"].astype(object)
    return scores, detail


def score_samples(
    samples: Sequence["Sample"],
    replies: Mapping[str, str],
    *,
    profile: "str | Profile" = "offline",
    metrics: Sequence[str] | None = None,
    overrides: Mapping[str, str] | None = None,
    progress: ProgressFn | None = None,
    references: Mapping[str, str] | None = None,
) -> ScoreResult:
    """Score each sample's reply (``replies``: sample id -> text; missing or blank = invalid, unscored).

    ``references`` (sample id -> text) replaces ``sample.reference`` where given (e.g. to score
    against a published reference exactly as the paper did). ``progress(stage, done, total)`` is
    called as work advances.
    """
    prof = get_profile(profile, overrides) if not isinstance(profile, Profile) else profile
    if isinstance(profile, Profile) and overrides:
        prof = get_profile(profile.name, {**profile.overrides, **overrides})
    wanted = validate_metric_names(list(metrics) if metrics is not None else None)
    scorer = _Scorer(_items(samples, replies, references), wanted, prof, _Progress(progress))
    for family in (scorer.lexical, scorer.meteor, scorer.bertscore, scorer.persona_distance, scorer.nli,
                   scorer.persona, scorer.unieval):
        family()
    scores, details = _frames(scorer.rows, scorer.details)
    provenance = {m: scorer.provenance[m] for m in wanted if m in scorer.provenance}
    if references:
        overridden = sum(1 for it in scorer.items if it.sid in references)
        for m in REFERENCE_METRICS & set(provenance):
            provenance[m]["reference"] = f"given by the caller for {overridden} sample(s)"
    return ScoreResult(scores, details, provenance, prof.key)


# --- Runs -------------------------------------------------------------------------------------------


@dataclass
class RunScoreSummary:
    """What :func:`score_run` did to one run."""

    run_id: str
    profile: str
    computed: dict[str, int] = field(default_factory=dict)
    """metric -> number of new values written."""
    cached: dict[str, int] = field(default_factory=dict)
    """metric -> number of values already stored (not recomputed)."""
    provenance: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Provenance of every requested metric (stored or new)."""
    skipped_invalid: int = 0
    """Generation rows not scored because their status is not ``ok``."""

    def unavailable(self) -> dict[str, str]:
        return {m: p.get("reason", "") for m, p in self.provenance.items() if p.get("status") == "unavailable"}


def _empty_scores() -> "pd.DataFrame":
    import pandas as pd

    return pd.DataFrame({"sample_id": pd.Series(dtype=str), "metric": pd.Series(dtype=str),
                         "value": pd.Series(dtype="float64"), "profile": pd.Series(dtype=str)})


def stored_scores(run: "Run") -> "pd.DataFrame":
    """The run's scores table (empty with the right columns when none is stored)."""
    if not run.has_table("scores"):
        return _empty_scores()
    return run.read_table("scores")


def score_run(
    run: "Run",
    samples_by_id: Mapping[str, "Sample"],
    *,
    profile: "str | Profile" = "offline",
    metrics: Sequence[str] | None = None,
    overrides: Mapping[str, str] | None = None,
    progress: ProgressFn | None = None,
    references: Mapping[str, str] | None = None,
) -> RunScoreSummary:
    """Score the ``ok`` rows of ``run``'s generations table that lack the requested scores.

    Writes ``scores`` (``sample_id, metric, value, profile``) and ``persona_details`` (the detail
    columns plus ``profile``) and records provenance in the manifest under
    ``extra["scores"][<profile key>]``. A (sample, metric, profile) already stored is never
    recomputed.
    """
    import pandas as pd

    prof = get_profile(profile, overrides) if not isinstance(profile, Profile) else profile
    wanted = validate_metric_names(list(metrics) if metrics is not None else None)
    generations = run.read_table("generations")
    if "status" not in generations.columns or "sample_id" not in generations.columns:
        raise ScoringError(f"{run.table_path('generations')}: needs sample_id and status columns")
    ok = generations[generations["status"] == "ok"]
    reply_column = "response" if "response" in ok.columns else None
    if reply_column is None:
        raise ScoringError(f"{run.table_path('generations')}: no response column")
    replies = {str(sid): ("" if text is None or (isinstance(text, float) and text != text) else str(text))
               for sid, text in zip(ok["sample_id"], ok[reply_column])}
    missing = [sid for sid in replies if sid not in samples_by_id]
    if missing:
        raise ScoringError(
            f"run {run.run_id}: {len(missing)} sample id(s) not in dataset {run.manifest.dataset!r} "
            f"(first: {', '.join(missing[:3])})")

    existing = stored_scores(run)
    mine = existing[existing["profile"] == prof.key]
    have: dict[str, set[str]] = {}
    for metric, group in mine.groupby("metric"):
        have[str(metric)] = set(group["sample_id"].astype(str))

    todo: dict[str, set[str]] = {}
    summary = RunScoreSummary(run.run_id, prof.key, skipped_invalid=int(len(generations) - len(ok)))
    for metric in wanted:
        need = set()
        for sid, reply in replies.items():
            if not reply.strip():
                continue
            sample = samples_by_id[sid]
            reference = references.get(sid, sample.reference) if references else sample.reference
            if not applicable(metric, str(reference or ""), bool(sample.persona_sentences())):
                continue
            if sid not in have.get(metric, set()):
                need.add(sid)
        summary.cached[metric] = len(have.get(metric, set()) & set(replies))
        if need:
            todo[metric] = need

    old_extra = dict(run.manifest.extra)
    scores_extra = dict(old_extra.get("scores") or {})
    entry = dict(scores_extra.get(prof.key) or {})
    stored_prov: dict[str, dict[str, Any]] = dict(entry.get("metrics") or {})

    new_prov: dict[str, dict[str, Any]] = {}
    if todo:
        ids = set().union(*todo.values())
        samples = [samples_by_id[sid] for sid in replies if sid in ids]
        result = score_samples(samples, {sid: replies[sid] for sid in ids}, profile=prof,
                               metrics=list(todo), progress=progress, references=references)
        wanted_rows = pd.Series([m in todo and s in todo[m] for s, m in
                                 zip(result.scores["sample_id"], result.scores["metric"])],
                                index=result.scores.index, dtype=bool)
        new_rows = result.scores[wanted_rows]
        new_rows = new_rows.assign(profile=prof.key)
        for metric in todo:
            summary.computed[metric] = int((new_rows["metric"] == metric).sum())
        if len(new_rows) or not run.has_table("scores"):
            merged = pd.concat([existing, new_rows], ignore_index=True) if len(existing) else new_rows
            merged = merged.drop_duplicates(subset=["sample_id", "metric", "profile"], keep="first")
            run.write_table("scores", merged.reset_index(drop=True)[["sample_id", "metric", "value", "profile"]])
        if "persona_coverage" in todo and len(result.persona_details):
            details = result.persona_details.assign(profile=prof.key)
            if run.has_table("persona_details"):
                old = run.read_table("persona_details")
                keep = ~(old["profile"].eq(prof.key) & old["sample_id"].isin(set(details["sample_id"])))
                details = pd.concat([old[keep], details], ignore_index=True)
            run.write_table("persona_details", details.reset_index(drop=True))
        new_prov = result.provenance

    for metric in wanted:
        if metric in new_prov:
            record = dict(new_prov[metric])
            previous = stored_prov.get(metric)
            if previous and previous.get("status") != "unavailable":
                record["n"] = int(previous.get("n", 0)) + int(record.get("n", 0))
                if (previous.get("model_id"), previous.get("revision_or_hash")) != (
                        record.get("model_id"), record.get("revision_or_hash")) and record["status"] != "unavailable":
                    record["mixed_with"] = {k: previous.get(k) for k in ("model_id", "revision_or_hash",
                                                                         "metric_version")}
                elif record["status"] == "unavailable":
                    record = previous  # keep what the stored numbers were made with
            stored_prov[metric] = record
    recorded_empty = False
    if not replies:
        # Nothing valid to score (every reply failed): still record which metrics this profile
        # covers, so aggregation can give the run the worst values the paper assigns instead of
        # leaving the metric out, and still marks a metric unavailable where the profile has no model.
        for metric in wanted:
            if metric in stored_prov:
                continue
            slot = metric_info(metric).needs
            spec = prof.specs.get(slot)
            if spec is not None and not spec.available:
                stored_prov[metric] = {"status": "unavailable", "reason": spec.unavailable_reason,
                                       "model_id": "", "backend": slot, "n": 0}
            else:
                # No model ran, so no model id: comparisons must not see a second "model" here.
                stored_prov[metric] = {"status": "ok", "reason": "no valid reply to score", "n": 0,
                                       "model_id": "", "backend": slot}
            recorded_empty = True
    summary.provenance = {m: stored_prov[m] for m in wanted if m in stored_prov}
    if new_prov or recorded_empty:
        entry.update({"profile": prof.describe(), "metrics": stored_prov,
                      "updated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})
        scores_extra[prof.key] = entry
        run.update(extra={"scores": scores_extra})
    return summary
