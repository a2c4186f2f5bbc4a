"""Raw public sources: each loader on a fixture written in the source's own schema.

The hub loaders run through the real ``datasets.load_dataset`` on local parquet/CSV/JSONL files;
FoCus and IT-ConvAI2 are read from a path and from a URL served by a local ``http.server``.
"""

from __future__ import annotations

import csv
import functools
import http.server
import json
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from persobench.errors import DatasetError
from persobench.datasets import sources
from persobench.records import USER1, USER2, Sample

FIXTURES = Path(__file__).parent / "fixtures" / "sources"
BST_DIR = FIXTURES / "blended_skill_talk"
BST_FILE = BST_DIR / "data" / "validation-00000-of-00001.parquet"
SPC_DIR = FIXTURES / "synthetic_persona_chat"
SPC_FILE = SPC_DIR / "Synthetic-Persona-Chat_valid.csv"
PEC_FILE = FIXTURES / "pec_validation.jsonl"
FOCUS_FILE = FIXTURES / "valid_focus.json"
ITC_FILE = FIXTURES / "data_valid_v2.json"


@pytest.fixture(autouse=True)
def _isolated_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the datasets library's Arrow cache and PersoBench downloads inside the test's tmp dir."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    monkeypatch.setenv("PERSOBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PERSOBENCH_FOCUS_SOURCE", raising=False)
    monkeypatch.delenv("PERSOBENCH_IT_CONVAI2_SOURCE", raising=False)


