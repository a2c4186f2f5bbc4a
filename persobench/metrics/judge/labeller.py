"""NLI labels from an LLM judge: the pairs the NLI metrics need, labelled by any provider's model.

The NLI-based metrics (``c_score``, ``p_consistency``, ``ue_score`` and the NLI persona coverage) need a
label -- entailment, neutral or contradiction -- for (premise, hypothesis) pairs. The ``nli`` slot's
classifier gives them (:mod:`persobench.metrics.nli`); ``score --judge PROVIDER:MODEL`` gives them
from an LLM instead. :class:`JudgeLabeller` labels pairs (``predict(pairs)``, the classifier's
signature). A scoring pass labels through a session of its own
(:class:`~persobench.metrics.judge.judge_session.JudgeSession`: its labeller, ledger and counts, nothing
process-wide) before it computes, and the NLI family reads the session's answers where it would run
the classifier, so the metric code is the same for both.

The judge's prompt is a versioned template in the package (``judge_templates/<version>.toml``). It
asks for the label through structured output (a JSON schema whose ``label`` is an enum of the three
labels) on providers registered as enforcing one (:func:`persobench.providers.enforces_schema`), and otherwise
for one bare word.
Parsing is strict (:func:`parse_label`): any other answer is :data:`UNPARSEABLE`, counted and never
guessed; a pair whose request failed is :data:`UNANSWERED`. Neither gives a metric value.

Every judge call goes through the LLM layer generation uses too (:mod:`persobench.llm`): the
response cache (written the moment a reply arrives and before it is parsed, so a killed ``score
--judge`` resumes without paying twice and an identical rerun sends nothing), the retry loop (with
its Retry-After pause gate and the ``--judge-timeout`` deadline), ``--concurrency auto``, the usage
check (a server reporting unusable token counts is refused, never used for cost) and the spend
ledger that keeps ``--judge-max-cost`` over every process of a ``score`` invocation.
Queued requests for a run are not sent once the run is deleted (:func:`persobench.llm.session.sending_for`).

Provenance: judge-labelled scores are stored under a profile key of their own, ``<profile>+judge=
<provider>:<model>[@host:port][#options],prompt=<version>`` (:attr:`Judge.identity`), so they never share a
board with numbers of an NLI model.

Cheap to import: the providers, the cache and the asyncio machinery load when a judge is built.
"""

from __future__ import annotations

import collections
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from persobench.errors import ConfigurationError, MetricError, PersoBenchError, ScoringError
from persobench.metrics.backends import PROFILE_MARK
from persobench.metrics.judge.judge_config import (  # noqa: F401 - part of this module's interface
    JUDGE_FLAGS, JUDGE_TIMEOUT_FLAG, Judge, make_judge,
)
from persobench.metrics.judge.judge_prompt import (  # noqa: F401 - part of this module's interface
    DEFAULT_PROMPT, LABEL_SCHEMA, TEMPLATE_DIR, UNPARSEABLE, JudgeTemplate, load_template, parse_label,
    template_versions,
)
from persobench.metrics.nli_labels import LABELS, NLIPrediction
from persobench.llm.spend import SpendLedger, SpendLedgerError
from persobench.providers.base import Completion, GenerationParams
from persobench.llm.response_cache import default_cache_dir
from persobench.llm.retry import RetryPolicy
from persobench.store.run_store import default_home
from persobench.llm.response_cache import cache_key
from persobench.providers.models_registry import estimate_cost
from persobench.llm.response_cache import ReplyClaims, ResponseCache
from persobench.llm.retry import sleep_or_stop
from persobench.llm.usage import estimate_prompt_tokens
from persobench.llm.session import run_coroutine
from persobench.llm.session import FailFast, LLMSession
from persobench.providers.base import Request
from persobench.metrics.judge.judge_batch import answer_by_batch


#: A pair whose request failed (or was not sent: stop, cost cap); asked again by the next run.
UNANSWERED = "unanswered"


#: Marks a profile key whose NLI labels came from a judge.

#: The first this many requests all failing for one reason that retrying cannot fix stop the judge.
FAIL_FAST_AFTER = 20

#: Characters per prompt token in the estimates (as generation's dry run).
CHARS_PER_TOKEN = 4

