"""The text encoder: embeddings that do not depend on the batch, the on-disk cache (same numbers,
no model call for cached texts), agreement with bert_score and sentence-transformers, and the
memoized METEOR against nltk, on published replies."""

from __future__ import annotations

from pathlib import Path

import os

import numpy as np
import pandas as pd
import pytest

from persobench.metrics.encoders import embedding_models
from persobench.metrics import embeddings
from persobench.metrics.backends import get_profile
from persobench.metrics.encoders.encoder import EmbeddingShelf, TextEncoder, text_key
from persobench.metrics.sample_scores import score_samples

MODEL_METRICS = ["bertscore_p", "bertscore_r", "bertscore_f1", "persona_coverage"]


@pytest.fixture(scope="module")
def published(reference_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """12 FoCus samples with their published gpt-4-turbo replies (and 30 more replies for batches)."""
    from persobench.generation.importer import import_persobench, samples_for_run
    from persobench.store.run_store import RunStore

    home = tmp_path_factory.mktemp("encoder-store")
    store = RunStore(home)
    import_persobench(store, reference_dir)
    run = next(r for r in store.runs() if r.run_id.startswith("focus__gpt-4-turbo__vanilla"))
    samples = samples_for_run(run)
    generations = run.read_table("generations")
    ok = generations[generations["status"] == "ok"]
    replies = {str(s): str(r) for s, r in zip(ok["sample_id"], ok["response"]) if isinstance(r, str) and r.strip()}
    ids = [sid for sid in replies if samples[sid].reference.strip() and samples[sid].persona_sentences()][:42]
    return samples, replies, ids


def _score(published, ids, encoder):
    samples, replies, _ = published
    result = score_samples([samples[i] for i in ids], {i: replies[i] for i in ids}, metrics=MODEL_METRICS,
                           encoder=encoder)
    return result.wide(), result.persona_details.set_index(["sample_id", "persona_index"])["similarity"]


def test_cached_scores_equal_uncached_bit_for_bit_and_no_model_call_on_second_scoring(published, tmp_path):
    _, _, ids = published
    sample = ids[:12]
    # Without a cache, these 12 alone.
    plain_wide, plain_sims = _score(published, sample, TextEncoder(get_profile("offline")))
    # The cache filled by a different, larger batch (other texts, other padding neighbours).
    first = TextEncoder(get_profile("offline"), tmp_path / "embeddings")
    _score(published, ids[::-1], first)
    assert first.stats.embedded["sentence"] > 0 and first.stats.embedded["tokens"] > 0
    # A second scoring from the cache: references and every sentence vector come from disk.
    second = TextEncoder(get_profile("offline"), tmp_path / "embeddings")
    cached_wide, cached_sims = _score(published, sample, second)
    pd.testing.assert_frame_equal(cached_wide, plain_wide, check_exact=True)
    pd.testing.assert_series_equal(cached_sims, plain_sims, check_exact=True)
    assert second.stats.embedded["sentence"] == 0  # no model call for a cached sentence
    assert second.stats.from_disk["sentence"] > 0
    samples = published[0]
    refs = {samples[i].reference for i in sample}
    assert second.stats.from_disk["tokens"] == len(refs)
    # Only the replies' token embeddings (not kept on disk: used once) went through the model.
    assert second.stats.embedded["tokens"] == len(sample)
    # Persona similarity alone, all cached: not one forward pass.
    third = TextEncoder(get_profile("offline"), tmp_path / "embeddings")
    samples, replies, _ = published
    only = score_samples([samples[i] for i in sample], {i: replies[i] for i in sample},
                         metrics=["persona_coverage"], encoder=third)
    assert third.stats.forward_batches == 0
    assert only.persona_details.set_index(["sample_id", "persona_index"])["similarity"].equals(plain_sims)


def test_embedding_of_a_text_does_not_depend_on_its_batch(published):
    _, replies, ids = published
    texts = [replies[i] for i in ids]
    alone = TextEncoder(get_profile("offline"))
    crowd = TextEncoder(get_profile("offline"))
    target = texts[0]
    vec_alone = alone.sentence_vectors([target])[0]
    vec_crowd = crowd.sentence_vectors(texts[5:] + [target])[-1]
    assert np.array_equal(vec_alone, vec_crowd)
    ref = published[0][ids[0]].reference
    p1 = alone.bertscore([target], [ref])
    p2 = crowd.bertscore(texts[3:] + [target], [ref] * (len(texts) - 3) + [ref])
    assert (p1[0][0], p1[1][0], p1[2][0]) == (p2[0][-1], p2[1][-1], p2[2][-1])


def test_one_pass_for_both_embeddings_when_the_models_share_layers(published):
    encoder = TextEncoder(get_profile("offline"))
    assert encoder.can_share()  # offline: BERTScore is all-MiniLM-L6-v2 cut at layer 4
    _score(published, published[2][:4], encoder)
    assert encoder.stats.shared_passes == 4


def test_values_agree_with_bert_score_and_sentence_transformers(published):
    samples, replies, ids = published
    sample = ids[:10]
    wide, sims = _score(published, sample, TextEncoder(get_profile("offline")))
    loaded = embedding_models.load_bertscorer(get_profile("offline").spec("bertscore"), "cpu")
    p, r, f = embeddings.bertscore(loaded, [replies[i] for i in sample], [samples[i].reference for i in sample])
    for k, sid in enumerate(sample):
        assert wide.loc[sid, "bertscore_p"] == pytest.approx(p[k], abs=1e-5)
        assert wide.loc[sid, "bertscore_r"] == pytest.approx(r[k], abs=1e-5)
        assert wide.loc[sid, "bertscore_f1"] == pytest.approx(f[k], abs=1e-5)
    model = embedding_models.load_embedding(get_profile("offline").spec("embedding"), "cpu")
    left = [s for sid in sample for s in samples[sid].persona_sentences()]
    right = [replies[sid] for sid in sample for _ in samples[sid].persona_sentences()]
    expected = embeddings.pair_similarities(model, left, right)
    assert np.allclose(sims.to_numpy(), expected, atol=1e-5, rtol=0)


def test_a_damaged_shard_is_ignored_and_a_shard_is_written_whole(tmp_path):
    shelf = EmbeddingShelf(tmp_path, {"kind": "sentence"})
    shelf.put(text_key("a"), np.ones((1, 3), np.float32), np.ones(1, np.float32))
    assert shelf.flush() == 1
    shards = list(tmp_path.glob("shard-*"))
    assert len(shards) == 1 and not list(tmp_path.glob(".shard-*"))
    broken = tmp_path / "shard-99999999999999999999-broken"
    broken.mkdir()
    (broken / "keys.npy").write_bytes(b"not numpy")
    fresh = EmbeddingShelf(tmp_path, {"kind": "sentence"})
    assert fresh.damaged == 1
    vectors, weights = fresh.get(text_key("a"))
    assert vectors.tolist() == [[1.0, 1.0, 1.0]] and weights.tolist() == [1.0]
    assert fresh.get(text_key("b")) is None


def _resident_kb(path) -> int:
    """Resident kB of this process's mappings of ``path`` (Linux /proc/self/smaps)."""
    total, inside = 0, False
    for line in open("/proc/self/smaps", encoding="utf-8"):
        if line[:1] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's /proc/self/smaps")
def test_the_shard_pages_a_pass_read_are_given_back_and_read_again_equal(tmp_path):
    writer = EmbeddingShelf(tmp_path, {"kind": "sentence"})
    rows = np.random.default_rng(0).random((4_000, 384)).astype(np.float32)  # a 6 MB shard
    for i in range(0, len(rows), 40):
        writer.put(text_key(str(i)), rows[i:i + 40], np.ones(40, np.float32))
    writer.flush()
    vectors = next(tmp_path.glob("shard-*")) / "vectors.npy"

    reader = EmbeddingShelf(tmp_path, {"kind": "sentence"})
    first = [reader.get(text_key(str(i)))[0] for i in range(0, len(rows), 40)]
    assert _resident_kb(vectors) > 4_000  # every page read is resident
    reader.drop_resident()
    assert _resident_kb(vectors) < 100
    again = [reader.get(text_key(str(i)))[0] for i in range(0, len(rows), 40)]
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert np.array_equal(np.concatenate(again), rows)


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's /proc/self/smaps")
def test_an_encoder_gives_back_the_shard_pages_its_pass_read(tmp_path):
    sentences = [f"I have {n} cats and {n % 7} dogs at home." for n in range(400)]
    TextEncoder(get_profile("offline"), tmp_path).prepare((), sentences)  # embedded, written to the shelf
    (vectors,) = tmp_path.rglob("shard-*/vectors.npy")
    reader = TextEncoder(get_profile("offline"), tmp_path)
    reader.prepare((), sentences)  # read back from disk
    assert reader.stats.from_disk["sentence"] == len(sentences)
    assert vectors.stat().st_size > 500_000 and _resident_kb(vectors) < 100


def test_memoized_meteor_equals_nltk_on_published_replies(published):
    from nltk.translate.meteor_score import meteor_score

    from persobench.metrics.lexical import whitespace_tokens
    from persobench.metrics.meteor import meteor, resolve_wordnet

    samples, replies, ids = published
    wordnet, _ = resolve_wordnet(get_profile("offline").spec("wordnet"))
    for sid in ids:
        reference, reply = samples[sid].reference, replies[sid]
        expected = float(meteor_score([whitespace_tokens(reference)], whitespace_tokens(reply), wordnet=wordnet))
        assert meteor(reference, reply, wordnet) == expected
        assert meteor(reference, reply, None) == float(meteor_score(
            [whitespace_tokens(reference)], whitespace_tokens(reply), wordnet=_NoWordNet()))


class _NoWordNet:
    def synsets(self, *args, **kwargs):
        return []


def test_score_command_embeds_a_datasets_runs_once_and_caches_them_in_the_store(tmp_path, capsys):
    from persobench.cli import main
    from persobench.datasets import load_dataset, samples_by_id
    from persobench.generation import run_generation
    from persobench.metrics.encoders.encoder import store_cache_root
    from persobench.store.run_store import RunStore

    store = RunStore(tmp_path / "home")
    runs = [run_generation(dataset="sample", model=model, mode="vanilla", store=store)
            for model in ("baseline:reference", "baseline:persona-echo")]
    assert main(["--home", str(store.home), "score", "--no-progress", "--metrics",
                 ",".join(MODEL_METRICS)]) == 0
    capsys.readouterr()
    samples = samples_by_id("sample")
    references = {s.reference for s in load_dataset("sample") if s.reference.strip()}
    # Both runs answer the same samples: each reference's tokens are on disk once, not once per run.
    token_shelves = list(store_cache_root(store.home).glob("tokens-*"))
    assert len(token_shelves) == 1
    assert len(EmbeddingShelf(token_shelves[0], {})._index) == len(references)
    for run in runs:
        stored = run.read_table("scores").pivot(index="sample_id", columns="metric", values="value")
        generations = run.read_table("generations")
        ok = generations[generations["status"] == "ok"]
        replies = dict(zip(ok["sample_id"], ok["response"]))
        alone = score_samples([samples[s] for s in replies], replies, metrics=MODEL_METRICS,
                              encoder=TextEncoder(get_profile("offline")))
        expected = alone.wide()
        for metric in MODEL_METRICS:  # the command's batched, cached pass gives the numbers of a run alone
            assert stored[metric].sort_index().equals(expected[metric].sort_index()), metric


def test_bfloat16_profile_has_its_own_key_and_rebuilds_from_its_overrides():
    from persobench.errors import ConfigurationError

    plain, fast = get_profile("offline"), get_profile("offline", precision="bfloat16")
    assert plain.precision == "float32" and plain.key == "offline"  # float32 keys are unchanged
    assert fast.precision == "bfloat16" and fast.key != plain.key and fast.key.startswith("offline+")
    assert fast.describe()["precision"] == "bfloat16"
    again = get_profile("offline", overrides=fast.overrides)  # how a stored profile is rebuilt
    assert again.precision == "bfloat16" and again.key == fast.key
    with pytest.raises(ConfigurationError, match="unknown precision 'float16'"):
        get_profile("offline", precision="float16")


def test_bfloat16_embeddings_are_close_to_float32_batch_independent_and_cached_apart(published, tmp_path):
    from persobench.metrics.encoders.encoder import store_cache_root

    _, replies, ids = published
    sample = ids[:12]
    fast_profile = get_profile("offline", precision="bfloat16")
    plain_wide, plain_sims = _score(published, sample, TextEncoder(get_profile("offline"), tmp_path / "embeddings"))
    fast_wide, fast_sims = _score(published, sample, TextEncoder(fast_profile, tmp_path / "embeddings"))
    bert = ["bertscore_p", "bertscore_r", "bertscore_f1"]
    gap = float((fast_wide[bert] - plain_wide[bert]).abs().max().max())
    sim_gap = float((fast_sims - plain_sims).abs().max())
    assert 0 < gap < 2e-3 and 0 < sim_gap < 5e-3  # bfloat16 did run, and stayed close
    # Each precision has its own shelves: a float32 score never reads a bfloat16 embedding.
    assert len(list(store_cache_root(tmp_path).glob("sentence-*"))) == 2
    # In bfloat16 too, a text's embedding does not depend on its batch.
    texts = [replies[i] for i in ids]
    alone = TextEncoder(fast_profile).sentence_vectors([texts[0]])[0]
    crowd = TextEncoder(fast_profile).sentence_vectors(texts[5:] + [texts[0]])[-1]
    assert np.array_equal(alone, crowd)
    # And a second scoring from the bfloat16 cache gives the same numbers bit for bit.
    again_wide, _ = _score(published, sample, TextEncoder(fast_profile, tmp_path / "embeddings"))
    pd.testing.assert_frame_equal(again_wide, fast_wide, check_exact=True)


def test_score_command_precision_flag_stores_bfloat16_scores_under_their_own_key(tmp_path, capsys):
    from persobench.cli import main
    from persobench.generation import run_generation
    from persobench.store.run_store import RunStore

    store = RunStore(tmp_path / "home")
    run = run_generation(dataset="sample", model="baseline:persona-echo", mode="vanilla", store=store)
    command = ["--home", str(store.home), "score", "--no-progress", "--metrics", ",".join(MODEL_METRICS)]
    assert main(command) == 0
    assert main([*command, "--precision", "bfloat16"]) == 0
    out = capsys.readouterr().out
    fast = get_profile("offline", precision="bfloat16")
    assert f"profile {fast.key}" in out and "precision=bfloat16" in out
    scores = store.get(run.run_id).read_table("scores")
    assert set(scores["profile"]) == {"offline", fast.key}
    both = scores.pivot_table(index=["sample_id", "metric"], columns="profile", values="value")
    gap = (both["offline"] - both[fast.key]).abs()
    continuous = gap[gap.index.get_level_values("metric").str.startswith("bertscore_")]
    assert 0 < continuous.max() < 2e-3
    # Coverage counts persona sentences above a cosine threshold: a cosine moved by bfloat16 across
    # it changes a sample's coverage by a whole sentence's share, so only most samples are unchanged.
    assert (gap.xs("persona_coverage", level="metric") == 0).mean() >= 0.5
    recorded = store.get(run.run_id).manifest.extra["scores"][fast.key]
    assert "bfloat16" in recorded["metrics"]["bertscore_f1"]["backend"]
    with pytest.raises(SystemExit) as stopped:
        main([*command, "--precision", "float16"])
    assert stopped.value.code == 2
    assert "invalid choice: 'float16'" in capsys.readouterr().err


def test_streamed_forward_passes_give_the_same_bits_as_one_pass_at_a_time(published, monkeypatch):
    """Two single-threaded streams (the CPU default on this 2-core machine) against the passes one
    after another: same values bit for bit, also for shared passes, whose BERTScore layer is read by
    a hook that must give each stream its own batch's output."""
    import threading

    import torch

    _, _, ids = published
    threads_before = torch.get_num_threads()
    monkeypatch.setenv("PERSOBENCH_ENCODER_STREAMS", "1")
    serial = TextEncoder(get_profile("offline"))
    serial_wide, serial_sims = _score(published, ids, serial)
    monkeypatch.setenv("PERSOBENCH_ENCODER_STREAMS", "2")
    streamed = TextEncoder(get_profile("offline"))
    streamed_wide, streamed_sims = _score(published, ids, streamed)
    assert streamed.stats.shared_passes == serial.stats.shared_passes > 0
    assert streamed.stats.forward_batches == serial.stats.forward_batches >= 4
    pd.testing.assert_frame_equal(streamed_wide, serial_wide, check_exact=True)
    pd.testing.assert_series_equal(streamed_sims, serial_sims, check_exact=True)
    assert torch.get_num_threads() == threads_before  # restored once the passes end
    assert not [t for t in threading.enumerate() if t.name.startswith("persobench-encoder")]


def test_forward_streams_default_override_and_a_bad_value(monkeypatch):
    import torch

    from persobench.metrics.backends import BackendUnavailable
    from persobench.metrics.encoders.encoder_streams import forward_streams

    monkeypatch.delenv("PERSOBENCH_ENCODER_STREAMS", raising=False)
    assert forward_streams("cpu") == max(1, torch.get_num_threads())
    assert forward_streams("cuda:0") == 1  # one device: its passes one after another
    monkeypatch.setenv("PERSOBENCH_ENCODER_STREAMS", "3")
    assert forward_streams("cpu") == 3
    monkeypatch.setenv("PERSOBENCH_ENCODER_STREAMS", "two")
    with pytest.raises(BackendUnavailable, match="PERSOBENCH_ENCODER_STREAMS='two'"):
        forward_streams("cpu")


def test_a_failing_pass_stops_the_streams_and_restores_torchs_threads():
    import threading

    import torch

    from persobench.metrics.encoders.encoder_streams import run_in_streams

    threads_before = torch.get_num_threads()
    started: list[int] = []

    def run(batch: int) -> int:
        started.append(batch)
        if batch == 3:
            raise RuntimeError("pass 3 failed")
        return batch * 10

    batches = ((8, [k]) for k in range(50))
    seen = []
    with pytest.raises(RuntimeError, match="pass 3 failed"):
        for _length, _chunk, out in run_in_streams(batches, lambda _n, chunk: chunk[0], run, streams=2):
            assert torch.get_num_threads() == 1  # each stream single-threaded while they work
            seen.append(out)
    assert seen == [0, 10, 20]  # in order, up to the failed one
    assert len(started) <= 8  # bounded look-ahead: the rest never started
    assert torch.get_num_threads() == threads_before
    assert not [t for t in threading.enumerate() if t.name.startswith("persobench-encoder")]
