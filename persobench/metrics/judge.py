"""NLI labels from an LLM judge: the pairs the NLI metrics need, labelled by any provider's model.

The NLI-based metrics (``c_score``, ``p_consistency``, ``ue_score`` and the NLI persona coverage) need a
label -- entailment, neutral or contradiction -- for (premise, hypothesis) pairs. The ``nli`` slot's
classifier gives them (:mod:`persobench.metrics.nli`); ``score --judge PROVIDER:MODEL`` gives them
from an LLM instead. :class:`JudgeLabeller` plays the classifier's role (``predict(pairs)``), so the
metric code is the same for both.

The judge's prompt is a versioned template in the package (``judge_templates/<version>.toml``). It
asks for the label through structured output (a JSON schema whose ``label`` is an enum of the three
labels) on providers that enforce one (:data:`STRUCTURED_PROVIDERS`), and otherwise for one bare word.
Parsing is strict (:func:`parse_label`): any other answer is :data:`UNPARSEABLE`, counted and never
guessed; a pair whose request failed is :data:`UNANSWERED`. Neither gives a metric value.

Every judge call goes through generation's machinery: the response cache (written the moment a
reply arrives, so a killed ``score --judge`` resumes without paying twice and an identical rerun
sends nothing), the retry loop (:func:`~persobench.generation.retry.call_with_retries`, with its
Retry-After pause gate) and ``--concurrency auto`` (:class:`~persobench.generation.concurrency.AdaptiveLimit`).

Provenance: judge-labelled scores are stored under a profile key of their own, ``<profile>+judge=
<provider>:<model>[@host:port][#options],prompt=<version>`` (:attr:`JudgeConfig.identity`), so they never share a
board with numbers of an NLI model.

Cheap to import: the providers, the cache and the asyncio machinery load when a judge is built.
"""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from persobench.errors import ConfigurationError, MetricError, ScoringError
from persobench.metrics.backends import PROFILE_MARK
from persobench.metrics.judge_config import (  # noqa: F401 - part of this module's interface
    JUDGE_FLAGS, STRUCTURED_PROVIDERS, JudgeConfig, make_judge,
)
from persobench.metrics.judge_prompt import (  # noqa: F401 - part of this module's interface
    DEFAULT_PROMPT, LABEL_SCHEMA, TEMPLATE_DIR, UNPARSEABLE, JudgeTemplate, load_template, parse_label,
    template_versions,
)
from persobench.metrics.nli_labels import LABELS, NLIPrediction

if TYPE_CHECKING:  # pragma: no cover
    from persobench.providers.base import Completion, GenerationParams, ProviderError

#: A pair whose request failed (or was not sent: stop, cost cap); asked again by the next run.
UNANSWERED = "unanswered"

#: Marks a profile key whose NLI labels came from a judge.

#: The first this many requests all failing for one reason that retrying cannot fix stop the judge.
FAIL_FAST_AFTER = 20

#: Characters per prompt token in the estimates (as generation's dry run).
CHARS_PER_TOKEN = 4


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


# --- Labelling ----------------------------------------------------------------------------------------