#: Seconds between two looks in the cache for a pair another labeller is asking for.
CLAIM_RETRY_S = 0.1


class JudgeError(MetricError, RuntimeError):
    """The judge cannot label: its first requests all failed for one reason (bad key, unknown model)."""


def judge_of_profile(profile_key: str) -> str | None:
    """The judge identity in a profile key (``openai:gpt-4o-mini,prompt=nli-judge-1``), or None."""
    _, mark, identity = str(profile_key).partition(PROFILE_MARK)
    return identity or None if mark else None


def labeller_note(profile_key: str, nli_model_ids: Sequence[str] = ()) -> str:
    """What a board header says about who labelled its NLI pairs: the judge of a judge profile, else
    the NLI model(s) recorded for its NLI metrics; "" when neither is known."""
    identity = judge_of_profile(profile_key)
    if identity:
        model, _, prompt = identity.rpartition(",prompt=")
        prompt, _, form = prompt.partition(",answer=")
        return f"NLI labels by LLM judge {model} (prompt {prompt}{', one-word answers' if form else ''})"
    ids = sorted({m for m in nli_model_ids if m})
    return f"NLI labels by NLI model {', '.join(ids)}" if ids else ""


def judge_provenance(config: Judge) -> tuple[str, str, str]:
    """``(model_id, revision, backend)`` of the metrics ``config``'s judge labels."""
    how = "structured output (label enum)" if config.structured else "one-word answer"
    template = config.template
    return (config.model_id, f"prompt {template.version} {template.sha256}",
            f"LLM judge via provider {config.spec.provider}, {how}")


# --- Labelling ----------------------------------------------------------------------------------------


@dataclass
class JudgeStats:
    """What one labeller did (the ``score`` command prints it). Each :class:`JudgeLabeller` owns its
    own; counts of several labellers (processes) travel as :meth:`to_dict` and add up with :meth:`add`."""

    pairs: int = 0
    """Pairs asked for (duplicates counted once per call)."""
    cached: int = 0
    """Pairs answered from the response cache."""
    sent: int = 0
    """Pairs answered by a request now."""
    attempts: int = 0
    """HTTP requests made, retries included."""
    unparseable: int = 0
    """Answers (cached or new) with no label in the strict form."""
    unanswered: int = 0
    """Pairs without an answer (the request failed, or was not sent: cost cap, stop, run deleted)."""
    prompt_tokens: int = 0
    """Prompt tokens of the requests made now (reported, else estimated)."""
    completion_tokens: int = 0
    """Completion tokens of the requests made now (reported, else the budget)."""
    cost_usd: float | None = 0.0
    """Estimated spend of the requests made now; ``None`` when the judge's prices are unknown."""
    first_error: str = ""
    """The first failed request's error, for the report."""
    refused_usage: int = 0
    """Answers refused because the server reported unusable token counts (counted at the estimate)."""
    over_cap: int = 0
    """Pairs not sent because their upper-bound cost did not fit under the cost cap."""
    run_deleted: int = 0
    """Pairs not sent because the run they were for was deleted meanwhile."""
    timed_out: int = 0
    """Requests (attempts) that ran out of time, each counted at its reserved cost."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "JudgeStats":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def add(self, other: "JudgeStats") -> None:
        """Add ``other``'s counts to these (the driver of several actors or labellers)."""
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if f.name == "first_error":
                self.first_error = mine or theirs
            elif f.name == "cost_usd":
                self.cost_usd = None if mine is None or theirs is None else round(mine + theirs, 6)
            else:
                setattr(self, f.name, mine + theirs)


@dataclass(frozen=True)
class JudgeEstimate:
    """What labelling some pairs would send (nothing is sent to work it out)."""

    pairs: int
    """Distinct pairs."""
    cached: int
    """Of those, already answered in the response cache."""
    requests: int
    """Requests to send (before retries)."""
    prompt_tokens: int
    """Estimated prompt tokens of those requests (4 characters per token)."""
    completion_tokens: int
    """Upper bound of their completion tokens (every answer at the token budget)."""
    cost_usd: float | None
    """Upper-bound cost in USD; ``None`` when the judge's prices are unknown."""


