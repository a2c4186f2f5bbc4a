"""The paper's published evaluation tables: the repository holds them as .xlsx (what fetch-paper
unpacks); the reader gives the same figures as the hand-converted CSV copies."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from persobench.datasets.published import (PublishedCell, PublishedTableError, published_table,
                                           published_table_path, read_published_table)

HEADER = ["Model", "BLEU", "METEOR", "Failure Ratio", "UniEval Overall"]
ROWS = [["Llama3-1-8B-Instruct", "0.02 ± 0.08", "0.11 ± 0.14\t", "0.448 ± 0.00", "0.74 ± 0.7"],
        ["gemini-1.5-pro", "", None, "0.09 ± 0.00", "-0.22 ± 0.87"]]


def write_xlsx(path: Path, rows: list[list]) -> Path:
    """A workbook as pandas' to_excel writes one: one sheet, text cells."""
    from openpyxl import Workbook

    workbook = Workbook()
    sheet = workbook.active
    for row in rows:
        sheet.append(row)
    path.parent.mkdir(parents=True, exist_ok=True)
    workbook.save(path)
    return path


def test_an_xlsx_only_folder_yields_the_published_figures(tmp_path: Path) -> None:
    write_xlsx(tmp_path / "Evaluations" / "FoCus-COT-results.xlsx", [HEADER, *ROWS])
    assert published_table_path(tmp_path, "FoCus", "cot").suffix == ".xlsx"
    table = published_table(tmp_path, "FoCus", "cot")
    assert table["Llama3-1-8B-Instruct"]["METEOR"] == PublishedCell(0.11, 0.14)  # the hand-edit tab is fine
    assert table["Llama3-1-8B-Instruct"]["Failure Ratio"] == PublishedCell(0.448, 0.0)
    assert table["gemini-1.5-pro"]["BLEU"] is None and table["gemini-1.5-pro"]["METEOR"] is None
    assert table["gemini-1.5-pro"]["UniEval Overall"] == PublishedCell(-0.22, 0.87)
    with pytest.raises(PublishedTableError, match="FoCus-results.xlsx: no published table"):
        published_table(tmp_path, "FoCus", "vanilla")


def test_a_bad_cell_names_file_row_and_column(tmp_path: Path) -> None:
    path = write_xlsx(tmp_path / "Evaluations" / "FoCus-results.xlsx",
                      [HEADER, ROWS[0], ["gpt-4o-mini", "0.01 ± 0.01", "n/a", "0.003 ± 0.00", ""]])
    with pytest.raises(PublishedTableError) as info:
        read_published_table(path)
    assert str(info.value) == f"{path}: row 3, column 'METEOR': expected 'mean ± std', got 'n/a'"
    (tmp_path / "broken.xlsx").write_bytes(b"not a zip")
    with pytest.raises(PublishedTableError, match="broken.xlsx: not a readable .xlsx workbook"):
        read_published_table(tmp_path / "broken.xlsx")


def test_a_blank_cell_the_ranking_reads_is_named_not_a_traceback(tmp_path: Path) -> None:
    """The paper's ranking reads five columns of every ranked model; a blank one used to raise
    AttributeError ('NoneType' object has no attribute 'mean')."""
    from persobench.aggregate.published_ranking import PAPER_RANKING_INPUTS, PAPER_RANKING_MODELS, paper_ranking

    columns = list(PAPER_RANKING_INPUTS.values())
    rows = [[model, *("0.5 ± 0.1" for _ in columns)] for model in PAPER_RANKING_MODELS.values()]
    rows[1][columns.index("C Score") + 1] = ""
    path = write_xlsx(tmp_path / "Evaluations" / "FoCus-results.xlsx", [["Model", *columns], *rows])
    with pytest.raises(PublishedTableError) as info:
        paper_ranking(str(tmp_path), "vanilla")
    assert str(info.value) == f"{path}: model {rows[1][0]!r} has no 'C Score' figure, which the paper's ranking reads"


