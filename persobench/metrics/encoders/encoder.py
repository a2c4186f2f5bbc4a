"""Text embeddings for BERTScore and persona similarity: each distinct text embedded once, the same
numbers whatever batch it is in, and kept on disk in the run store.

Why batches have a fixed shape: on a CPU, a transformer's output for a text changes in the last bits
(~1e-6) with the other texts of its batch and the padding they bring. With every forward pass
shaped ``BATCH_ROWS`` rows x a multiple of ``LENGTH_STEP`` tokens (empty rows fill the last batch),
a text's embedding depends on the text alone (checked in ``tests/test_metrics_encoder.py``). So an
embedding can be cached by the text's hash and reused by every run that contains the text (the
sixteen runs of a dataset share their references and persona sentences), and a score computed
from cached embeddings is bit-for-bit the score computed without the cache.

What is computed, per backend:

- ``tokens``: BERTScore's token embeddings (bert_score's model cut at its layer, its tokenization
  ``sent_encode``), L2-normalised per token, with bert_score's weights (0 for [CLS]/[SEP], else 1).
  Greedy matching is then done pair by pair (:func:`greedy_match`, bert_score's ``greedy_cos_idf``
  for one pair, without padding).
- ``sentence``: the sentence-transformers embedding (the model's own modules: pooling, normalising).

When the BERTScore model is the first layers of the sentence model (the offline profile: both are
all-MiniLM-L6-v2) and a text tokenizes the same for both, one forward pass gives both embeddings (a
hook reads the BERTScore layer's output), after a check on probe texts that the shared pass gives
exactly what the two separate passes give.

On disk (``<store>/embeddings/<backend key>/``): shards of three ``.npy`` files (keys, offsets,
vectors), each written to a temporary folder and renamed into place, so a crash leaves either a
whole shard or none. The backend key hashes the model id and weights hash, the layer, the
tokenization, the batch shape and the torch / transformers versions; ``backend.json`` says what it is.
Sentence vectors are kept for every text; token embeddings only for references (a reply's tokens are
~90 KB and used once, while a reference serves every model of its dataset).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from persobench.core.gc_pace import give_back_memory
from persobench.metrics.backends import BackendUnavailable, Profile, model_identity, package_version
from persobench.metrics.encoders.embedding_shelf import EmbeddingShelf, backend_key, text_key
import contextlib
from persobench.metrics.encoders.embedding_models import load_bertscorer
from persobench.metrics.encoders.embedding_models import load_embedding
from persobench.metrics.encoders.encoder_streams import forward_streams, run_in_streams

if TYPE_CHECKING:  # pragma: no cover - numpy loads with the first embedding (the CLI's start-up skips it)
    import numpy as np

BATCH_ROWS = 32
LENGTH_STEP = 8
ENCODER_VERSION = f"encoder/1 fixed-shape batches {BATCH_ROWS} x multiple of {LENGTH_STEP} tokens"
PROBE_TEXTS = ("I have two dogs and a cat.", "What do you like to do on weekends?",
               "My favourite band is playing in town next month, so I bought tickets for the whole family.")


# --- Fixed-shape forward passes -----------------------------------------------------------------


def precision_context(profile: Profile) -> Any:
    """``torch.autocast`` to bfloat16 when the profile asks for it, else a no-op context."""

    if profile.precision == "float32":
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type=profile.device.split(":")[0], dtype=getattr(torch, profile.precision))


def padded_length(n_tokens: int) -> int:
    return max(LENGTH_STEP, -(-n_tokens // LENGTH_STEP) * LENGTH_STEP)


def fixed_batches(lengths: dict[Any, int]) -> Iterator[tuple[int, list[Any]]]:
    """``(padded length, up to BATCH_ROWS ids)``: ids grouped by padded length (shortest first)."""
    groups: dict[int, list[Any]] = {}
    for ident, n in lengths.items():
        groups.setdefault(padded_length(n), []).append(ident)
    for length in sorted(groups):
        members = groups[length]
        for start in range(0, len(members), BATCH_ROWS):
            yield length, members[start:start + BATCH_ROWS]


def normalise_rows(matrix: np.ndarray) -> np.ndarray:
    """Each row divided by its L2 norm (float32)."""
    import numpy as np

    matrix = np.asarray(matrix, dtype=np.float32)
    return matrix / np.sqrt(np.einsum("ij,ij->i", matrix, matrix))[:, None]


def greedy_match(cand: np.ndarray, cand_w: np.ndarray, ref: np.ndarray, ref_w: np.ndarray) -> tuple[float, float, float]:
    """bert_score's ``greedy_cos_idf`` for one (candidate, reference) pair of normalised token
    embeddings with their weights: precision, recall, F1 (0 for an empty side, as bert_score).
    numpy, not torch: on pairs this small torch's per-call threading costs more than the maths."""
    import numpy as np

    sim = cand @ ref.T
    p = float(np.dot(sim.max(axis=1), cand_w / cand_w.sum(dtype=np.float32)))
    r = float(np.dot(sim.max(axis=0), ref_w / ref_w.sum(dtype=np.float32)))
    f = 2 * p * r / (p + r) if p + r else float("nan")
    if len(cand_w) == 2 or len(ref_w) == 2:  # only [CLS] [SEP]: bert_score sets P and R to 0
        p = r = 0.0
    if f != f:
        f = 0.0
    return p, r, f


