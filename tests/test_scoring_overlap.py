"""The local scoring pass as a bounded pipeline (issue 29): run N+1 planned and run N-1 written while
run N is computed in the lexical worker pool. Its values and stored tables equal those of scoring
the runs one after the other; a failed write loses no other run's values; a pass stopped midway
resumes with only the missing values."""

from __future__ import annotations

import threading
import time

import pandas as pd
import pytest

from persobench import pipeline
from persobench.datasets import load_dataset
from persobench.errors import StoreWriteError
from persobench.metrics import lexical
from persobench.scoring import pass_steps
from persobench.scoring.compute import compute_run, score_run
from persobench.scoring.overlap import Stop, ahead
from persobench.scoring.work_plan import plan_run, run_samples
from persobench.store.run_store import RunManifest, RunStore

METRICS = ["bleu", "rouge1", "rouge2", "rougeL", "dist1", "dist2"]
RUNS = 5


def _store(home) -> RunStore:
    """RUNS runs of the sample dataset, each with its own replies (some invalid, one blank)."""
    samples = load_dataset("sample")
    store = RunStore(home)
    for k in range(RUNS):
        run = store.create(RunManifest(run_id=f"sample__m{k}__vanilla__0", dataset="sample",
                                       sample_ids=tuple(s.id for s in samples), model={"label": f"m{k}"},
                                       mode="vanilla", template="t", template_hash="h"))
        run.record_samples(samples)
        rows = []
        for i, s in enumerate(samples):
            if (i + k) % 7 == 0:
                rows.append((s.id, "invalid", None, 0.5))
            else:
                reply = "" if i == 3 else " ".join(s.reference.split()[k % 3::2]) + f" reply {k} of {i}."
                rows.append((s.id, "ok", reply, 0.5))
        run.write_table("generations", pd.DataFrame(rows, columns=["sample_id", "status", "response", "latency"]))
        run.update(extra={"counts": {"ok": sum(1 for row in rows if row[1] == "ok")}})  # sizes the pool
    return store


class _Batches(list):
    def __init__(self) -> None:
        super().__init__()
        self.ahead: list[int] = []

    def clear(self) -> None:
        super().clear()
        self.ahead.clear()


@pytest.fixture()
def in_workers(monkeypatch):
    """The worker pool started for these few replies, every batch sent to it; returns the sizes of
    the batches the pass's pool scored (``.ahead``: how many replies of each were sent ahead)."""
    monkeypatch.setattr(lexical, "PARALLEL_MIN_REPLIES", 10)
    monkeypatch.setattr(lexical, "PARALLEL_MIN_BATCH", 2)
    batches = _Batches()
    ahead = batches.ahead
    real = lexical._in_workers

    def spy(pool, references, replies, wanted):
        batches.append(len(replies))
        with pool.lock:  # how many of the batch's replies were sent to the workers when it was planned
            ahead.append(sum(pair in pool.ahead for pair in zip(references, replies)))
        return real(pool, references, replies, wanted)

    monkeypatch.setattr(lexical, "_in_workers", spy)
    return batches


def _sequential(home) -> RunStore:
    """The same runs scored one at a time in this process: plan, compute, write."""
    store = _store(home)
    for run in store.runs():
        score_run(run, run_samples(run), profile="offline", metrics=METRICS)
    return store


def _tables(store: RunStore, scored_only: bool = False) -> dict[str, tuple[pd.DataFrame, dict]]:
    """Run id -> (its scores sorted, its metrics' provenance); ``scored_only``: runs without scores left out."""
    found = {}
    for run in store.runs():
        if scored_only and not run.has_table("scores"):
            continue
        scores = run.read_table("scores").sort_values(["sample_id", "metric"]).reset_index(drop=True)
        provenance = dict(run.manifest.extra["scores"]["offline"]["metrics"])
        found[run.run_id] = (scores, provenance)
    return found


def _assert_same(ours: dict, expected: dict, skip: tuple[str, ...] = ()) -> None:
    assert sorted(ours) == sorted(expected)
    for run_id, (scores, provenance) in expected.items():
        if run_id in skip:
            continue
        pd.testing.assert_frame_equal(ours[run_id][0], scores, check_exact=True)
        assert ours[run_id][1] == provenance