@pytest.fixture
def server() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 serving the fixture folder; yields its base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep pytest output clean
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(FIXTURES)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def _records(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if path.suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as handle:
            return list(csv.DictReader(handle))
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return json.loads(path.read_text(encoding="utf-8"))["data"]


def _assert_clean(samples: list[Sample]) -> None:
    """Invariants every loader must keep."""
    assert len({s.id for s in samples}) == len(samples)
    for s in samples:
        assert s.id.startswith(f"{s.dataset}:")
        assert s.context and all(t.text and t.speaker in (USER1, USER2) for t in s.context)
        assert s.reference and s.reference == s.reference.strip()
        assert not s.reference.lower().startswith(("user 1", "user 2", "user1", "user2", "**"))
        assert s.responder in (USER1, USER2)
        assert all(p.sentences and all(p.sentences) for p in s.personas)


# --------------------------------------------------------------------------- Blended Skill Talk


def test_blended_skill_talk_from_hub_layout_folder() -> None:
    raw = _records(BST_FILE)
    samples = sources.load_blended_skill_talk(str(BST_DIR), split="validation")
    _assert_clean(samples)
    assert len(samples) == len(raw) == 3
    assert [s.id for s in samples] == [s.id for s in sources.load_blended_skill_talk(str(BST_FILE))]
    # The default split is the paper's (test), which this validation-only folder lacks: said in one line.
    with pytest.raises(DatasetError, match=r'\[test\].*Unknown split "test"'):
        sources.load_blended_skill_talk(str(BST_DIR))
    assert [s.id for s in samples] == ["blended-skill-talk-hub:0/3", "blended-skill-talk-hub:1/3", "blended-skill-talk-hub:2/3"]
    for record, sample in zip(raw, samples):
        # The hub's persona is the guided worker's, who gives the reference reply.
        assert sample.responder == USER2
        assert [p.speaker for p in sample.personas] == [USER2]
        assert list(sample.persona_sentences(USER2)) == record["personas"]
        # Two seed turns and the first free message, alternating from User1.
        assert [t.speaker for t in sample.context] == [USER1, USER2, USER1]
        assert [t.text for t in sample.context] == record["previous_utterance"] + [record["free_messages"][0]]
        assert sample.reference == record["guided_messages"][0]
        assert sample.metadata["split"] == "validation"
        assert sample.metadata["context_dataset"] == record["context"]
    assert samples[0].metadata["topic"] == "Beekeeping"


def test_blended_skill_talk_single_parquet_file_matches_folder() -> None:
    from_file = sources.load_blended_skill_talk(str(BST_FILE))
    from_folder = sources.load_blended_skill_talk(str(BST_DIR), split="validation")
    assert from_file == from_folder  # metadata is excluded from equality; content and ids are not
    assert from_file[0].metadata["source"] == str(BST_FILE)


# --------------------------------------------------------------------------- Synthetic-Persona-Chat


def test_synthetic_personachat_csv() -> None:
    samples = sources.load_synthetic_personachat(str(SPC_DIR), split="validation")
    _assert_clean(samples)
    assert len(samples) == 3
    with pytest.raises(DatasetError, match=r"\[test\]"):  # the paper's split, absent from this folder
        sources.load_synthetic_personachat(str(SPC_DIR))
    first, bold, short = samples

    # Personas come from the two columns, split on the source's \r\n, grouped by speaker.
    assert first.persona_sentences(USER1) == ["I am a night nurse.", "I collect vintage postcards.", "My cat is called Biscuit."]
    assert first.persona_sentences(USER2)[0] == "I teach chemistry." and len(first.persona_sentences(USER2)) == 4
    # 8 turns: the final exchange (goodbyes) is dropped, the turn before it is the target.
    assert first.metadata["dialogue_turns"] == 8 and len(first.context) == 5
    assert first.id == "synthetic-personachat-hub:0/5"
    assert first.responder == USER2
    assert first.reference == "I have never had a pet, but a cat alarm sounds useful."
    assert [t.speaker for t in first.context] == [USER1, USER2, USER1, USER2, USER1]

    # **bold** labels, blank lines and a label-less continuation line.
    assert bold.metadata["dialogue_turns"] == 7
    assert bold.context[2].text == "That smells like a great hobby. It must make the whole flat smell good."
    assert bold.persona_sentences(USER2) == ["I bake bread every Sunday.", "I moved here from Lisbon."]
    assert bold.responder == USER1 and bold.reference.startswith("I play the trumpet")

    # Too short to drop an exchange: the last turn is the target.
    assert len(short.context) == 2 and short.reference == "Thank you so much!" and short.responder == USER1


def test_spc_conversion_is_pure_and_strips_labels() -> None:
    record = {
        "user 1 personas": "I like kites.",
        "user 2 personas": "",
        "Best Generated Conversation": "User 1: Hi\nUser 2: Hello there\nUser 1: Bye",
    }
    sample = sources.spc_record_to_sample(record, 7, "spc-test")
    assert sample.id == "spc-test:7/2"
    assert [p.speaker for p in sample.personas] == [USER1]  # an empty persona column gives no set
    assert sample.reference == "Bye" and sample.responder == USER1
    with pytest.raises(ValueError, match=r"record 7: field 'Best Generated Conversation'.*at least 2"):
        sources.spc_record_to_sample({**record, "Best Generated Conversation": "just narration"}, 7, "spc-test")


# --------------------------------------------------------------------------- PEC


def test_pec_jsonl() -> None:
    raw = _records(PEC_FILE)
    samples = sources.load_pec(str(PEC_FILE), split="validation", paper_sample=False)
    _assert_clean(samples)
    assert len(samples) == 3
    assert sorted(s.id for s in samples) == sorted(s.id for s in sources.load_pec(str(PEC_FILE)))  # 3 distinct threads
    for record, sample in zip(raw, samples):
        assert sample.responder == USER2
        assert [p.speaker for p in sample.personas] == [USER2]
        assert sample.persona_sentences() == record["personas"]
        assert len(sample.context) == len(record["context"])
        assert sample.reference == record["response"]
        assert sample.id.endswith(f"/{len(record['context'])}")
    # The replier's own earlier post is a User2 turn; every other poster is User1.
    assert [t.speaker for t in samples[1].context] == [USER1, USER2, USER1]
    assert [t.speaker for t in samples[2].context] == [USER1, USER1, USER1]
    assert samples[1].metadata["context_speakers"] == ["paperlantern", "rainwalker", "paperlantern"]


# --------------------------------------------------------------------------- FoCus


def test_focus_local_file() -> None:
    raw = _records(FOCUS_FILE)
    samples = sources.load_focus(str(FOCUS_FILE))
    _assert_clean(samples)
    assert len(samples) == 2
    assert [s.id for s in samples] == ["focus-raw:FCS00017A/5", "focus-raw:FCS00042B/3"]
    for record, sample in zip(raw, samples):
        full = record["utterance"][-1][f"dialogue{len(record['utterance'])}"]
        # Last machine answer of the whole dialogue; the human's persona is User1's.
        assert len(sample.context) == len(full) - 1
        assert sample.reference == full[-1]
        assert sample.responder == USER2
        assert [p.speaker for p in sample.personas] == [USER1]
        assert sample.persona_sentences(USER1) == record["persona"]
        assert sample.context[0].speaker == USER1 and sample.context[-1].speaker == USER1


def test_focus_and_it_convai2_from_url_are_cached(server: str, tmp_path: Path) -> None:
    local = sources.load_focus(str(FOCUS_FILE))
    remote = sources.load_focus(f"{server}/valid_focus.json")
    assert remote == local and [s.id for s in remote] == [s.id for s in local]
    assert remote[0].metadata["source"] == f"{server}/valid_focus.json"
    cached = list((tmp_path / "home" / "downloads").glob("*valid_focus.json"))
    assert len(cached) == 1 and cached[0].read_bytes() == FOCUS_FILE.read_bytes()
    assert not list((tmp_path / "home" / "downloads").glob("*.part"))  # no temp file left behind

    itc = sources.load_it_convai2(f"{server}/data_valid_v2.json")
    assert itc == sources.load_it_convai2(str(ITC_FILE))


def test_cached_download_is_reused_without_network(server: str, tmp_path: Path) -> None:
    url = f"{server}/data_valid_v2.json"
    first = sources.fetch_source(url)
    first.write_text('{"data": []}', encoding="utf-8")  # prove the second call does not re-download
    assert sources.fetch_source(url) == first
    assert sources.load_it_convai2(url) == []
    assert len(sources.load_it_convai2(url.replace("127.0.0.1", "localhost"))) == 3  # another URL, fresh copy


def test_download_errors_name_the_url(server: str) -> None:
    with pytest.raises(DatasetError, match=r"missing\.json: download failed: HTTP 404"):
        sources.load_focus(f"{server}/missing.json")


def test_truncated_download_leaves_no_file(tmp_path: Path) -> None:
    class Truncating(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b'{"data": [')  # then the connection closes

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Truncating)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(DatasetError, match="download incomplete"):
            sources.load_focus(f"http://127.0.0.1:{httpd.server_address[1]}/valid_focus.json")
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
    downloads = tmp_path / "home" / "downloads"
    assert downloads.is_dir() and list(downloads.iterdir()) == []