@pytest.mark.reference
def test_xlsx_built_from_the_published_csv_tables_read_the_same(reference_dir: Path, tmp_path: Path) -> None:
    """Every published CSV table (converted by hand from the repository's .xlsx) written back as a
    workbook: the reader gives identical figures from either, cell for cell."""
    tables = sorted((reference_dir / "Evaluations").glob("*-results.csv"))
    assert tables, "no published CSV tables"
    compared = 0
    for table_csv in tables:
        with open(table_csv, newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
        workbook = write_xlsx(tmp_path / "Evaluations" / table_csv.with_suffix(".xlsx").name, rows)
        from_csv, from_xlsx = read_published_table(table_csv), read_published_table(workbook)
        assert from_xlsx == from_csv
        compared += sum(len(cells) for cells in from_csv.values())
        stem, mode = table_csv.name.removesuffix("-results.csv"), "vanilla"
        if stem.endswith("-COT"):
            stem, mode = stem.removesuffix("-COT"), "cot"
        assert published_table(tmp_path, stem, mode) == from_csv  # the xlsx is preferred when both exist
    assert compared >= 2 * 8 * 20


# ---- the paper's ranking (plots_and_ranking.ipynb) ---------------------------------------------

#: What plots_and_ranking.ipynb printed (its "Vanilla Ranking" and "COT Ranking" tables).
PRINTED_RANKING = {
    "vanilla": [("GPT-3.5 Turbo", 37.36), ("GPT-4.0 Mini", 35.57), ("GPT-4 Turbo", 34.19), ("Gemini 1.5 Pro", 28.19),
                ("Gemma 7B", 20.63), ("Mistral 7B", 14.63), ("Llama-3.1 8B", 14.02), ("Qwen2 7B", 11.6)],
    "cot": [("Llama-3.1 8B", 47.16), ("GPT-4.0 Mini", 43.4), ("GPT-3.5 Turbo", 42.15), ("Mistral 7B", 41.93),
            ("Gemma 7B", 40.59), ("GPT-4 Turbo", 38.39), ("Qwen2 7B", 34.0), ("Gemini 1.5 Pro", 33.19)],
}


@pytest.mark.parametrize("mode", ["vanilla", "cot"])
def test_the_papers_ranking_is_reproduced_from_its_typed_inputs_and_recomputed_from_the_cells(reference_dir, mode):
    from persobench.aggregate.published_ranking import paper_ranking

    ranking = paper_ranking(str(reference_dir), mode)
    assert list(zip(ranking["notebook name"], ranking["published score"])) == PRINTED_RANKING[mode]
    assert list(ranking["published rank"]) == list(range(1, 9))
    recomputed = ranking.sort_values("recomputed rank")["notebook name"].tolist()
    if mode == "vanilla":
        assert recomputed == [name for name, _ in PRINTED_RANKING[mode]]
    else:  # ranks 2-4 move: GPT-3.5 Turbo, Mistral 7B, GPT-4.0 Mini
        assert recomputed[1:4] == ["GPT-3.5 Turbo", "Mistral 7B", "GPT-4.0 Mini"]
        assert recomputed[:1] + recomputed[4:] == ["Llama-3.1 8B", "Gemma 7B", "GPT-4 Turbo", "Qwen2 7B", "Gemini 1.5 Pro"]
    differs = dict(zip(ranking["notebook name"], ranking["differs"]))
    # x10 for most models (harmless), not for Gemini (and CoT Gemma): its instructability is inflated
    assert "harmless" in differs["Mistral 7B"] and "typed unscaled" in differs["Gemini 1.5 Pro"]


@pytest.mark.parametrize("mode", ["vanilla", "cot"])
def test_every_typed_input_that_is_not_its_cell_is_flagged_with_whether_it_moves_a_rank(reference_dir, mode):
    """Every input plots_and_ranking.ipynb typed that is not its cell: the x10 failure ratios flagged
    harmless, the unscaled ones (vanilla Gemini, CoT Gemma and Gemini) with the instructability they
    inflate, the CoT aspects with their cells; only CoT GPT-4o-mini's coherence moves ranks on its own."""
    from persobench.aggregate.published_ranking import paper_ranking_inputs

    inputs = paper_ranking_inputs(str(reference_dir), mode)
    failures = inputs[inputs["input"] == "failure ratio"].set_index("notebook name")
    unscaled = {"vanilla": {"Gemini 1.5 Pro": "instructability 0.95 instead of 0.51"},
                "cot": {"Gemma 7B": "instructability 0.94 instead of 0.45",
                        "Gemini 1.5 Pro": "instructability 0.94 instead of 0.36"}}[mode]
    for name, how in unscaled.items():
        assert failures.loc[name, "how"].startswith("typed unscaled") and failures.loc[name, "how"].endswith(how)
    harmless = failures[failures["how"].str.endswith("harmless")]
    assert set(harmless.index) | set(unscaled) == set(failures.index)
    assert (harmless["typed"] - harmless["cell"] * 10).abs().max() < 0.05  # 0.435 as 4.35, 0.003 as 0
    aspects = inputs[inputs["input"] != "failure ratio"]
    if mode == "vanilla":
        assert aspects.empty and not inputs["changes rank"].any()
    else:
        assert sorted(zip(aspects["notebook name"], aspects["input"], aspects["typed"], aspects["cell"].round())) == [
            ("GPT-3.5 Turbo", "coherence", 41, 45), ("GPT-3.5 Turbo", "persona coverage", 48, 52),
            ("GPT-4 Turbo", "coherence", 48, 45), ("GPT-4.0 Mini", "coherence", 45, 37)]
        moving = inputs[inputs["changes rank"]]
        assert list(zip(moving["notebook name"], moving["input"])) == [("GPT-4.0 Mini", "coherence")]
        assert moving["rank moves"].iloc[0] == "Mistral 7B 4 -> 3, GPT-3.5 Turbo 3 -> 2, GPT-4.0 Mini 2 -> 4"


def test_the_pinned_figures_slips_are_named(reference_dir):
    """The CoT engagingness bars draw GPT-4o-mini's and GPT-4 Turbo's values swapped (2.54 vs 3.0,
    the cells the other way round); the CoT radar draws the typed coherence and persona coverage."""
    from persobench.aggregate.published_ranking import paper_figure_slips
    from persobench.datasets.published import published_table

    slips = paper_figure_slips()
    cot = published_table(reference_dir, "FoCus", "cot")
    column = {"engagingness": ("UniEval Engagingness", 1), "coherence": ("UE Score", 100),
              "persona coverage": ("Persona Distance", 100)}
    for slip in slips.itertuples():
        name, scale = column[slip.quantity]
        assert slip.cell == pytest.approx(cot[slip.model][name].mean * scale) and slip.drawn != slip.cell
    bars = slips[slips["quantity"] == "engagingness"].set_index("model")
    assert bars.loc["gpt-4o-mini", "drawn"] == bars.loc["gpt-4-turbo", "cell"] == 2.54
    assert bars.loc["gpt-4-turbo", "drawn"] == bars.loc["gpt-4o-mini", "cell"] == 3.0