def test_overlapped_pass_equals_scoring_each_run_in_turn(tmp_path, in_workers):
    expected = _tables(_sequential(tmp_path / "one-by-one"))
    store = _store(tmp_path / "overlapped")
    in_workers.clear()  # the sequential pass's batches
    said: list[str] = []
    report = pipeline.score(metrics=METRICS, store=store, on_run=lambda result: said.append(result.run_id))

    assert report.complete and len(report.runs) == RUNS and sorted(said) == sorted(expected)
    assert all(r.summary is not None and r.summary.computed["bleu"] > 0 for r in report.runs)
    ours = _tables(store)
    _assert_same(ours, expected)
    assert sum(len(scores) for scores, _ in ours.values()) > RUNS * 100
    assert not [t for t in threading.enumerate() if t.name.startswith("persobench-")]
    assert len(in_workers) == RUNS  # every run's batch went to the pass's worker processes
    # ... as soon as the run was planned: each batch found all its replies already sent.
    assert in_workers.ahead == list(in_workers) and all(in_workers)


def test_a_failed_write_loses_no_other_runs_values(tmp_path, in_workers, monkeypatch):
    """The third run's write fails (a full disk) while the others are planned and computed around
    it: that run says why and stores nothing; every other run is stored as a sequential pass stores it."""
    expected = _tables(_sequential(tmp_path / "one-by-one"))
    store = _store(tmp_path / "overlapped")
    failing = sorted(expected)[2]
    real_write = pass_steps.write_run

    def write(run, work, result):
        if run.run_id == failing:
            raise StoreWriteError(f"{run.table_path('scores')}: cannot write: the disk is full")
        return real_write(run, work, result)

    monkeypatch.setattr(pass_steps, "write_run", write)
    report = pipeline.score(metrics=METRICS, store=store)

    errors = {r.run_id: r.error for r in report.runs if not r.ok}
    assert list(errors) == [failing] and "the disk is full" in errors[failing]
    assert not store.get(failing).has_table("scores")
    _assert_same(_tables(RunStore(store.home), scored_only=True), {k: v for k, v in expected.items() if k != failing})


def test_a_pass_stopped_midway_resumes_with_only_the_missing_values(tmp_path, in_workers):
    """Stopped (Ctrl-C) after two runs are written, while the next ones are being planned and computed:
    the two are stored whole, nothing else is; the threads end; the next pass computes only the rest."""
    expected = _tables(_sequential(tmp_path / "one-by-one"))
    store = _store(tmp_path / "overlapped")
    written: list[str] = []

    def stop_after_two(result) -> None:
        written.append(result.run_id)
        if len(written) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pipeline.score(metrics=METRICS, store=store, on_run=stop_after_two)
    deadline = time.monotonic() + 10
    while [t for t in threading.enumerate() if t.name.startswith("persobench-")] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [t for t in threading.enumerate() if t.name.startswith("persobench-")]
    stored = {run.run_id for run in RunStore(store.home).runs() if run.has_table("scores")}
    assert stored == set(written)

    report = pipeline.score(metrics=METRICS, store=RunStore(store.home))
    for result in report.runs:
        computed = sum(result.summary.computed.values())
        assert (computed == 0) == (result.run_id in written), result.run_id
        if result.run_id in written:
            assert sum(result.summary.cached.values()) == len(expected[result.run_id][0])
    _assert_same(_tables(RunStore(store.home)), expected)


# --- the pipeline itself -----------------------------------------------------------------------------

def test_ahead_keeps_order_and_stays_at_most_depth_ahead():
    made: list[int] = []

    def produce():
        for k in range(20):
            made.append(k)
            yield k

    stop = Stop()
    seen = []
    for item in ahead(produce(), stop, depth=2):
        time.sleep(0.01)
        # the producer may hold one more item, blocked on the full queue
        assert len(made) - len(seen) <= 2 + 2
        seen.append(item)
    assert seen == list(range(20))


def test_ahead_raises_a_producer_error_after_the_items_before_it():
    def produce():
        yield 1
        yield 2
        raise ValueError("planning failed")

    seen = []
    with pytest.raises(ValueError, match="planning failed"):
        for item in ahead(produce(), Stop()):
            seen.append(item)
    assert seen == [1, 2]


def test_a_stopped_pipeline_ends_its_thread():
    def endless():
        k = 0
        while True:
            k += 1
            yield k

    stop = Stop()
    items = ahead(endless(), stop, depth=1, name="persobench-test")
    assert next(items) == 1
    stop.set()
    stop.join(timeout=5)
    assert not any(t.is_alive() for t in stop.threads)


EMBEDDED = ["bertscore_f1", "persona_coverage", "meteor", "bleu"]


def _datasets_store(home, datasets: int = 3, runs_each: int = 2) -> RunStore:
    """``datasets`` datasets (by name) of ``runs_each`` runs each, all on the same 8 samples: the
    datasets share references and persona sentences, as the paper's persona-chat datasets do."""
    samples = load_dataset("sample")[:8]
    store = RunStore(home)
    for d in range(datasets):
        for k in range(runs_each):
            run = store.create(RunManifest(run_id=f"set{d}__m{k}__vanilla__0", dataset=f"set{d}",
                                           sample_ids=tuple(s.id for s in samples), model={"label": f"m{k}"},
                                           mode="vanilla", template="t", template_hash="h"))
            run.record_samples(samples)
            rows = [(s.id, "ok", " ".join(s.reference.split()[(d + k) % 3::2]) + f" set {d} model {k}.", 0.5)
                    for s in samples]
            run.write_table("generations", pd.DataFrame(rows, columns=["sample_id", "status", "response", "latency"]))
    return store


