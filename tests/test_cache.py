"""The response cache: real diskcache on disk, never evicting, keyed on exactly what changes a reply."""

from __future__ import annotations

import diskcache
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from persobench.llm.response_cache import ResponseCache, cache_key
from persobench.providers import ModelSpec
from persobench.providers.base import Completion, GenerationParams
from tests.cli_checks import one_line_error

MESSAGES = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}]


def key(**changes):
    args = dict(provider="openai", model="m", base_url="http://h:1/v1", messages=MESSAGES,
                params=GenerationParams(), options={}, sample_id="d:1")
    args.update(changes)
    return cache_key(**args)


BASE = key()


@pytest.mark.parametrize(
    "changes",
    [
        {"provider": "anthropic"},
        {"model": "m2"},
        {"base_url": "http://h:2/v1"},
        {"base_url": None},
        {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello!"}]},
        {"messages": [{"role": "user", "content": "sys"}, {"role": "user", "content": "hello"}]},
        {"messages": MESSAGES[1:]},
        {"params": GenerationParams(temperature=0.7)},
        {"params": GenerationParams(max_tokens=220)},
        {"params": GenerationParams(top_p=0.9)},
        {"params": GenerationParams(stop=("\n",))},
        {"options": {"top_k": 40}},
    ],
)
def test_what_changes_the_key(changes):
    assert key(**changes) != BASE


def test_what_does_not_change_the_key():
    # a trailing slash is the same server; the sample id is irrelevant to a greedy reply
    assert key(base_url="http://h:1/v1/") == BASE
    assert key(sample_id="d:2") == BASE
    # transport settings and secrets never reach the key: ModelSpec.output_options drops them
    spec = ModelSpec("openai", "m", options={"timeout": 5, "headers": {"X": "1"}, "api_key": "sk-zzz",
                                             "max_tokens_param": "max_completion_tokens"})
    assert spec.output_options == {}
    assert key(options=spec.output_options) == BASE
    # the seed only matters when sampling
    sampled = GenerationParams(temperature=0.7, seed=1)
    assert key(params=sampled) != key(params=GenerationParams(temperature=0.7, seed=2))


def test_sampled_and_sample_dependent_requests_key_on_the_sample():
    hot = GenerationParams(temperature=1.0, seed=0)
    assert key(params=hot, sample_id="d:1") != key(params=hot, sample_id="d:2")
    assert key(sample_dependent=True, sample_id="d:1") != key(sample_dependent=True, sample_id="d:2")
    with pytest.raises(ValueError):
        key(params=hot, sample_id=None)


@settings(max_examples=60, deadline=None)
@given(
    content=st.text(max_size=200),
    temperature=st.floats(min_value=0, max_value=2, allow_nan=False),
    max_tokens=st.integers(min_value=1, max_value=4096),
    options=st.dictionaries(st.sampled_from(["top_k", "min_p", "repetition_penalty"]), st.integers(0, 100)),
)
def test_key_is_deterministic_and_order_insensitive(content, temperature, max_tokens, options):
    params = GenerationParams(temperature=temperature, max_tokens=max_tokens, seed=0)
    msgs = [{"role": "user", "content": content}]
    a = key(messages=msgs, params=params, options=options)
    b = key(messages=[{"content": content, "role": "user"}], params=params, options=dict(reversed(list(options.items()))))
    assert a == b and len(a) == 64 and all(c in "0123456789abcdef" for c in a)


def test_round_trip_survives_reopening(tmp_path):
    completion = Completion('{"response": "hi"}', "stop", 12, 3, "m")
    with ResponseCache(tmp_path / "c") as cache:
        cache.set(BASE, completion, latency=0.42)
        assert BASE in cache
    with ResponseCache(tmp_path / "c") as cache:
        assert cache.get(BASE) == (completion, 0.42)
        assert cache.get(key(model="other")) is None


def test_never_evicts(tmp_path):
    with ResponseCache(tmp_path / "c") as cache:
        assert cache.eviction_policy == "none"
        # even with a size limit far below what is stored, nothing is dropped
        cache._cache.reset("size_limit", 10_000)
        for i in range(150):
            cache.set(key(model=f"m{i}"), Completion("x" * 1000), latency=0.0)
        assert len(cache) == 150 and cache.volume() > 10_000
    # the policy is persisted in the store's settings, not just this handle
    raw = diskcache.Cache(str(tmp_path / "c"))
    assert raw.eviction_policy == "none" and len(raw) == 150
    raw.close()


def test_unreadable_entry_is_a_miss(tmp_path):
    with ResponseCache(tmp_path / "c") as cache:
        cache._cache.set(BASE, "{not json")
        assert cache.get(BASE) is None


def test_group_commit_stores_a_step_s_replies_together_before_their_callbacks(tmp_path):
    """Replies queued in one event-loop step are committed at the start of the next one, and each
    callback waiting for them runs only then, in order: what it reports is on disk for any reader."""
    import asyncio

    from persobench.llm.response_cache import GroupCommitCache

    keys = [key(model=f"m{i}") for i in range(3)]
    seen: list[tuple[str, bool]] = []

    async def main() -> GroupCommitCache:
        cache = GroupCommitCache(tmp_path / "c", on_refused=lambda *a: pytest.fail(f"refused {a}"),
                                 on_failure=lambda exc: pytest.fail(f"failed {exc!r}"))
        for i, k in enumerate(keys):
            cache.set(k, Completion(f"reply {i}"), latency=0.1)
            cache.after_commit(lambda k=k: seen.append((k, k in reader)))
        with ResponseCache(tmp_path / "c") as other:  # another connection sees only what is committed
            assert cache.queued == 3 and len(other) == 0 and seen == []
            await asyncio.sleep(0)  # the next step commits
            assert cache.queued == 0 and len(other) == 3
        ran = []
        cache.after_commit(lambda: ran.append(True))  # nothing queued: at once
        assert ran == [True]
        return cache

    with ResponseCache(tmp_path / "c") as reader:
        cache = asyncio.run(main())
        assert seen == [(k, True) for k in keys]
        assert [cache.get(k)[0].text for k in keys] == ["reply 0", "reply 1", "reply 2"]  # type: ignore[index]
        cache.close()


def test_group_commit_keeps_a_failing_callback_s_error_and_runs_the_others(tmp_path):
    import asyncio

    from persobench.llm.response_cache import GroupCommitCache

    failures: list[BaseException] = []
    ran: list[int] = []

    def boom() -> None:
        raise ValueError("a bug recording a sample")

    async def main() -> GroupCommitCache:
        cache = GroupCommitCache(tmp_path / "c", on_refused=lambda *a: None, on_failure=failures.append)
        cache.set(BASE, Completion("one"), latency=0.0)
        cache.after_commit(boom)
        cache.after_commit(lambda: ran.append(1))
        await asyncio.sleep(0)
        return cache

    cache = asyncio.run(main())
    assert ran == [1] and isinstance(cache.failure, ValueError) and failures == [cache.failure]
    assert BASE in cache
    # close() commits what is still queued (no event loop: set commits at once)
    cache.set(key(model="late"), Completion("late"), latency=0.0)
    cache.close()
    with ResponseCache(tmp_path / "c") as reopened:
        assert len(reopened) == 2


def test_group_commit_interrupted_keeps_its_replies_for_close(tmp_path):
    """A commit interrupted before it stored anything (Ctrl-C, a database locked too long) keeps
    its replies and their callbacks queued: close() stores them and reports them."""
    from persobench.llm.response_cache import GroupCommitCache

    cache = GroupCommitCache(tmp_path / "c", on_refused=lambda *a: None, on_failure=lambda exc: None)
    cache._queued.append((BASE, Completion("kept"), 0.1, 0.0))  # queued, as set() does inside a loop
    ran: list[bool] = []
    cache.after_commit(lambda: ran.append(True))
    real = cache.set_many

    def interrupted(replies):
        raise KeyboardInterrupt

    cache.set_many = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        cache.commit()
    assert cache.queued == 1 and ran == []
    cache.set_many = real  # type: ignore[method-assign]
    cache.close()
    assert ran == [True]
    with ResponseCache(tmp_path / "c") as reopened:
        assert reopened.get(BASE)[0].text == "kept"  # type: ignore[index]


# ---------------------------------------------------------------------------------------------
# Hardening, second round (issue 17): the edges a fault sweep found, against real parts


def test_damaged_response_cache_is_named_with_the_way_out(tmp_path, capsys):
    home = tmp_path / "home"
    (home / "responses").mkdir(parents=True)
    (home / "responses" / "cache.db").write_bytes(b"this is not an SQLite header" * 100)
    for extra in (["--dry-run"], []):
        line = one_line_error(capsys, ["--home", str(home), "run", "--model", "baseline:reference", "--limit", "2",
                                       "--no-progress", *extra], str(home / "responses" / "cache.db"), "damaged")
        assert "move" in line and "runs" in line