# --------------------------------------------------------------------------- IT-ConvAI2


def test_it_convai2_local_file_drops_repeats_like_the_paper() -> None:
    raw = _records(ITC_FILE)
    samples = sources.load_it_convai2(str(ITC_FILE))
    _assert_clean(samples)
    # Record 1 repeats record 0 (only rm_persona differs): kept once, under record 0's id.
    assert [s.id for s in samples] == ["it-convai2-raw:0/1", "it-convai2-raw:2/1", "it-convai2-raw:3/1"]
    assert samples[0].metadata["duplicate_rows"] == [1]
    assert len(sources.load_it_convai2(str(ITC_FILE), drop_duplicates=False)) == len(raw) == 4
    for sample in samples:
        record = raw[sample.metadata["row"]]
        assert [(t.speaker, t.text) for t in sample.context] == [(USER1, record["input"])]
        assert sample.is_single_query
        assert sample.responder == USER2 and sample.reference == record["label"]
        assert [p.speaker for p in sample.personas] == [USER2]
        assert sample.persona_sentences(USER2) == record["full_personas"]


def test_raw_sources_through_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    import persobench.datasets as registry

    monkeypatch.setattr(registry, "_CACHE", {})
    monkeypatch.setenv("PERSOBENCH_IT_CONVAI2_SOURCE", str(ITC_FILE))
    samples = registry.load_dataset("it-convai2-raw")
    assert [s.id for s in samples] == ["it-convai2-raw:0/1", "it-convai2-raw:2/1", "it-convai2-raw:3/1"]
    with pytest.raises(DatasetError, match="PERSOBENCH_FOCUS_SOURCE"):
        registry.load_dataset("focus-raw")


# --------------------------------------------------------------------------- malformed input


def _write_like(original: Path, target: Path, records: list[dict[str, Any]]) -> Path:
    """Write ``records`` to ``target`` in the same format as ``original``."""
    if original.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records), target)
    elif original.suffix == ".csv":
        with open(target, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(_records(original)[0]))
            writer.writeheader()
            writer.writerows(records)
    elif original.suffix == ".jsonl":
        target.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    else:
        target.write_text(json.dumps({"data": records}), encoding="utf-8")
    return target


MALFORMED: list[tuple[str, Callable[[str], list[Sample]], Path, int, str]] = [
    ("bst", sources.load_blended_skill_talk, BST_FILE, 1, "guided_messages"),
    ("spc", sources.load_synthetic_personachat, SPC_FILE, 2, "Best Generated Conversation"),
    ("pec", sources.load_pec, PEC_FILE, 1, "response"),
    ("focus", sources.load_focus, FOCUS_FILE, 1, "persona"),
    ("itc", sources.load_it_convai2, ITC_FILE, 2, "label"),
]


