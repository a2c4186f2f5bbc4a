"""Datasets: the paper's prompt tables annotated row by row, the built-in sample, user files, sampling."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from persobench.datasets import (
    PAPER_TABLES, DatasetError, dataset_names, load_dataset, select_samples,
)
from persobench.datasets.prompt_tables import parse_context, parse_personas, parse_prompt_row
from persobench.datasets.user_files import DatasetFileError, load_user_file
from persobench.records import Sample
from tests.cli_checks import one_line_error

LABEL = re.compile(r"^\s*User ?[12]\s*:")


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.reference
@pytest.mark.parametrize("name", sorted(PAPER_TABLES))
def test_every_row_of_every_paper_table_round_trips(name: str, reference_dir: Path) -> None:
    file_stem = PAPER_TABLES[name][0]
    rows = _rows(reference_dir / "Prompts" / f"{file_stem}.csv")
    samples = load_dataset(name)
    assert len(samples) == len(rows), "no row may be lost"
    assert [s.id for s in samples] == [f"{name}:{i}" for i in range(len(rows))]
    for row, sample in zip(rows, samples):
        where = f"{name} row {sample.metadata['row']}"
        if row["personas"].strip():
            assert sample.personas and all(p.sentences for p in sample.personas), where
        lines = row["context"].split("\n")
        labelled = [line for line in lines if LABEL.match(line)]
        if labelled:
            last_index = max(i for i, line in enumerate(lines) if LABEL.match(line))
            ends_with_cue = not LABEL.sub("", lines[last_index]).strip() and not "".join(lines[last_index + 1:]).strip()
            assert sample.metadata["trailing_cue"] == ends_with_cue, where
            assert len(sample.context) == len(labelled) - ends_with_cue, where
        else:
            assert len(sample.context) == 1, where
        assert all(turn.text for turn in sample.context), where
        assert not LABEL.match(sample.reference), where
        assert sample.reference == LABEL.sub("", row["act_response"], count=1).strip(), where
        assert sample.context[-1].speaker != sample.responder, where
        for turn in sample.context:
            assert not LABEL.match(turn.text), where


@pytest.mark.reference
def test_list_style_personas_keep_every_quoted_sentence(reference_dir: Path) -> None:
    rows = _rows(reference_dir / "Prompts" / "Blended Skill Talk.csv")
    literal = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")
    for row, sample in zip(rows, load_dataset("blended-skill-talk")):
        assert len(sample.persona_sentences()) == len(literal.findall(row["personas"].split(":", 1)[1]))


@pytest.mark.reference
def test_two_speaker_personas_split_on_sep(reference_dir: Path) -> None:
    rows = _rows(reference_dir / "Prompts" / "Synthetic-PersonaChat.csv")
    for row, sample in zip(rows, load_dataset("synthetic-personachat")):
        blocks = row["personas"].split("<SEP>")
        assert {p.speaker for p in sample.personas} == ({"User1", "User2"} if len(blocks) == 2 else {"User1"})
        expected = sum(len([ln for ln in b.split(":", 1)[1].split("\n") if ln.strip()]) for b in blocks)
        assert len(sample.persona_sentences()) == expected


def test_numpy_list_personas_with_both_quote_styles() -> None:
    personas = parse_personas(
        "[User 1 persona]: ['i hate talking to people.' \"i'm a dragon believer.\"\n 'third one']",
        responder="User2", unlabelled_owner="User2",
    )
    assert [(p.speaker, p.sentences) for p in personas] == [
        ("User1", ("i hate talking to people.", "i'm a dragon believer.", "third one"))
    ]


def test_glued_sentences_split_but_abbreviations_survive() -> None:
    (persona,) = parse_personas(
        "I would like to visit Washington D.C.I love art.My favorite architect is Antoni Gaudì.I am German.",
        responder="User2", unlabelled_owner="User1",
    )
    assert persona.speaker == "User1"
    assert persona.sentences == (
        "I would like to visit Washington D.C.", "I love art.",
        "My favorite architect is Antoni Gaudì.", "I am German.",
    )


def test_responder_persona_comma_style() -> None:
    (persona,) = parse_personas(
        "[Responder persona]: i hate it ., i do nt think so , no ., i know little", responder="User2",
        unlabelled_owner="User2",
    )
    assert persona.speaker == "User2"
    assert persona.sentences == ("i hate it .", "i do nt think so , no .", "i know little")


def test_context_continuation_lines_and_trailing_cue() -> None:
    turns, cue, preamble = parse_context("* * *\nUser 1: Hi\nUser 2: Hello\nsecond line\n\nUser 1: ")
    assert [(t.speaker, t.text) for t in turns] == [("User1", "Hi"), ("User2", "Hello\nsecond line")]
    assert cue == "User1" and preamble == "* * *"


def test_unlabelled_context_is_a_single_query() -> None:
    sample = parse_prompt_row(
        {"personas": "[Responder persona]: i like tea", "context": "my dog died today .", "act_response": "so sorry ."},
        dataset="pec", index=7,
    )
    assert sample.id == "pec:7"
    assert sample.is_single_query and sample.context[0].speaker == "User1"
    assert sample.responder == "User2" and sample.personas[0].speaker == "User2"


def test_reference_label_sets_responder_and_is_stripped() -> None:
    sample = parse_prompt_row(
        {"personas": "i like tea.i am tall", "context": "User1: hi\nUser2: hey\nUser1: tea?",
         "act_response": "User2: yes please"},
        dataset="x", index=0, unlabelled_owner="partner",
    )
    assert sample.responder == "User2" and sample.reference == "yes please"
    assert sample.personas[0].speaker == "User1"  # unlabelled persona owned by the partner (FoCus)
    assert sample.personas[0].sentences == ("i like tea.", "i am tall")


def test_builtin_sample_dataset_is_rich_and_valid() -> None:
    samples = load_dataset("sample")
    assert 25 <= len(samples) <= 40
    assert len({s.id for s in samples}) == len(samples)
    turn_counts = {len(s.context) for s in samples}
    assert min(turn_counts) == 1 and max(turn_counts) == 8
    assert sum(s.is_single_query for s in samples) >= 3
    assert any(len(s.personas) == 2 for s in samples) and any(len(s.personas) == 1 for s in samples)
    sizes = {len(p.sentences) for s in samples for p in s.personas}
    assert min(sizes) == 1 and max(sizes) == 6
    for s in samples:
        assert s.context[-1].speaker != s.responder
        assert s.reference.strip()
        assert Sample.from_dict(json.loads(json.dumps(s.to_dict()))) == s


def test_unknown_dataset_lists_known_names() -> None:
    with pytest.raises(DatasetError) as info:
        load_dataset("no-such-dataset")
    message = str(info.value)
    assert "no-such-dataset" in message and "sample" in message and "focus" in message


def test_registry_names_cover_every_source() -> None:
    names = set(dataset_names())
    assert {"sample", "blended-skill-talk", "focus", "it-convai2", "pec", "synthetic-personachat",
            "blended-skill-talk-hub", "synthetic-personachat-hub", "pec-hub", "focus-raw", "it-convai2-raw"} <= names


def test_sampling_is_deterministic_and_seed_dependent() -> None:
    samples = load_dataset("sample")
    first = [s.id for s in select_samples(samples, limit=10, seed=1)]
    again = [s.id for s in load_dataset("sample", limit=10, seed=1)]
    other = [s.id for s in load_dataset("sample", limit=10, seed=2)]
    assert first == again and len(first) == 10
    assert set(first) != set(other)
    order = [s.id for s in samples]
    assert first == sorted(first, key=order.index), "selection keeps source order"
    # The choice depends only on ids and seed: a known-answer check against sha256 ranking.
    import hashlib

    expected = sorted(order, key=lambda i: hashlib.sha256(f"1:{i}".encode()).hexdigest())[:10]
    assert set(first) == set(expected)


# ---------------------------------------------------------------- user files

def _write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_user_csv_loads_with_stable_ids(tmp_path: Path) -> None:
    path = _write(tmp_path / "mine.csv",
                  'personas,context,act_response\n"i like tea.i am tall","User1: hi\nUser1: tea?",User2: yes\n'
                  '[User 2 persona]: [\'i run\'],User1: run?,sure\n')
    samples = load_dataset(str(path))
    assert [s.id for s in samples] == ["mine:0", "mine:1"]
    assert samples[1].personas[0].speaker == "User2"
    assert samples[0].dataset == str(path)


def test_user_jsonl_with_query_column(tmp_path: Path) -> None:
    path = _write(tmp_path / "q.jsonl", json.dumps(
        {"personas": ["i bake bread."], "context": "User1: hello", "act_response": "hi", "query": "any bread tips?"}) + "\n")
    (sample,) = load_user_file(path)
    assert sample.context[-1].text == "any bread tips?" and sample.context[-1].speaker == "User1"


def test_user_file_problems_name_file_row_and_column(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.csv",
                  "personas,context,act_response\n"
                  "p1,User1: hi,ok\n"
                  "p2,,fine\n"             # row 2: empty context
                  "p3,User1: x\n"          # row 3: ragged
                  "p4,User1: y,\n")        # row 4: empty reply
    with pytest.raises(DatasetFileError) as info:
        load_user_file(path)
    message = str(info.value)
    assert "bad.csv" in message and "nothing was loaded" in message
    assert "row 2, column context: empty" in message
    assert "row 3" in message and "2 fields, header has 3" in message
    assert "row 4, column act_response: empty" in message
    assert len(info.value.problems) == 3


def test_user_file_missing_column(tmp_path: Path) -> None:
    path = _write(tmp_path / "cols.csv", "personas,context\np,User1: hi\n")
    with pytest.raises(DatasetFileError, match=r"missing column\(s\) act_response"):
        load_user_file(path)


def test_user_file_non_utf8_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "latin.csv", b"personas,context,act_response\np,User1: caf\xe9,ok\n")
    with pytest.raises(DatasetFileError) as info:
        load_user_file(path)
    assert "line 2" in str(info.value) and "0xe9" in str(info.value)


def test_user_file_over_size_limit(tmp_path: Path) -> None:
    path = _write(tmp_path / "big.csv", "personas,context,act_response\n" + "p,User1: hi,ok\n" * 100)
    with pytest.raises(DatasetFileError, match="over the limit of 100 bytes"):
        load_user_file(path, max_bytes=100)


def test_user_jsonl_bad_lines(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.jsonl", '{"personas": "p", "context": "User1: a", "act_response": "b"}\n{oops\n'
                  '{"personas": "p", "act_response": "b"}\n')
    with pytest.raises(DatasetFileError) as info:
        load_user_file(path)
    assert "row 2: invalid JSON" in str(info.value)
    assert "row 3, column context: missing" in str(info.value)


def test_sample_hash_is_the_dataclass_hash_computed_once_and_never_pickled() -> None:
    """Scoring looks samples up by hash for every reply: the hash is cached on the object, equal
    samples (metadata aside) hash alike, and a pickled copy (a worker process, where strings hash
    differently) computes its own instead of carrying this process's."""
    import dataclasses
    import pickle

    from persobench.records import PersonaSet, Turn

    sample = Sample("d:1", "d", (PersonaSet("User1", ("I run.", "I cook.")),), (Turn("User1", "hi"),), "User2",
                    "hello", {"row": 1})
    twin = dataclasses.replace(sample, metadata={"row": 2})
    other = dataclasses.replace(sample, reference="bye")
    expected = hash(("d:1", "d", sample.personas, sample.context, "User2", "hello"))
    assert hash(sample) == hash(twin) == expected and twin == sample
    assert hash(other) != hash(sample) and other != sample
    assert sample.__dict__["_hash"] == expected  # computed once, then read
    copy = pickle.loads(pickle.dumps(sample))
    assert "_hash" not in copy.__dict__ and copy == sample and hash(copy) == expected
    assert len({sample: 1, twin: 2, other: 3}) == 2