@dataclass
class JudgeStats:
    """What the judge did in this process (the ``score`` command prints it)."""

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
    """Pairs without an answer (the request failed, or was not sent: cost cap, stop)."""
    prompt_tokens: int = 0
    """Prompt tokens of the requests made now (reported, else estimated)."""
    completion_tokens: int = 0
    """Completion tokens of the requests made now (reported, else the budget)."""
    cost_usd: float | None = 0.0
    """Estimated spend of the requests made now; ``None`` when the judge's prices are unknown."""
    first_error: str = ""
    """The first failed request's error, for the report."""


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
    """Labels (premise, hypothesis) pairs with an LLM judge; the NLI model's stand-in (same ``predict``)."""

    def __init__(self, config: JudgeConfig) -> None:
        from persobench.cache import default_cache_dir
        from persobench.providers.base import GenerationParams
        from persobench.store import default_home

        self.config = config
        self.template = config.template
        self.name = config.model_id
        self.params: GenerationParams = GenerationParams(
            temperature=0.0, max_tokens=self.template.max_tokens,
            response_schema=dict(LABEL_SCHEMA) if config.structured else None)
        # Default: the responses folder of the default store, where generation caches too.
        self.cache_dir = Path(config.cache_dir) if config.cache_dir else default_cache_dir(default_home())
        self.stats = JudgeStats()
        self._spent = 0.0  # estimated USD of answered requests plus the bound of those in flight
        self._lock = threading.Lock()

    # -- identity ------------------------------------------------------------------------------

    def provenance(self) -> tuple[str, str, str]:
        """``(model_id, revision, backend)`` of the metrics it labels."""
        how = "structured output (label enum)" if self.config.structured else "one-word answer"
        return (self.name, f"prompt {self.template.version} {self.template.sha256}",
                f"LLM judge via provider {self.config.spec.provider}, {how}")

    # -- requests ------------------------------------------------------------------------------

    def _requests(self, pairs: Sequence[tuple[str, str]]) -> tuple[dict[str, tuple], dict[str, list[int]]]:
        """Distinct requests (cache key -> messages) and the pair positions each one answers."""
        from persobench.cache import cache_key

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
        from persobench.models_registry import estimate_cost

        return estimate_cost(self.config.spec, prompt_tokens, completion_tokens)

    @staticmethod
    def _prompt_tokens(messages: Sequence[Mapping[str, str]]) -> int:
        return sum(len(m["content"]) for m in messages) // CHARS_PER_TOKEN + 1

    def estimate(self, pairs: Sequence[tuple[str, str]]) -> JudgeEstimate:
        """What labelling ``pairs`` would send, from the response cache; sends nothing, needs no key."""
        from persobench.cache import ResponseCache

        messages, _ = self._requests(pairs)
        with ResponseCache(self.cache_dir) as cache:
            todo = [key for key in messages if key not in cache]
        prompt = sum(self._prompt_tokens(messages[key]) for key in todo)
        completion = len(todo) * self.params.max_tokens
        return JudgeEstimate(len(messages), len(messages) - len(todo), len(todo), prompt, completion,
                             self._cost(prompt, completion))

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 0,  # noqa: ARG002 - NLIModel's signature
                progress: Callable[[int], None] | None = None) -> list[NLIPrediction]:
        """One prediction per pair, in order: its label, :data:`UNPARSEABLE` or :data:`UNANSWERED`.

        Cached answers are read first; the rest are sent (each answer is cached the moment it
        arrives). Raises :class:`JudgeError` when the first requests all fail for one reason that
        retrying cannot fix; the answers received until then are cached."""
        from persobench.cache import ResponseCache

        messages, positions = self._requests(pairs)
        labels: dict[str, str] = {}
        with ResponseCache(self.cache_dir) as cache:
            for key in messages:
                hit = cache.get(key)
                if hit is not None:
                    labels[key] = self._label(hit[0])
                    self.stats.cached += 1
                    if progress is not None:
                        progress(len(positions[key]))
            todo = [key for key in messages if key not in labels]
            if todo:
                from persobench.generation.runner import run_coroutine

                run_coroutine(self._send_all(todo, messages, positions, labels, cache, progress))
        self.stats.pairs += len(messages)
        out = [NLIPrediction(UNANSWERED, {})] * len(pairs)
        for key, where in positions.items():
            label = labels.get(key, UNANSWERED)
            if label == UNANSWERED:
                self.stats.unanswered += 1
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
        from persobench.generation.concurrency import AdaptiveLimit
        from persobench.generation.retry import PauseGate, RetryPolicy
        from persobench.providers import make_provider
        from persobench.secrets import known_secrets

        config = self.config
        policy = config.retry or RetryPolicy()
        try:
            provider = make_provider(config.spec, api_key=config.api_key, timeout=policy.timeout)
            provider.check()
        except ConfigurationError as exc:  # no key, unreachable server: every pair would fail alike
            raise JudgeError(f"judge {config.model_name}: {exc}") from None
        secrets = known_secrets(api_keys=getattr(provider, "_secrets", ()) or (), base_url=config.spec.base_url,
                                options=config.spec.options)
        ceiling = config.max_concurrency if config.concurrency == "auto" else int(config.concurrency)
        ceiling = min(ceiling, provider.max_concurrency or ceiling)
        limit = AdaptiveLimit(ceiling) if config.concurrency == "auto" else None
        state = _SendState(iter(todo), asyncio.Event(), PauseGate(), random.Random(), policy, limit, secrets, [],
                           len(todo))
        try:
            await asyncio.gather(*(self._worker(provider, state, messages, positions, labels, cache, progress)
                                   for _ in range(min(ceiling, len(todo)))))
        finally:
            await provider.aclose()
        if state.abort:
            raise JudgeError(state.abort)

    async def _worker(self, provider: Any, state: "_SendState", messages: Mapping[str, tuple],
                      positions: Mapping[str, list[int]], labels: dict[str, str], cache: Any,
                      progress: Callable[[int], None] | None) -> None:
        from persobench.generation.retry import call_with_retries
        from persobench.providers.base import Request

        for key in state.keys:
            if state.stopping.is_set():
                return
            bound_prompt = self._prompt_tokens(messages[key])
            bound = self._cost(bound_prompt, self.params.max_tokens) or 0.0
            if not self._reserve(bound):
                # Over the cost cap: left unanswered, asked again by a later run with a higher cap.
                if progress is not None:
                    progress(len(positions[key]))
                continue
            outcome = await call_with_retries(
                provider, Request(messages=messages[key], params=self.params), policy=state.policy,
                gate=state.gate, stopping=state.stopping, rng=state.rng, on_attempt=self._count_attempt,
                limit=state.limit)
            if outcome is None:  # stopping: left unanswered
                self._settle(bound, None)
                return
            completion = outcome.completion
            if completion is not None:
                completion = _scrubbed(completion, state.secrets)
                cache.set(key, completion, latency=outcome.latency)  # first: a crash now loses nothing
                labels[key] = self._label(completion)
                self.stats.sent += 1
                prompt = completion.prompt_tokens if completion.prompt_tokens is not None else bound_prompt
                done = (completion.completion_tokens if completion.completion_tokens is not None
                        else self.params.max_tokens)
                self._settle(bound, (prompt, done))
            else:
                self._settle(bound, None)
                if not self.stats.first_error and outcome.error is not None:
                    self.stats.first_error = outcome.error.describe()
            self._fail_fast(state, outcome.error)
            if progress is not None:
                progress(len(positions[key]))

    def _count_attempt(self) -> None:
        self.stats.attempts += 1

    def _reserve(self, bound: float) -> bool:
        """Count a request's upper-bound cost against the cap before it is sent (False: over the cap)."""
        cap = self.config.max_cost
        with self._lock:
            if cap is not None and self._spent + bound > cap + 1e-12:
                return False
            self._spent += bound
            return True

    def _settle(self, bound: float, usage: tuple[int, int] | None) -> None:
        """Replace a request's reserved bound by its cost from the usage (nothing when it failed)."""
        cost = self._cost(*usage) if usage is not None else 0.0
        with self._lock:
            self._spent += (cost or 0.0) - bound
            if usage is not None:
                self.stats.prompt_tokens += usage[0]
                self.stats.completion_tokens += usage[1]
                self.stats.cost_usd = None if cost is None or self.stats.cost_usd is None else \
                    round(self.stats.cost_usd + cost, 6)

    def _fail_fast(self, state: "_SendState", error: "ProviderError | None") -> None:
        """Stop when the first requests (:data:`FAIL_FAST_AFTER`, or all when fewer) all failed for one
        reason that retrying cannot fix: a bad key or an unknown model fails every pair alike."""
        from persobench.providers.base import ErrorKind

        if state.settled:
            return
        state.first.append(error)
        first = state.first[0]
        hopeless = first is not None and (not first.retryable or first.kind is ErrorKind.CONNECTION)
        if not hopeless or error is None or error.signature != first.signature:
            state.settled = True  # one success or a different failure: the judge works
            return
        if len(state.first) >= min(FAIL_FAST_AFTER, state.total):
            state.settled = True
            state.abort = (f"judge {self.config.model_name}: the first {len(state.first)} request(s) all failed: "
                           f"{first.describe()}")
            state.stopping.set()


@dataclass
class _SendState:
    """What the workers of one :meth:`JudgeLabeller.predict` share."""

    keys: Any
    stopping: asyncio.Event
    gate: Any
    rng: random.Random
    policy: Any
    limit: Any
    secrets: tuple[str, ...]
    first: list
    total: int
    abort: str = ""
    settled: bool = False


def _scrubbed(completion: "Completion", secrets: Sequence[str]) -> "Completion":
    """A judge that echoes the key must not get it into the cache."""
    import dataclasses

    from persobench.secrets import scrub

    if not secrets:
        return completion
    return dataclasses.replace(completion, text=scrub(completion.text, secrets))


_LABELLERS: dict[tuple, JudgeLabeller] = {}
_LABELLERS_LOCK = threading.Lock()


def judge_labeller(config: JudgeConfig) -> JudgeLabeller:
    """The labeller of ``config``, one per process (its stats add up over the runs of a command)."""
    key = (config.identity, str(config.cache_dir), config.concurrency, config.max_concurrency, config.max_cost,
           config.retry)
    with _LABELLERS_LOCK:
        if key not in _LABELLERS:
            _LABELLERS[key] = JudgeLabeller(config)
        return _LABELLERS[key]


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