@pytest.mark.parametrize("name, loader, original, row, field", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_missing_field_names_file_record_and_field(
    tmp_path: Path, name: str, loader: Callable[[str], list[Sample]], original: Path, row: int, field: str
) -> None:
    records = _records(original)
    if original.suffix == ".csv":
        records[row][field] = ""  # a CSV cannot drop a key from one row; an empty cell reads as null
    else:
        del records[row][field]
    broken = _write_like(original, tmp_path / f"broken{original.suffix}", records)
    with pytest.raises(ValueError) as caught:
        loader(str(broken))
    message = str(caught.value)
    assert str(broken) in message
    assert f"record {row}:" in message
    assert repr(field) in message
    assert isinstance(caught.value, sources.SourceFormatError) and caught.value.row == row


def test_focus_nested_field_is_named(tmp_path: Path) -> None:
    records = _records(FOCUS_FILE)
    del records[0]["utterance"][-1]["dialogue3"]
    broken = _write_like(FOCUS_FILE, tmp_path / "focus.json", records)
    with pytest.raises(ValueError, match=r"record 0: field 'utterance\[2\]\.dialogue3': missing"):
        sources.load_focus(str(broken))


def test_invalid_json_and_missing_paths(tmp_path: Path) -> None:
    bad = tmp_path / "valid_focus.json"
    bad.write_text('{"data": [\n  {"dialogID": "x",}\n]}', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"valid_focus\.json: invalid JSON at line 2"):
        sources.load_focus(str(bad))
    with pytest.raises(DatasetError, match="no such file"):
        sources.load_it_convai2(str(tmp_path / "absent.json"))
    # A path that does not exist must not be mistaken for a hub name.
    with pytest.raises(DatasetError, match="no such file or folder"):
        sources.load_pec(str(tmp_path / "nope" / "pec.jsonl"))


def test_hub_names_go_to_load_dataset_with_config_and_split(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    pec_rows = _records(PEC_FILE)

    def fake_load_dataset(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        calls.append((args, kwargs))
        return pec_rows

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    samples = sources.load_pec(split="test", subset="happy")
    assert calls == [(("pec", "happy"), {"split": "test"})]
    assert samples[0].metadata["source"] == "pec" and samples[0].metadata["subset"] == "happy"

    def failing(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("hub unreachable")

    monkeypatch.setattr(datasets, "load_dataset", failing)
    with pytest.raises(ConnectionError) as caught:
        sources.load_blended_skill_talk()
    assert any("pass their local path" in note for note in getattr(caught.value, "__notes__", []))


def test_pec_paper_sampling_matches_the_notebooks_pandas_code() -> None:
    """pre_processing.ipynb: group by context_speakers, one row per group with random_state=42, then
    1,000 rows with random_state=42. Run here with pandas beside the pandas-free selection."""
    import random

    import pandas as pd

    rng = random.Random(7)
    names = [f"user{i}" for i in range(900)]
    speakers = [[rng.choice(names) for _ in range(rng.randint(1, 3))] for _ in range(3000)]
    ds = pd.DataFrame({"context_speakers": [str(s) for s in speakers], "row": range(len(speakers))})
    # The notebook's cell (include_groups=False: pandas 3 refuses True; the rows picked are the same).
    grouped = ds.groupby("context_speakers")
    sampled_df = grouped.apply(lambda x: x.sample(n=1, random_state=42), include_groups=False).reset_index(drop=True)
    sampled_df = sampled_df.sample(n=1000, random_state=42).reset_index(drop=True)
    assert sources.paper_pec_selection(speakers) == sampled_df["row"].tolist()
    assert len(set(sources.paper_pec_selection(speakers))) == 1000


def test_pec_hub_defaults_to_the_papers_split_and_sample(tmp_path: Path) -> None:
    records = [json.loads(line) for line in PEC_FILE.read_text().splitlines() if line.strip()]
    # Two records from the same thread speaker list: the paper keeps one of them.
    doubled = tmp_path / "pec_test.jsonl"
    doubled.write_text("".join(json.dumps(r) + "\n" for r in records + [dict(records[0], response="another reply")]))
    every = sources.load_pec(str(doubled), paper_sample=False)
    sampled = sources.load_pec(str(doubled))
    assert every[0].metadata["split"] == "test" and len(every) == len(records) + 1
    assert len(sampled) == len({str(r["context_speakers"]) for r in records})
    assert {s.id for s in sampled} <= {s.id for s in every}  # ids are record indices, not sample positions


# ---------------------------------------------------------------------------------------------
# Hardening, third round (issue 25): the edges a fault sweep found, against real parts


HUGE = "7" * 5000


def test_a_huge_integer_in_a_raw_source_file_names_record_and_field(tmp_path):
    from persobench.datasets import sources
    from persobench.errors import DatasetError

    path = tmp_path / "valid_focus.json"
    path.write_text('{"data": [{"dialogID": "a"}, {"dialogID": ' + HUGE + "}]}", encoding="utf-8")
    with pytest.raises(DatasetError) as caught:
        sources.load_focus(str(path))
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    assert "record 2" in message and "dialogID" in message and "5000 digits" in message