@pytest.mark.reference
def test_some_samples_parses_only_the_rows_asked_for(reference_dir: Path) -> None:
    """A report's few dialogues of a paper table: only their rows are parsed, into the samples the
    whole table gives (an id the table lacks is left out); a dataset already parsed is served from
    that parse, and a file dataset is loaded whole."""
    from persobench import datasets

    datasets._CACHE.pop(("pec", ()), None)
    wanted = ["pec:3", "pec:0", "pec:999", "pec:5000", "focus:1", "pec:x"]
    some = datasets.some_samples("pec", wanted)
    assert ("pec", ()) not in datasets._CACHE, "the whole table was parsed"
    whole = datasets.samples_by_id("pec")
    assert some == {i: whole[i] for i in ("pec:0", "pec:3", "pec:999")}
    assert datasets.some_samples("pec", ["pec:7"]) == {"pec:7": whole["pec:7"]}
    assert datasets.some_samples("sample", ["sample:2", "sample:999"]).keys() == {"sample:2"}
# ---------------------------------------------------------------------------------------------
# Hardening, second round (issue 17): the edges a fault sweep found, against real parts


def test_lone_surrogate_in_jsonl_is_an_error_naming_row_and_column(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    good = {"personas": "I like tea.", "context": "User1: hi", "act_response": "hello"}
    path.write_text(json.dumps(good) + "\n" + json.dumps(good).replace("I like tea.", "I like \\ud800 tea.") + "\n",
                    encoding="utf-8")
    one_line_error(capsys, ["--home", str(tmp_path / "h"), "show", str(path)], str(path), "row 2", "personas",
                   "surrogate")
    one_line_error(capsys, ["--home", str(tmp_path / "h"), "run", "--dataset", str(path), "--model",
                            "baseline:reference", "--no-progress"], str(path), "row 2", "personas")


def test_nul_byte_in_a_csv_cell_is_reported_with_its_row(tmp_path):
    from persobench.datasets.user_files import DatasetFileError, load_user_file

    path = tmp_path / "nul.csv"
    path.write_bytes(b"personas,context,act_response\np1,User1: c1,r1\np2,User1: c\x002,r2\n")
    with pytest.raises(DatasetFileError) as info:
        load_user_file(path)
    message = str(info.value)
    assert str(path) in message and "row 2" in message and "context" in message and "NUL" in message


# ---------------------------------------------------------------------------------------------
# Hardening, third round (issue 25): the edges a fault sweep found, against real parts


HUGE = "7" * 5000


def test_a_huge_integer_in_a_jsonl_dataset_names_file_row_and_column(tmp_path, capsys):
    path = tmp_path / "huge.jsonl"
    good = json.dumps({"personas": "p", "context": "User1: hi", "act_response": "ok"})
    path.write_text(good + "\n" + '{"personas": "p", "context": "User1: hi", "act_response": "ok", "id": '
                    + HUGE + "}\n", encoding="utf-8")
    line = one_line_error(capsys, ["show", str(path)], str(path), "row 2", "column id", "5000 digits")
    assert "set_int_max_str_digits" not in line
    path.write_text(good + "\n" + good + "\n" + '{"personas": ["p", ' + HUGE
                    + '], "context": "User1: hi", "act_response": "ok"}\n', encoding="utf-8")
    one_line_error(capsys, ["--home", str(tmp_path / "home"), "run", "--dataset", str(path), "--dry-run",
                            "--model", "baseline:reference"], str(path), "row 3", "column personas")


# ---------------------------------------------------------------------------------------------
# Hardening, fourth round (issue 39): files and inputs


#: Characters ``str.splitlines`` breaks on that JSON allows raw inside a string.
NOT_LINE_BREAKS = "\u2028\u2029\u0085"


def test_a_user_jsonl_row_holding_a_raw_line_separator_loads(tmp_path):
    from persobench.datasets import load_dataset

    path = tmp_path / "data.jsonl"
    rows = [{"personas": f"I like tea.{NOT_LINE_BREAKS}I have a cat.", "context": "User1: Hi!",
             "act_response": f"Hello{NOT_LINE_BREAKS} there."},
            {"personas": "I run.", "context": "User1: Plans?", "act_response": "A run."}]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    assert "\u2028" in path.read_text(encoding="utf-8")  # raw, as the file holds it
    samples = load_dataset(str(path))
    assert [s.metadata["row"] for s in samples] == [1, 2]
    assert samples[0].reference == f"Hello{NOT_LINE_BREAKS} there."
