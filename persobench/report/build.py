"""What a report holds, gathered from the store: the leaderboards (:mod:`persobench.aggregate`, never
recomputed here), the failure taxonomy and a few dialogues with every run's reply. Part of
:mod:`persobench.report`; :mod:`persobench.report.page` renders it."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from persobench.errors import ConfigurationError, PersoBenchError
from persobench.records import natural_key
from persobench.core.secrets import redact
from persobench.store.run_store import RunStore
from persobench.store.files import read_arrow
from persobench.datasets import reference_dir, some_samples

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from persobench.aggregate import Results

#: Reply statuses in the order the taxonomy lists them (``ok`` first, then the failures).
STATUS_ORDER = ("ok", "truncated", "invalid_json", "missing_field", "empty", "refused", "api_error")
MODES = ("vanilla", "cot")


@dataclass(frozen=True)
class ReportOptions:
    """Which boards and dialogues a report holds, and how its numbers are made (as ``leaderboard``)."""

    datasets: tuple[str, ...] = ()
    """Datasets to report on; empty: every dataset with a completed run."""
    modes: tuple[str, ...] = ()
    """Prompting modes (vanilla, cot); empty: both."""
    profile: str = "offline"
    """The scoring profile whose numbers the boards show."""
    invalid: str = "worst"
    """Invalid replies scored with each metric's worst value (the paper's) or excluded."""
    include_incomplete: bool = False
    """Also aggregate runs that did not complete."""
    side_by_side: bool = False
    """One board per dataset and mode with every protocol in the row labels."""
    all_samples: bool = False
    """Aggregate each run over all of its samples instead of the ids its board shares."""
    dialogues: int = 3
    """How many dialogues per dataset to show when ``sample_ids`` is empty."""
    sample_ids: tuple[str, ...] = ()
    """Exactly these dialogues (sample ids such as ``focus:12``) instead of the first ``dialogues``."""


@dataclass(frozen=True)
class Reply:
    """One run's reply to a dialogue (untrusted text)."""

    model: str
    """The run's model label as its board shows it."""
    mode: str
    """vanilla or cot."""
    protocol: str
    """The run's protocol label."""
    status: str
    """``ok`` or why the reply is invalid."""
    text: str
    """The parsed reply (credentials redacted); empty when the run has none for the sample."""
    raw: str = ""
    """What the model wrote, for an invalid reply (credentials redacted): why it did not parse."""


@dataclass(frozen=True)
class Dialogue:
    """A dialogue of a dataset with every reported run's reply to it."""

    sample_id: str
    """The sample's stable id."""
    dataset: str
    """Its dataset."""
    personas: tuple[tuple[str, tuple[str, ...]], ...]
    """(speaker, persona sentences) of each persona; empty when the dataset cannot be read here."""
    context: tuple[tuple[str, str], ...]
    """(speaker, utterance) of the dialogue so far."""
    reference: str
    """The gold reply ("" when unknown)."""
    note: str
    """Why the dialogue's text is missing, or ""."""
    replies: tuple[Reply, ...]
    """One per run of the reported boards that answered it."""


@dataclass(frozen=True)
class BoardSection:
    """One leaderboard as the other exports lay it out, with the board rows its charts are drawn from."""

    layout: dict[str, Any]
    """:func:`persobench.aggregate.exports.board_sections` entry: title, header, rows, notes."""
    board: "pd.DataFrame"
    """The board's rows of :func:`persobench.aggregate.leaderboard` (one per run and metric)."""


@dataclass(frozen=True)
class Report:
    """Everything a report shows, before rendering."""

    options: ReportOptions
    """What was asked for."""
    sections: tuple[BoardSection, ...]
    """The leaderboards, dataset by dataset, mode by mode, protocol by protocol."""
    failures: "pd.DataFrame"
    """Reply statuses per run: dataset, mode, protocol, model, n, then one count column per status."""
    dialogues: tuple[Dialogue, ...]
    """The chosen dialogues."""
    skipped_runs: tuple[tuple[str, str], ...] = field(default=())
    """(folder, reason) of unreadable runs that were left out."""


