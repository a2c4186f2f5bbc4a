"""Run store: manifests, atomic Parquet tables, tolerant loading, no secrets on disk."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from persobench.store.files import atomic_write_bytes
from persobench.core.secrets import strip_secrets
from persobench.store.run_store import RunManifest, RunStore, StoreError, make_run_id


def _manifest(**overrides) -> RunManifest:
    values = dict(
        dataset="sample", sample_ids=("sample:0", "sample:1"),
        model={"provider": "openai", "model": "gpt-x", "base_url": "http://127.0.0.1:1", "api_key": "sk-SECRET"},
        mode="vanilla", template="vanilla", template_hash="abc123", parameters={"temperature": 0, "max_tokens": 110},
    )
    values.update(overrides)
    values.setdefault("run_id", make_run_id(**{k: values[k] for k in
                      ("dataset", "model", "mode", "template_hash", "sample_ids", "parameters")}))
    return RunManifest(**values)


def test_create_get_update_and_scan(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    run = store.create(_manifest())
    assert run.manifest.created_at and run.manifest.package_version
    run.update(status="completed", extra={"counts": {"ok": 2}})
    again = store.get(run.run_id)
    assert again.manifest.status == "completed" and again.manifest.extra["counts"] == {"ok": 2}
    assert again.manifest.sample_ids == ("sample:0", "sample:1")
    assert [r.run_id for r in store.runs()] == [run.run_id]
    with pytest.raises(ValueError, match="unknown run status"):
        run.update(status="exploded")


def test_secrets_never_reach_the_manifest(tmp_path: Path) -> None:
    run = RunStore(tmp_path).create(_manifest())
    text = (run.path / "manifest.json").read_text()
    assert "sk-SECRET" not in text and "api_key" not in text
    assert strip_secrets({"a": 1, "nested": {"openai_api_key": "x", "b": 2}, "Token": "t"}) == {"a": 1, "nested": {"b": 2}}


def test_run_id_is_deterministic_and_config_sensitive() -> None:
    base = _manifest()
    assert base.run_id == _manifest().run_id
    assert base.run_id != _manifest(mode="cot").run_id
    assert base.run_id != _manifest(parameters={"temperature": 0.7, "max_tokens": 110}).run_id
    # the API key is not part of the identity of a run
    key_changed = _manifest(model={**base.model, "api_key": "sk-OTHER"})
    assert key_changed.run_id == base.run_id
    assert base.run_id.startswith("sample__openai-gpt-x__vanilla__")


def test_tables_round_trip_numbers_as_numbers(tmp_path: Path) -> None:
    run = RunStore(tmp_path).create(_manifest())
    frame = pd.DataFrame({"sample_id": ["sample:0", "sample:1"], "latency": [0.25, 1.5], "status": ["ok", "empty"]})
    run.write_table("generations", frame)
    loaded = run.read_table("generations")
    pd.testing.assert_frame_equal(loaded, frame)
    assert loaded["latency"].dtype.kind == "f"
    assert not [p for p in run.path.iterdir() if p.name.endswith(".tmp")]


def test_table_read_as_lists_equals_the_frame_and_fails_as_clearly(tmp_path: Path) -> None:
    """files.read_parquet_lists (what planning reads): the frame's values as lists, only the columns
    asked for that the table has, nulls as None; a damaged or missing file names itself."""
    from persobench.store.files import read_parquet_lists

    run = RunStore(tmp_path).create(_manifest())
    frame = pd.DataFrame({"sample_id": ["sample:0", "sample:1"], "status": ["ok", "empty"],
                          "response": ["hi", None], "latency": [0.25, 1.5]})
    run.write_table("generations", frame)
    got = read_parquet_lists(run.table_path("generations"), ("sample_id", "response", "reasoning"))
    assert got == {"sample_id": ["sample:0", "sample:1"], "response": ["hi", None]}
    with pytest.raises(StoreError, match="scores.parquet: table not found"):
        read_parquet_lists(run.table_path("scores"), ("sample_id",))
    run.table_path("scores").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(StoreError, match="scores.parquet: unreadable or corrupt"):
        read_parquet_lists(run.table_path("scores"), ("sample_id",))


def test_corrupt_or_missing_tables_raise_clear_errors(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    run = store.create(_manifest())
    with pytest.raises(StoreError, match="generations.parquet: table not found"):
        run.read_table("generations")
    run.table_path("scores").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(StoreError, match="scores.parquet: unreadable or corrupt"):
        run.read_table("scores")
    run.table_path("scores").unlink()  # a damaged table makes the run unreadable (test_store_robustness)
    broken = tmp_path / "runs" / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("{not json")
    runs, problems = store.scan()
    assert [r.run_id for r in runs] == [run.run_id]
    assert problems and "corrupt manifest" in problems[0].reason and "broken" in str(problems[0].path)
    with pytest.raises(StoreError, match="no such run 'nope'"):
        store.get("nope")


def test_a_killed_writer_never_replaces_the_good_file(tmp_path: Path) -> None:
    target = tmp_path / "table.bin"
    atomic_write_bytes(target, b"good")
    # A child process starts writing 50 MB and is killed mid-way: the target must still be "good".
    code = (  # noqa: UP031 - %r quotes the paths for the child
        "import os, sys; sys.path.insert(0, %r)\n"
        "from persobench.store import files\n"
        "real = os.fsync\n"
        "def slow(fd):\n"
        "    print('writing', flush=True); import time; time.sleep(30)\n"
        "os.fsync = slow\n"
        "files.atomic_write_bytes(%r, b'x' * 50_000_000)\n"
    ) % (str(Path(__file__).resolve().parents[1]), str(target))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "writing"
    child.kill()
    child.wait()
    assert target.read_bytes() == b"good"