@dataclass
class EncoderStats:
    """What the encoder did (for tests and benchmarks)."""

    embedded: dict[str, int] = field(default_factory=lambda: {"tokens": 0, "sentence": 0})
    """Texts run through a model, per kind."""
    from_disk: dict[str, int] = field(default_factory=lambda: {"tokens": 0, "sentence": 0})
    """Texts read from the on-disk cache, per kind."""
    shared_passes: int = 0
    """Texts whose two kinds came from one forward pass."""
    forward_batches: int = 0


class TextEncoder:
    """Embeds texts for one profile's ``bertscore`` and ``embedding`` slots; see the module doc.

    ``prepare`` embeds (or loads) everything a batch of work needs in one pass; ``bertscore`` and
    ``sentence_similarities`` then answer from memory (embedding what was not prepared).
    ``release`` forgets the in-memory arrays (the disk cache stays)."""

    def __init__(self, profile: Profile, cache_root: Path | None = None) -> None:
        self.profile = profile
        self.cache_root = Path(cache_root) if cache_root is not None else None
        self.stats = EncoderStats()
        self._lock = threading.RLock()
        self._shelves: dict[str, EmbeddingShelf] = {}
        self._memory: dict[str, dict[bytes, tuple[np.ndarray, np.ndarray]]] = {"tokens": {}, "sentence": {}}
        self._pairs: dict[tuple[bytes, bytes], tuple[float, float, float]] = {}
        self._share: bool | None = None

    # -- models ---------------------------------------------------------------------------------
    def bert_model(self) -> Any:

        return load_bertscorer(self.profile.spec("bertscore"), self.profile.device)

    def sentence_model(self) -> Any:

        return load_embedding(self.profile.spec("embedding"), self.profile.device)

    def _description(self, kind: str) -> dict[str, Any]:
        import torch
        import transformers

        slot = "bertscore" if kind == "tokens" else "embedding"
        spec = self.profile.spec(slot)
        model_id, revision = model_identity(spec)
        if spec.source == "hub":
            revision = "hub"  # the loaded revision is recorded in provenance; the id keys the cache
        about: dict[str, Any] = {"kind": kind, "model_id": model_id, "revision_or_hash": revision,
                                 "options": dict(spec.options), "encoder": ENCODER_VERSION,
                                 "torch": torch.__version__, "transformers": transformers.__version__,
                                 "device": self.profile.device}
        if self.profile.precision != "float32":  # float32 keys stay as they were: caches stay valid
            about["precision"] = self.profile.precision
        if kind == "tokens":
            about["tokenization"] = f"bert_score.utils.sent_encode (bert-score=={package_version('bert-score')})"
            about["vectors"] = "token embeddings, L2-normalised; weights 0 for [CLS]/[SEP], else 1"
        else:
            about["tokenization"] = f"sentence-transformers=={package_version('sentence-transformers')}"
            about["vectors"] = "sentence embedding of the model's own modules"
        return about

    def shelf(self, kind: str) -> EmbeddingShelf:
        with self._lock:
            if kind not in self._shelves:
                about = self._description(kind)
                folder = self.cache_root / backend_key(about) if self.cache_root is not None else None
                self._shelves[kind] = EmbeddingShelf(folder, about)
            return self._shelves[kind]

    # -- the passes -----------------------------------------------------------------------------
    def _token_ids(self, texts: Iterable[str]) -> dict[str, list[int]]:
        from bert_score.utils import sent_encode

        tokenizer = self.bert_model().scorer._tokenizer
        return {t: list(sent_encode(tokenizer, t)) for t in texts}

    def _sentence_features(self, model: Any, texts: list[str], length: int) -> dict[str, Any]:
        import torch

        features = model.tokenize(texts)
        pad_id = getattr(model.tokenizer, "pad_token_id", 0) or 0
        fixed: dict[str, Any] = {}
        for name, value in features.items():
            if torch.is_tensor(value) and value.dim() == 2 and value.shape[0] == len(texts):
                full = torch.full((BATCH_ROWS, length), pad_id if name == "input_ids" else 0, dtype=value.dtype)
                full[:len(texts), :value.shape[1]] = value
                fixed[name] = full
            else:
                fixed[name] = value
        return fixed

    def _sentence_lengths(self, model: Any, texts: list[str]) -> dict[str, list[int]]:
        ids: dict[str, list[int]] = {}
        for start in range(0, len(texts), 512):
            chunk = texts[start:start + 512]
            features = model.tokenize(chunk)
            mask = features["attention_mask"]
            for i, text in enumerate(chunk):
                ids[text] = features["input_ids"][i, :int(mask[i].sum())].tolist()
        return ids

    def _bert_layers(self, model: Any) -> Any:
        auto = model[0].auto_model
        encoder = getattr(auto, "encoder", None)
        return getattr(encoder, "layer", None)

    def _shared_run(self, model: Any, features: dict[str, Any]) -> tuple[Any, Any]:
        """One pass of the sentence model: (token states at BERTScore's layer, sentence embeddings).
        The layer's output is read by a hook into a list of this thread's own, so that passes
        running at once in several streams (:func:`forward_streams`) each get their own."""
        import torch

        layers = self._bert_layers(model)
        captured: list[Any] = []

        def hook(_module: Any, _inputs: Any, output: Any) -> None:
            if threading.get_ident() == caller:
                captured.append(output[0] if isinstance(output, tuple) else output)

        caller = threading.get_ident()
        handle = layers[self.bert_model().num_layers - 1].register_forward_hook(hook)
        try:
            with torch.inference_mode(), precision_context(self.profile):
                out = model(features)
        finally:
            handle.remove()
        return captured[-1].float(), out["sentence_embedding"].float()

    def _shared_forward(self, model: Any, texts: list[str], length: int) -> tuple[Any, Any]:
        return self._shared_run(model, self._sentence_features(model, texts, length))

    def _sentence_run(self, model: Any, features: dict[str, Any]) -> Any:
        import torch

        with torch.inference_mode(), precision_context(self.profile):
            return model(features)["sentence_embedding"].float()

    def _sentence_forward(self, model: Any, texts: list[str], length: int) -> Any:
        return self._sentence_run(model, self._sentence_features(model, texts, length))

    def _token_inputs(self, ids: list[list[int]], length: int) -> tuple[Any, Any]:
        import torch

        pad_id = self.bert_model().scorer._tokenizer.pad_token_id or 0
        x = torch.full((BATCH_ROWS, length), pad_id, dtype=torch.long)
        mask = torch.zeros((BATCH_ROWS, length), dtype=torch.long)
        for row, seq in enumerate(ids):
            x[row, :len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[row, :len(seq)] = 1
        return x, mask

    def _token_run(self, inputs: tuple[Any, Any]) -> Any:
        import torch

        x, mask = inputs
        with torch.inference_mode(), precision_context(self.profile):
            return self.bert_model().scorer._model(x, attention_mask=mask)[0].float()

    def _token_forward(self, ids: list[list[int]], length: int) -> Any:
        return self._token_run(self._token_inputs(ids, length))

    def _token_entry(self, states: Any, row: int, seq: list[int]) -> tuple[np.ndarray, np.ndarray]:
        import numpy as np

        tokenizer = self.bert_model().scorer._tokenizer
        specials = {tokenizer.sep_token_id, tokenizer.cls_token_id}
        vectors = normalise_rows(states[row, :len(seq)].numpy())
        weights = np.array([0.0 if t in specials else 1.0 for t in seq], dtype=np.float32)
        return vectors, weights

    def can_share(self) -> bool:
        """Whether one pass of the sentence model also gives BERTScore's embeddings (checked once)."""
        if self._share is None:
            self._share = self._check_sharing()
        return self._share

    def _check_sharing(self) -> bool:
        import torch

        bert, sent = self.profile.spec("bertscore"), self.profile.spec("embedding")
        if not (bert.available and sent.available and bert.model_id == sent.model_id):
            return False
        try:
            model = self.sentence_model()
            layers = self._bert_layers(model)
            loaded = self.bert_model()
            if layers is None or loaded.num_layers > len(layers):
                return False
            texts = list(PROBE_TEXTS)
            token_ids = self._token_ids(texts)
            if token_ids != self._sentence_lengths(model, texts):
                return False
            length = padded_length(max(len(v) for v in token_ids.values()))
            states, sentences = self._shared_forward(model, texts, length)
            alone_states = self._token_forward([token_ids[t] for t in texts], length)
            alone_sentences = self._sentence_forward(model, texts, length)
            n = len(texts)
            return bool(torch.equal(states[:n], alone_states[:n]) and torch.equal(sentences[:n], alone_sentences[:n]))
        except BackendUnavailable:
            return False

    # -- preparing ------------------------------------------------------------------------------
    def _lookup(self, kind: str, texts: Iterable[str], persist: bool) -> list[str]:
        """Texts of ``kind`` neither in memory nor on disk (those found on disk are loaded)."""
        memory = self._memory[kind]
        missing: list[str] = []
        shelf = self.shelf(kind) if persist and self.cache_root is not None else None
        for text in dict.fromkeys(texts):
            key = text_key(text)
            if key in memory:
                continue
            found = shelf.get(key) if shelf is not None else None
            if found is not None:
                memory[key] = found
                self.stats.from_disk[kind] += 1
            else:
                missing.append(text)
        return missing

    def prepare(self, pairs: Sequence[tuple[str, str]] = (), sentences: Sequence[str] = (),
                progress: Callable[[int, int], None] | None = None) -> None:
        """Embed what ``pairs`` ((candidate, reference) for BERTScore) and ``sentences`` need, and
        match the pairs; candidates' token embeddings are dropped once their pairs are matched."""
        with self._lock:
            self._prepare(pairs, sentences, progress)

    def _prepare(self, pairs: Sequence[tuple[str, str]], sentences: Sequence[str],
                 progress: Callable[[int, int], None] | None) -> None:
        for shelf in self._shelves.values():  # shards another encoder wrote since (the next dataset's)
            shelf.refresh()
        pairs = [(c, r) for c, r in dict.fromkeys(pairs) if (text_key(c), text_key(r)) not in self._pairs]
        references = list(dict.fromkeys(r for _, r in pairs))
        candidates = list(dict.fromkeys(c for c, _ in pairs))
        need_refs = self._lookup("tokens", references, persist=True) if pairs else []
        need_sent = self._lookup("sentence", sentences, persist=True) if sentences else []
        memory_tokens = self._memory["tokens"]
        need_cands = [c for c in candidates if text_key(c) not in memory_tokens]
        total = len(set(need_refs) | set(need_sent) | set(need_cands))
        done = [0]

        def advance(k: int) -> None:
            done[0] += k
            if progress is not None:
                progress(min(done[0], total), total)

        if progress is not None:
            progress(0, total)
        # References first (their tokens must be there when a candidate's pairs are matched).
        sent_set = set(need_sent)
        ref_set = set(need_refs)
        self._embed(need_refs, sentence_too=[t for t in need_refs if t in sent_set], persist_tokens=True,
                    advance=advance)
        by_candidate: dict[str, list[str]] = {}
        for c, r in pairs:
            by_candidate.setdefault(c, []).append(r)
        rest = [c for c in need_cands if c not in ref_set]
        self._embed(rest, sentence_too=[t for t in rest if t in sent_set], persist_tokens=False,
                    advance=advance, matched=by_candidate)
        handled = ref_set | set(rest)
        self._embed_sentences([t for t in need_sent if t not in handled], advance)
        for c, refs in by_candidate.items():  # candidates whose tokens were already in memory
            for r in refs:
                if (text_key(c), text_key(r)) not in self._pairs:
                    self._match(c, r)
        for shelf in self._shelves.values():
            shelf.flush()
            shelf.drop_resident()  # what this pass read from disk is in memory now, as copies

    def _match(self, candidate: str, reference: str) -> None:
        ck, rk = text_key(candidate), text_key(reference)
        cand, ref = self._memory["tokens"][ck], self._memory["tokens"][rk]
        self._pairs[(ck, rk)] = greedy_match(cand[0], cand[1], ref[0], ref[1])

    def _embed(self, texts: list[str], *, sentence_too: list[str], persist_tokens: bool,
               advance: Callable[[int], None], matched: dict[str, list[str]] | None = None) -> None:
        """Token embeddings of ``texts`` (and sentence embeddings of ``sentence_too`` among them,
        from the same pass when the models allow); ``matched``: candidate -> its references, matched
        as soon as the candidate is embedded (then its tokens are dropped unless persisted)."""
        if not texts:
            return
        token_ids = self._token_ids(texts)
        both = set(sentence_too)
        shared_ids: dict[str, list[int]] = {}
        if both and self.can_share():
            model = self.sentence_model()
            sentence_ids = self._sentence_lengths(model, list(both))
            shared_ids = {t: token_ids[t] for t in both if sentence_ids[t] == token_ids[t]}
        tokens_shelf = self.shelf("tokens") if self.cache_root is not None else None
        memory = self._memory["tokens"]

        def keep_tokens(text: str, entry: tuple[np.ndarray, np.ndarray]) -> None:
            key = text_key(text)
            memory[key] = entry
            self.stats.embedded["tokens"] += 1
            if persist_tokens and self.cache_root is not None:
                tokens_shelf.put(key, *entry)  # type: ignore[union-attr]
            if matched is not None and text in matched:
                for r in matched[text]:
                    self._match(text, r)
                if not persist_tokens:
                    del memory[key]

        if shared_ids:
            model = self.sentence_model()
            passes = self._passes(fixed_batches({t: len(v) for t, v in shared_ids.items()}),
                                  lambda length, chunk: self._sentence_features(model, chunk, length),
                                  lambda features: self._shared_run(model, features))
            for _length, chunk, (states, sentences) in passes:
                self.stats.forward_batches += 1
                for row, text in enumerate(chunk):
                    keep_tokens(text, self._token_entry(states, row, shared_ids[text]))
                    self._keep_sentence(text, sentences[row])
                self.stats.shared_passes += len(chunk)
                advance(len(chunk))
        alone = [t for t in texts if t not in shared_ids]
        passes = self._passes(fixed_batches({t: len(token_ids[t]) for t in alone}),
                              lambda length, chunk: self._token_inputs([token_ids[t] for t in chunk], length),
                              self._token_run)
        for _length, chunk, states in passes:
            self.stats.forward_batches += 1
            for row, text in enumerate(chunk):
                keep_tokens(text, self._token_entry(states, row, token_ids[text]))
            advance(len(chunk))
        self._embed_sentences([t for t in sentence_too if t not in shared_ids], advance, count=False)

    def _passes(self, batches: Iterable[tuple[int, list[Any]]], inputs: Callable[[int, list[Any]], Any],
                run: Callable[[Any], Any]) -> Iterator[tuple[int, list[Any], Any]]:
        """``(length, chunk, run(inputs(length, chunk)))`` for each batch, in order, with up to
        :func:`forward_streams` passes running at once; ``inputs`` runs in this thread (a tokenizer
        is not safe to share between threads), ``run`` in the streams."""
        streams = forward_streams(self.profile.device)
        if streams == 1:
            for length, chunk in batches:
                yield length, chunk, run(inputs(length, chunk))
            return
        yield from run_in_streams(batches, inputs, run, streams)

    def _keep_sentence(self, text: str, vector: Any) -> None:
        import numpy as np

        key = text_key(text)
        entry = (np.array(vector.numpy(), dtype=np.float32).reshape(1, -1), np.ones(1, dtype=np.float32))
        self._memory["sentence"][key] = entry
        if self.cache_root is not None:
            self.shelf("sentence").put(key, *entry)
        self.stats.embedded["sentence"] += 1

    def _embed_sentences(self, texts: list[str], advance: Callable[[int], None], count: bool = True) -> None:
        if not texts:
            return
        model = self.sentence_model()
        ids = self._sentence_lengths(model, texts)
        passes = self._passes(fixed_batches({t: len(ids[t]) for t in texts}),
                              lambda length, chunk: self._sentence_features(model, chunk, length),
                              lambda features: self._sentence_run(model, features))
        for _length, chunk, vectors in passes:
            self.stats.forward_batches += 1
            for row, text in enumerate(chunk):
                self._keep_sentence(text, vectors[row])
            if count:
                advance(len(chunk))

    # -- answers --------------------------------------------------------------------------------
    def bertscore(self, candidates: Sequence[str], references: Sequence[str]) -> tuple[list[float], list[float], list[float]]:
        """(precision, recall, F1) of each (candidates[i], references[i])."""
        pairs = list(zip(candidates, references))
        with self._lock:
            self._prepare(pairs, (), None)
            values = [self._pairs[(text_key(c), text_key(r))] for c, r in pairs]
        return [v[0] for v in values], [v[1] for v in values], [v[2] for v in values]

    def sentence_vectors(self, texts: Sequence[str]) -> list[np.ndarray]:
        with self._lock:
            self._prepare((), texts, None)
            memory = self._memory["sentence"]
            return [memory[text_key(t)][0][0] for t in texts]

    def sentence_similarities(self, left: Sequence[str], right: Sequence[str]) -> list[float]:
        """Cosine similarity of each (left[i], right[i]) (the vectors are normalised)."""
        import numpy as np

        with self._lock:
            self._prepare((), list(left) + list(right), None)
            memory = self._memory["sentence"]
            return [float(np.dot(memory[text_key(a)][0][0], memory[text_key(b)][0][0]))
                    for a, b in zip(left, right)]

    def release(self) -> None:
        """Forget the in-memory embeddings and matched pairs (what is on disk stays)."""
        with self._lock:
            for shelf in self._shelves.values():
                shelf.flush()
            held = any(self._memory.values()) or bool(self._pairs)
            self._memory = {"tokens": {}, "sentence": {}}
            self._pairs.clear()
        # A pass releases an encoder between datasets: their peaks do not stack. Only when it held
        # embeddings: a full collection per run of a lexical pass cost more than its kernels.
        if held:
            give_back_memory()


@dataclass(frozen=True)
class EmbeddingRequest:
    """The texts a family will embed for a batch, so the scorer can embed them all in one pass."""

    pairs: tuple[tuple[str, str], ...] = ()
    """(candidate, reference) pairs for BERTScore."""
    sentences: tuple[str, ...] = ()
    """Texts that need a sentence embedding."""


def merged_request(requests: Iterable["EmbeddingRequest | None"]) -> EmbeddingRequest:
    """Several requests as one (None entries skipped), each pair and text once, in first-seen order."""
    pairs: dict[tuple[str, str], None] = {}
    sentences: dict[str, None] = {}
    for request in requests:
        if request is not None:
            pairs.update(dict.fromkeys(request.pairs))
            sentences.update(dict.fromkeys(request.sentences))
    return EmbeddingRequest(tuple(pairs), tuple(sentences))


def store_cache_root(home: Path) -> Path:
    """Where a run store keeps embeddings: ``<home>/embeddings``."""
    return Path(home) / "embeddings"