def build_report(store: "RunStore", options: ReportOptions) -> Report:
    """Gather a report's content from ``store``. A dataset, mode or sample id with no run is refused
    with a one-line :class:`ConfigurationError`."""
    from persobench import aggregate
    from persobench.aggregate.exports import board_sections

    if options.dialogues < 0:
        raise ConfigurationError(f"dialogues: expected a count >= 0, got {options.dialogues}")
    for mode in options.modes:
        if mode not in MODES:
            raise ConfigurationError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
    results = aggregate.load_results(store, profile=options.profile, include_incomplete=options.include_incomplete)
    if results.empty:
        raise ConfigurationError(f"no completed runs with generations in {store.runs_dir}; "
                                 "import (import-persobench) or generate runs first")
    frame = results.frame
    boards_present = {(str(d), str(m)) for d, m in frame[["dataset", "mode"]].drop_duplicates().itertuples(index=False)}
    known = sorted({dataset for dataset, _ in boards_present})
    for dataset in options.datasets:
        if dataset not in known:
            raise ConfigurationError(f"dataset {dataset!r}: no runs; runs exist for: {', '.join(known)}")
    datasets = list(dict.fromkeys(options.datasets)) or known
    modes = list(dict.fromkeys(options.modes)) or list(MODES)
    sections: list[BoardSection] = []
    boards = []
    for dataset in datasets:
        for mode in modes:
            if (dataset, mode) not in boards_present:
                continue
            arguments: dict[str, Any] = dict(dataset=dataset, mode=mode, invalid=options.invalid, profile=options.profile,
                             side_by_side=options.side_by_side, all_samples=options.all_samples)
            board = aggregate.leaderboard(results, **arguments)
            overall = aggregate.overall_with_ci(results, board=board, **arguments)  # ranks the score with its CI
            boards.append(board)
            for layout in board_sections(board, overall):
                rows = board[(board["board"] == layout["board"]) & (board["profile"] == layout["profile"])]
                sections.append(BoardSection(layout, rows))
    if not sections:
        raise ConfigurationError(f"no run of {', '.join(datasets)} in mode {', '.join(modes)}")
    report = Report(options, tuple(sections), failure_taxonomy(results, datasets, modes),
                    tuple(_dialogues(store, boards, options)), tuple(results.skipped_runs))
    return without_local_paths(report, local_paths(store, known))


def local_paths(store: "RunStore", datasets: list[str]) -> list[tuple[str, str]]:
    """(a path of this machine, what a shared report says instead), longest first: a user file dataset
    (named by its path) by its file name, then the reference folder, the store, the working folder and
    the home folder by the variable or mark that stands for them."""
    pairs: dict[str, str] = {}
    for name in datasets:
        if os.sep in name:
            pairs[name] = Path(name).name
            pairs.setdefault(str(Path(name).resolve()), Path(name).name)
    prompts = os.environ.get("PERSOBENCH_PROMPTS")
    roots = [(reference_dir(), "$PERSOBENCH_REFERENCE"), (store.home, "$PERSOBENCH_HOME"), (Path.cwd(), "."),
             (Path.home(), "~")] + ([(Path(prompts), "$PERSOBENCH_PROMPTS")] if prompts else [])
    for path, shown in roots:
        for form in (str(path), str(path.absolute()), str(path.resolve())):
            if len(form.rstrip(os.sep)) > 1:
                pairs.setdefault(form.rstrip(os.sep), shown)
    return sorted(pairs.items(), key=lambda pair: -len(pair[0]))


def without_local_paths(report: Report, paths: list[tuple[str, str]]) -> Report:
    """``report`` with every path of ``paths`` in the text it shows (titles, rows, notes, model labels,
    statuses, dialogues, replies, skipped runs) replaced: a shared report names no folder of this
    machine. A path is replaced only whole (followed by ``/``, a space, punctuation or the end)."""
    import pandas as pd

    if not paths:
        return report
    pattern = re.compile("|".join(re.escape(path) for path, _ in paths) + r"""(?=$|[/\s'"),;:\]])""")
    shown = dict(paths)

    def public(value: Any) -> Any:
        return pattern.sub(lambda m: shown[m.group(0)], value) if isinstance(value, str) else value

    def layout(section: BoardSection) -> BoardSection:
        entries = {key: public(value) for key, value in section.layout.items() if isinstance(value, str)}
        entries.update(header=[public(h) for h in section.layout["header"]], notes=[public(n) for n in section.layout["notes"]],
                       rows=[[public(cell) for cell in row] for row in section.layout["rows"]])
        board = section.board.assign(model=section.board["model"].astype(str).map(public))
        return BoardSection({**section.layout, **entries}, board)

    def dialogue(item: Dialogue) -> Dialogue:
        replies = tuple(dataclasses.replace(r, **{f: public(getattr(r, f)) for f in ("model", "protocol", "text", "raw")})
                        for r in item.replies)
        return dataclasses.replace(item, dataset=public(item.dataset), note=public(item.note), replies=replies,
                                   reference=public(item.reference),
                                   context=tuple((public(s), public(text)) for s, text in item.context),
                                   personas=tuple((public(s), tuple(map(public, lines))) for s, lines in item.personas))

    failures = report.failures.copy()
    for column in failures.columns:
        if not pd.api.types.is_numeric_dtype(failures[column]):
            failures[column] = failures[column].astype(object).map(public)
    return dataclasses.replace(report, sections=tuple(map(layout, report.sections)), failures=failures,
                               dialogues=tuple(map(dialogue, report.dialogues)),
                               skipped_runs=tuple((public(a), public(b)) for a, b in report.skipped_runs))