class JudgeLabeller:
    """Labels (premise, hypothesis) pairs with an LLM judge; the NLI model's stand-in (same ``predict``).

    Requests go through :class:`~persobench.llm.session.LLMSession`. ``ledger``: the spend ledger the
    cost cap is kept in; give every labeller of one invocation the same
    :meth:`SpendLedger.for_invocation <persobench.llm.spend.SpendLedger.for_invocation>` (it pickles to
    worker processes) so the cap holds over all of them. Default: this labeller's own, capped at
    ``config.max_cost``. :attr:`stats` counts what this labeller did. ``remember``: keep every answer
    for the labeller's life, so a pair asked again is neither sent, read nor counted twice."""

    def __init__(self, config: Judge, *, ledger: "SpendLedger | None" = None, remember: bool = False) -> None:

        self.config = config
        self.template = config.template
        self.name = config.model_id
        self.params: GenerationParams = GenerationParams(
            temperature=0.0, max_tokens=self.template.max_tokens,
            response_schema=dict(LABEL_SCHEMA) if config.structured else None)
        # Default: the responses folder of the default store, where generation caches too.
        self.cache_dir = Path(config.cache_dir) if config.cache_dir else default_cache_dir(default_home())
        self.policy = config.retry or RetryPolicy()
        self.ledger = ledger if ledger is not None else SpendLedger(config.max_cost)
        self.stats = JudgeStats()
        # With ``remember`` (a scoring pass's session): each key's outcome (label, UNPARSEABLE or
        # UNANSWERED) this labeller has had, asked again with nothing sent, read or counted. A pair left
        # unanswered stays so for the labeller's life (the next command asks again).
        self._remembered: dict[str, str] | None = {} if remember else None

    # -- identity ------------------------------------------------------------------------------

    def provenance(self) -> tuple[str, str, str]:
        """``(model_id, revision, backend)`` of the metrics it labels."""
        return judge_provenance(self.config)

    # -- requests ------------------------------------------------------------------------------

    def _requests(self, pairs: Sequence[tuple[str, str]]) -> tuple[dict[str, tuple], dict[str, list[int]]]:
        """Distinct requests (cache key -> messages) and the pair positions each one answers."""

        spec = self.config.spec
        options = spec.output_options
        messages: dict[str, tuple] = {}
        positions: dict[str, list[int]] = {}
        for i, (premise, hypothesis) in enumerate(pairs):
            msgs = self.template.messages(premise, hypothesis, structured=self.config.structured)
            key = cache_key(provider=spec.provider, model=spec.model, base_url=spec.base_url, messages=msgs,
                            params=self.params, options=options)
            messages.setdefault(key, msgs)
            positions.setdefault(key, []).append(i)
        return messages, positions

    def _cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:

        return estimate_cost(self.config.spec, prompt_tokens, completion_tokens)

    def estimate(self, pairs: Sequence[tuple[str, str]]) -> JudgeEstimate:
        """What labelling ``pairs`` would send, from the response cache; sends nothing, needs no key."""

        messages, _ = self._requests(pairs)
        with ResponseCache(self.cache_dir) as cache:
            todo = [key for key in messages if key not in cache]
        prompt = sum(estimate_prompt_tokens(messages[key]) for key in todo)
        completion = len(todo) * self.params.max_tokens
        return JudgeEstimate(len(messages), len(messages) - len(todo), len(todo), prompt, completion,
                             self._cost(prompt, completion))

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 0,  # noqa: ARG002 - NLIModel's signature
                progress: Callable[[int], None] | None = None) -> list[NLIPrediction]:
        """One prediction per pair, in order: its label, :data:`UNPARSEABLE` or :data:`UNANSWERED`.

        Cached answers are read first; the rest are sent (each answer is cached the moment it
        arrives). Raises :class:`JudgeError` when the first requests all fail for one reason that
        retrying cannot fix; the answers received until then are cached."""

        messages, positions = self._requests(pairs)
        labels: dict[str, str] = {}
        remembered = self._remembered
        if remembered:
            for key in messages:
                if key in remembered:
                    labels[key] = remembered[key]
                    if progress is not None:
                        progress(len(positions[key]))
        asked = [key for key in messages if key not in labels]
        if not asked:
            return self._predictions(pairs, positions, labels)
        with ResponseCache(self.cache_dir) as cache:
            for key in asked:
                hit = cache.get(key)
                if hit is not None:
                    labels[key] = self._label(hit[0])
                    self.stats.cached += 1
                    if progress is not None:
                        progress(len(positions[key]))
            todo = [key for key in asked if key not in labels]
            if todo and self.config.batch is not None:  # the batch API first (persobench/metrics/judge/judge_batch.py)

                try:
                    todo = answer_by_batch(self, todo, messages, positions, labels, cache, progress)
                except PersoBenchError as exc:  # no key, the batch API refusing: one line, as for every pair
                    raise JudgeError(f"judge {self.config.model_name}: {exc}") from exc  # the CLI reads the cause
            if todo:
                run_coroutine(self._send_all(todo, messages, positions, labels, cache, progress))
        self.stats.pairs += len(asked)
        for key in asked:
            if labels.get(key, UNANSWERED) == UNANSWERED:
                self.stats.unanswered += 1
            if remembered is not None:
                remembered[key] = labels.get(key, UNANSWERED)
        return self._predictions(pairs, positions, labels)

    @staticmethod
    def _predictions(pairs: Sequence[tuple[str, str]], positions: Mapping[str, list[int]],
                     labels: Mapping[str, str]) -> list[NLIPrediction]:
        out = [NLIPrediction(UNANSWERED, {})] * len(pairs)
        for key, where in positions.items():
            label = labels.get(key, UNANSWERED)
            for i in where:
                out[i] = NLIPrediction(label, {label: 1.0} if label in LABELS else {})
        return out

    def _label(self, completion: "Completion") -> str:
        label = parse_label(completion.text, structured=self.config.structured)
        if label == UNPARSEABLE:
            self.stats.unparseable += 1
        return label

    async def _send_all(self, todo: list[str], messages: Mapping[str, tuple], positions: Mapping[str, list[int]],
                        labels: dict[str, str], cache: Any, progress: Callable[[int], None] | None) -> None:
        """Send ``todo`` through the LLM layer; the judge keeps only its labels and counts.

        Each pair is claimed before it is sent (:class:`~persobench.llm.response_cache.ReplyClaims`):
        a pair another labeller (thread or process) is asking for is put back in the queue and taken
        from the cache once its answer is there, so passes running at once ask each pair once."""

        config = self.config
        # a judge request that runs out of time names the flag `score` has for it
        session = LLMSession(config.spec, policy=self.policy, timeout_flag=JUDGE_TIMEOUT_FLAG,
                             concurrency=config.concurrency,
                             max_concurrency=config.max_concurrency, cache=cache, api_key=config.api_key,
                             ledger=self.ledger, budget_tokens=self.params.max_tokens,
                             # the store's budgets (the cache is <home>/responses): a judge on the key of
                             # a run that is generating shares its stated rate limits
                             pacing_home=self.cache_dir.parent)
        try:
            session.connect()
        except ConfigurationError as exc:  # no key, unreachable server: every pair would fail alike
            raise JudgeError(f"judge {config.model_name}: {exc}") from None
        fail_fast = FailFast(min(FAIL_FAST_AFTER, len(todo)))
        abort = ""
        queue = _Queue(todo)
        claims = ReplyClaims(cache.directory)

        def from_cache(key: str) -> bool:
            """Take ``key``'s answer from the cache (another labeller's); False when it is not there."""
            hit = cache.get(key)
            if hit is None:
                return False
            labels[key] = self._label(hit[0])
            self.stats.cached += 1
            if progress is not None:
                progress(len(positions[key]))
            return True

        async def label(keys: list[str]) -> None:
            nonlocal abort
            for key in keys:
                if not claims.claim(key):  # another labeller is asking: its answer will be in the cache
                    if not from_cache(key):
                        queue.later(key)
                        await sleep_or_stop(CLAIM_RETRY_S, session.stopping)
                    continue
                try:
                    if from_cache(key):  # answered since this pass read the cache
                        continue
                    sent = await session.send(key, Request(messages=messages[key], params=self.params))
                finally:
                    claims.release(key)  # after the reply is cached: a waiter finds it there
                outcome = sent.outcome
                if outcome is None:  # not sent (cost cap, run deleted, ledger) or stopped: left unanswered
                    if sent.skipped == "cost cap":
                        self.stats.over_cap += 1
                    elif sent.skipped == "run deleted":
                        self.stats.run_deleted += 1
                elif outcome.completion is not None:
                    labels[key] = self._label(outcome.completion)  # parsed after it is cached
                    self.stats.sent += 1
                elif not self.stats.first_error and outcome.error is not None:
                    self.stats.first_error = session.scrub(outcome.error.describe())
                if outcome is not None and (error := fail_fast.observe(outcome.error)) is not None:
                    abort = (f"judge {config.model_name}: the first {len(fail_fast.first)} request(s) all failed: "
                             f"{session.scrub(error.describe())}")
                    session.stopping.set()
                if progress is not None:
                    progress(len(positions[key]))

        try:
            await session.drive(queue, label, total=len(todo))
        except SpendLedgerError as exc:  # the cap cannot be kept: one line for the whole pass
            abort = f"judge {config.model_name}: {exc}"
        finally:
            claims.close()
            await session.aclose()
            usage = session.usage
            self.stats.attempts += usage.requests
            self.stats.refused_usage += usage.refused_usage
            self.stats.timed_out += usage.timed_out
            self.stats.prompt_tokens += usage.prompt_tokens
            self.stats.completion_tokens += usage.completion_tokens
            cost = usage.cost_usd if self._cost(0, 0) is not None else None
            self.stats.cost_usd = None if cost is None or self.stats.cost_usd is None else \
                round(self.stats.cost_usd + cost, 6)
        if abort:
            raise JudgeError(abort)