def test_the_next_datasets_texts_are_embedded_while_this_datasets_runs_are_computed(tmp_path):
    """The consumer holds the first run of set0; set1's texts are embedded meanwhile (the old
    executor embedded a dataset only when the consumer asked for its first run). Values equal those
    of scoring each run in turn with one encoder, and no text is embedded twice across the two
    encoders (the third dataset's encoder reads the shards the second one wrote)."""
    from persobench.metrics.backends import get_profile
    from persobench.metrics.encoders.encoder import TextEncoder
    from persobench.scoring.executors import LocalExecutor

    one = _datasets_store(tmp_path / "in-turn")
    alone = TextEncoder(get_profile("offline"), tmp_path / "in-turn-embeddings")
    expected = {}
    for run in one.runs():
        work = plan_run(run, run_samples(run), profile="offline", metrics=EMBEDDED)
        expected[run.run_id] = compute_run(work, encoder=alone).scores
        if run.run_id.endswith("m1__vanilla__0"):
            alone.release()

    store = _datasets_store(tmp_path / "overlapped")
    profile = get_profile("offline")
    runs = sorted(store.runs(), key=lambda run: run.run_id)
    groups = list(pass_steps.PassSteps(runs, profile, tuple(EMBEDDED)).planned())
    assert [len(g.works) for g in groups] == [2, 2, 2]
    events: list[tuple[str, int, int]] = []
    lock = threading.Lock()

    def progress(stage: str, done: int, total: int) -> None:
        with lock:
            events.append((stage, done, total))

    def set1_embedded() -> bool:
        with lock:
            return any(s.startswith("set1") and s.endswith("embeddings") and d == t > 0 for s, d, t in events)

    computed = {}
    with LocalExecutor(profile, store, embeds=True) as executor:
        results = executor.compute(iter(groups), progress)
        first = next(results)
        assert first.work.run_id.startswith("set0")
        deadline = time.monotonic() + 120
        while not set1_embedded() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert set1_embedded(), "set1 was not embedded while the consumer held set0's first run"
        computed[first.work.run_id] = first.result.scores
        for done in results:
            assert not done.error
            computed[done.work.run_id] = done.result.scores
        encoders = executor._encoders
    assert sorted(computed) == sorted(expected)
    for run_id, scores in expected.items():
        pd.testing.assert_frame_equal(computed[run_id].reset_index(drop=True), scores.reset_index(drop=True),
                                      check_exact=True)
    for kind in ("tokens", "sentence"):
        assert sum(e.stats.embedded[kind] for e in encoders) == alone.stats.embedded[kind] > 0
    assert not [t for t in threading.enumerate() if t.name.startswith(("persobench-embed", "persobench-encoder"))]


def test_a_pass_stopped_while_the_next_dataset_is_embedded_ends_its_threads(tmp_path):
    """The consumer stops after set0's first run: the embedding thread stops at its next batch and
    is waited for (torch still running in a thread at exit aborts the interpreter)."""
    from persobench.metrics.backends import get_profile
    from persobench.scoring.executors import LocalExecutor

    store = _datasets_store(tmp_path / "store", datasets=3)
    profile = get_profile("offline")
    runs = sorted(store.runs(), key=lambda run: run.run_id)
    groups = pass_steps.PassSteps(runs, profile, tuple(EMBEDDED)).planned()
    with LocalExecutor(profile, store, embeds=True) as executor:
        results = executor.compute(groups, None)
        assert next(results).work.run_id.startswith("set0")
        results.close()
        assert executor._running == []
    assert not [t for t in threading.enumerate() if t.name.startswith(("persobench-embed", "persobench-encoder"))]


def test_split_by_embedding_keeps_a_family_with_the_families_it_requires():
    from persobench.scoring.work_plan import split_by_embedding

    free, rest = split_by_embedding(["bleu", "meteor", "bertscore_f1", "persona_coverage", "c_score", "dist1"])
    assert set(free) == {"bleu", "dist1", "meteor"}
    # persona_coverage embeds; c_score's NLI family is one group with it (coverage requires NLI outputs).
    assert set(rest) == {"bertscore_f1", "persona_coverage", "c_score"}
    assert split_by_embedding(["bleu", "rougeL"]) == (("bleu", "rougeL"), ())