def failure_taxonomy(results: "Results", datasets: list[str], modes: list[str]) -> "pd.DataFrame":
    """How each run's replies ended (over all of its samples): dataset, mode, protocol, model, n and one
    count column per status seen (the known ones in :data:`STATUS_ORDER`, then any other)."""
    import pandas as pd

    frame = results.frame
    keys = ["dataset", "mode", "protocol", "model", "run_id"]
    rows = frame[frame["dataset"].isin(datasets) & frame["mode"].isin(modes)]
    # One row per reply before anything becomes text: the results table has a row per metric too.
    rows = rows[keys + ["sample_id", "status"]].drop_duplicates(["run_id", "sample_id"]).astype(str)
    counts = pd.crosstab([rows[k] for k in keys], rows["status"])
    seen = list(counts.columns)
    columns = [s for s in STATUS_ORDER if s in seen] + sorted(s for s in seen if s not in STATUS_ORDER)
    counts = counts[columns]
    table = counts.assign(n=counts.sum(axis=1)).reset_index()
    table = table[keys + ["n"] + columns].sort_values(keys).drop(columns="run_id").reset_index(drop=True)
    table.columns.name = None
    return table


def _dialogues(store: "RunStore", boards: list["pd.DataFrame"], options: ReportOptions) -> list[Dialogue]:
    """The chosen dialogues of each reported dataset with every reported run's reply. The dialogues are
    chosen on the sample ids each run answered; only their replies are read and redacted (a report
    shows a few dialogues of runs that answered thousands)."""
    import pandas as pd

    runs = pd.concat(boards, ignore_index=True).drop_duplicates("run_id")
    answered = {run.run_id: _answered(store, str(run.run_id)) for run in runs.itertuples()}
    wanted = list(dict.fromkeys(options.sample_ids))
    found: set[str] = set()
    dialogues: list[Dialogue] = []
    for dataset, group in runs.groupby("dataset", sort=False):
        sets = [answered[run_id] for run_id in group["run_id"]]
        if wanted:
            ids = [i for i in wanted if any(i in ids for ids in sets)]
        else:
            common = set.intersection(*sets) if sets else set()
            ids = sorted(common or set.union(*sets), key=natural_key)[:options.dialogues]
        found.update(ids)
        replies = {run_id: _replies(store, run_id, ids) for run_id in group["run_id"]} if ids else {}
        texts, note = _sample_texts(str(dataset), ids)
        for sample_id in ids:
            answers = tuple(
                Reply(str(run.model), str(run.mode), str(run.protocol), *replies[run.run_id][sample_id])
                for run in group.itertuples() if sample_id in replies[run.run_id])
            personas, context, reference = texts.get(sample_id, ((), (), ""))
            dialogues.append(Dialogue(sample_id, str(dataset), personas, context, reference,
                                      "" if sample_id in texts else note, answers))
    missing = [i for i in wanted if i not in found]
    if missing:
        raise ConfigurationError(f"sample id(s) {', '.join(missing)}: no reported run answered them")
    return dialogues


def _generations(store: "RunStore", run_id: str, columns: list[str]) -> "pa.Table | None":
    """Those of ``columns`` a run's generations table has, as Arrow (``None`` when unreadable)."""
    try:
        return read_arrow(store.get(run_id).table_path("generations"), columns)
    except PersoBenchError:
        return None


def _answered(store: "RunStore", run_id: str) -> set[str]:
    """The sample ids a run has a reply for (empty when its table is unreadable)."""
    table = _generations(store, run_id, ["sample_id"])
    return set() if table is None else set(map(str, table.column("sample_id").to_pylist()))


def _replies(store: "RunStore", run_id: str, ids: list[str]) -> dict[str, tuple[str, str, str]]:
    """sample id -> (status, reply text, raw output of an invalid reply) of one run's generations, for
    the samples ``ids`` (a sample's last row counts; empty when unreadable)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = _generations(store, run_id, ["sample_id", "status", "response", "raw_text"])
    if table is None or "sample_id" not in table.column_names:
        return {}
    sample_ids = table.column("sample_id").cast(pa.string())
    rows = table.filter(pc.is_in(sample_ids, value_set=pa.array(ids, type=pa.string()))).to_pydict()
    nothing = [None] * len(rows["sample_id"])
    statuses = rows.get("status", nothing)
    return {str(sid): (str(status), _text(text), "" if status == "ok" else _text(raw))
            for sid, status, text, raw in zip(rows["sample_id"], statuses, rows.get("response", nothing),
                                              rows.get("raw_text", nothing))}


def _text(value: Any) -> str:
    return "" if value is None or value != value else redact(str(value))


def _sample_texts(dataset: str, ids: list[str]) -> tuple[dict[str, tuple], str]:
    """sample id -> (personas, context, reference) of the dataset's samples, and why none could be read."""
    if not ids:
        return {}, ""

    try:
        samples = some_samples(dataset, ids)
    except PersoBenchError as exc:  # its message names local files: the note says what to do instead
        hint = ("set PERSOBENCH_REFERENCE to the paper's data when making the report" if "PERSOBENCH_REFERENCE"
                in str(exc) else "make the report where the dataset's file can be read")
        return {}, f"the dialogue's text is not available here: the dataset could not be loaded ({hint})"
    texts = {}
    for sample_id in ids:
        sample = samples.get(sample_id)
        if sample is not None:
            texts[sample_id] = (tuple((p.speaker, tuple(p.sentences)) for p in sample.personas),
                                tuple((t.speaker, t.text) for t in sample.context), sample.reference)
    return texts, "this sample is not in the dataset as it loads here"