class _Queue:
    """The keys a judge pass sends, in order, to which a worker puts back a key another labeller is
    asking for (:meth:`later`). An iterator that may go on after it once ran dry: a worker that put
    a key back asks again, so no key is lost while the other workers end."""

    def __init__(self, keys: Sequence[str]) -> None:
        self._keys = collections.deque(keys)

    def __iter__(self) -> "_Queue":
        return self

    def __next__(self) -> str:
        if not self._keys:
            raise StopIteration
        return self._keys.popleft()

    def later(self, key: str) -> None:
        self._keys.append(key)


# --- Calibration ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Agreement:
    """How a judge's labels agree with a reference labeller's (the NLI model) on the same pairs."""

    n: int
    """Pairs both labelled (the judge's unparseable and unanswered pairs are left out)."""
    accuracy: float
    """Share of those pairs with the same label."""
    kappa: float
    """Cohen's kappa over the three labels (1 = perfect, 0 = chance agreement)."""
    confusion: Mapping[str, Mapping[str, int]]
    """Reference label -> judge label -> pairs (judge columns include :data:`UNPARSEABLE` and
    :data:`UNANSWERED`)."""
    unlabelled: int
    """Pairs the judge gave no label (unparseable or unanswered)."""


def agreement(reference: Sequence[str], judged: Sequence[str]) -> Agreement:
    """Accuracy, Cohen's kappa and the confusion matrix of ``judged`` against ``reference`` labels."""
    if len(reference) != len(judged):

        raise ScoringError(f"agreement: {len(reference)} reference labels for {len(judged)} judged ones")
    columns = (*LABELS, UNPARSEABLE, UNANSWERED)
    confusion = {r: dict.fromkeys(columns, 0) for r in LABELS}
    for r, j in zip(reference, judged):
        confusion[r][j if j in columns else UNPARSEABLE] += 1
    both = [(r, j) for r, j in zip(reference, judged) if j in LABELS]
    n = len(both)
    if not n:
        return Agreement(0, float("nan"), float("nan"), confusion, len(judged))
    observed = sum(r == j for r, j in both) / n
    expected = sum((sum(r == lab for r, _ in both) / n) * (sum(j == lab for _, j in both) / n) for lab in LABELS)
    kappa = (observed - expected) / (1 - expected) if expected < 1 else float("nan")
    return Agreement(n, observed, kappa, confusion, len(judged) - n)
