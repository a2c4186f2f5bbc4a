"""Prompt tables parsed once per version of the file (issue 27 item 1): the import keeps them in the
store, scoring reads them back equal to a fresh parse, and an edited table, a changed parser, a
damaged file or a store that cannot be written never gives other samples than the table's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from persobench.datasets import load_all, parsed_tables
from persobench.datasets.parsed_tables import table_samples, tables_dir_of_store
from persobench.generation.importer import import_persobench, samples_for_run
from persobench.store.run_store import RunStore
from tests.test_importer import make_paper_folder


@pytest.fixture()
def parses(monkeypatch):
    """Every parse of a table, counted; nothing a previous test loaded in this process."""
    calls: list[str] = []
    real = parsed_tables.parse_all
    monkeypatch.setattr(parsed_tables, "parse_all", lambda name, **options: calls.append(name) or real(name, **options))
    monkeypatch.setattr(parsed_tables, "_LOADED", {})
    monkeypatch.setattr(parsed_tables, "_KEYS", {})
    return calls


def _forget(monkeypatch) -> None:
    """As a new process: nothing loaded in memory."""
    monkeypatch.setattr(parsed_tables, "_LOADED", {})
    monkeypatch.setattr(parsed_tables, "_KEYS", {})


def _touch_later(path: Path) -> None:
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))


def test_the_import_keeps_the_table_and_scoring_reads_it_equal_to_a_parse(tmp_path, parses, monkeypatch):
    store = RunStore(tmp_path / "home")
    report = import_persobench(store, make_paper_folder(tmp_path / "paper"))
    assert parses == ["focus"]
    kept = list(tables_dir_of_store(store.home).glob("*.json"))
    assert len(kept) == 1

    _forget(monkeypatch)
    run = store.get(report.runs[0].run_id)
    samples = samples_for_run(run)
    assert parses == ["focus"]  # read from the store, not parsed again
    parsed = {s.id: s for s in load_all("focus", source=run.manifest.extra["import"]["prompts_file"])}
    assert samples == parsed
    for sid, sample in samples.items():
        assert sample.metadata == parsed[sid].metadata
        assert sample.input_hash == parsed[sid].input_hash
    # Every run of the table gets the same objects (the scorer's caches key on them).
    other = samples_for_run(store.get(report.runs[1].run_id))
    assert all(other[sid] is samples[sid] for sid in other)


def test_an_edited_table_or_a_changed_parser_is_parsed_again(tmp_path, parses, monkeypatch):
    folder = make_paper_folder(tmp_path / "paper")
    table = folder / "Prompts" / "FoCus.csv"
    cache = tmp_path / "samples"
    first = table_samples("focus", table, cache)
    table.write_text(table.read_text(encoding="utf-8").replace("Pasta, mostly", "Rice, mostly"), encoding="utf-8")
    _touch_later(table)
    edited = table_samples("focus", table, cache)
    assert parses == ["focus", "focus"]
    assert first[1].reference == "Pasta, mostly: it is quick." and edited[1].reference == "Rice, mostly: it is quick."
    assert len(list(cache.glob("*.json"))) == 2

    _forget(monkeypatch)
    monkeypatch.setattr(parsed_tables, "_parser_digest", lambda: "another parser")
    assert table_samples("focus", table, cache) == edited
    assert parses == ["focus", "focus", "focus"]


def test_a_damaged_kept_table_is_parsed_again_and_replaced(tmp_path, parses, monkeypatch):
    folder = make_paper_folder(tmp_path / "paper")
    table, cache = folder / "Prompts" / "FoCus.csv", tmp_path / "samples"
    parsed = table_samples("focus", table, cache)
    (kept,) = cache.glob("*.json")
    for damage in ("{not json", '{"dataset": "pec", "samples": []}', '{"dataset": "focus", "samples": [{"x": 1}]}'):
        kept.write_text(damage, encoding="utf-8")
        _forget(monkeypatch)
        assert table_samples("focus", table, cache) == parsed
    assert len(parses) == 4
    _forget(monkeypatch)
    assert table_samples("focus", table, cache) == parsed and len(parses) == 4  # the last parse was kept


def test_a_store_that_cannot_keep_the_table_still_gets_its_samples(tmp_path, parses):
    folder = make_paper_folder(tmp_path / "paper")
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the folder would be", encoding="utf-8")
    samples = table_samples("focus", folder / "Prompts" / "FoCus.csv", blocked / "samples")
    assert [s.id for s in samples] == ["focus:0", "focus:1", "focus:2"] and parses == ["focus"]


def test_the_parser_key_reads_each_parser_module_and_fails_loudly_when_one_moved(monkeypatch, scratch_module):
    from persobench.store.files import module_sources

    assert [p.name for p in module_sources(parsed_tables.PARSERS)] == [
        "records.py", "csv_io.py", "__init__.py", "tables.py", "prompt_tables.py", "paper_cells.py"]
    monkeypatch.setattr(parsed_tables, "PARSERS", (*parsed_tables.PARSERS, scratch_module("SEPARATOR = ','\n")))
    digest = parsed_tables._parser_digest.__wrapped__  # worked out once per process otherwise
    before = digest()
    scratch_module("SEPARATOR = ';'\n")
    assert digest() != before  # a changed parser: every kept table is parsed again

    monkeypatch.setattr(parsed_tables, "PARSERS", ("persobench.csv_io_moved_away",))
    with pytest.raises(ModuleNotFoundError, match="persobench.csv_io_moved_away"):
        digest()


# ---------------------------------------------------------------------------------------------
# Hardening, fourth round (issue 39): files and inputs


@pytest.fixture(autouse=True)
def _fresh_tables(monkeypatch):
    _forget(monkeypatch)  # nothing another test loaded in this process


def _edit_kept(store: RunStore, old: str, new: str) -> Path:
    """Edit the text of the one kept table the way a hand (or a disk) would: valid JSON, the right
    dataset, one reference changed."""
    (kept,) = tables_dir_of_store(store.home).glob("*.json")
    text = kept.read_text(encoding="utf-8")
    assert old in text
    kept.write_text(text.replace(old, new), encoding="utf-8")
    return kept


def test_an_edited_kept_table_is_parsed_again_never_trusted(tmp_path, monkeypatch):
    store = RunStore(tmp_path / "home")
    report = import_persobench(store, make_paper_folder(tmp_path / "paper"))
    run = store.get(report.runs[0].run_id)
    prompts_file = run.manifest.extra["import"]["prompts_file"]
    kept = _edit_kept(store, "Pasta, mostly: it is quick.", "Rice, mostly: it is slow.")

    _forget(monkeypatch)
    samples = samples_for_run(run)
    assert samples["focus:1"].reference == "Pasta, mostly: it is quick."  # the table's, not the edited file's
    parsed = {s.id: s for s in parsed_tables.parse_all("focus", source=prompts_file)}
    assert samples == parsed and all(samples[i].input_hash == parsed[i].input_hash for i in parsed)
    assert "Rice, mostly" not in kept.read_text(encoding="utf-8")  # rebuilt from the table


def test_a_kept_table_copied_under_another_tables_key_is_refused(tmp_path, monkeypatch):
    """A file of another version of the table (valid, checksummed for its own key) put in place of
    this version's is not this version's samples."""
    folder = make_paper_folder(tmp_path / "paper")
    table, cache = folder / "Prompts" / "FoCus.csv", tmp_path / "samples"
    original = table_samples("focus", table, cache)
    (first,) = cache.glob("*.json")
    table.write_text(table.read_text(encoding="utf-8").replace("Pasta, mostly", "Rice, mostly"), encoding="utf-8")
    edited = table_samples("focus", table, cache)
    (second,) = set(cache.glob("*.json")) - {first}
    second.write_bytes(first.read_bytes())  # the old version's samples under the new version's key
    _forget(monkeypatch)
    again = table_samples("focus", table, cache)
    assert again == edited and again != original
    assert again[1].reference.startswith("Rice, mostly")


def test_lexical_scores_of_an_imported_run_ignore_an_edited_kept_table(tmp_path, monkeypatch):
    """The symptom of the report: ``score`` read edited references from the kept table and stored
    other BLEU and ROUGE-1 values without a word."""
    from persobench.pipeline import score

    values = {}
    for edited in (False, True):
        store = RunStore(tmp_path / f"home-{edited}")
        _forget(monkeypatch)
        report = import_persobench(store, make_paper_folder(tmp_path / f"paper-{edited}"))
        if edited:
            _edit_kept(store, "I will walk my dogs in the hills.", "Hiking with the dogs, of course!")
        _forget(monkeypatch)
        score([r.run_id for r in report.runs], store=store, metrics=["bleu", "rouge1"])
        frames = [store.get(r.run_id).read_table("scores") for r in report.runs]
        values[edited] = sorted((f"{sid}|{m}", round(float(v), 12)) for frame in frames
                                for sid, m, v in zip(frame["sample_id"], frame["metric"], frame["value"]))
    assert values[True] == values[False] and len(values[False]) > 0
