"""Data: the registered datasets with sizes and examples, the runs in the store, downloading the
paper's published data, and importing a folder in the layout of the paper's repository (both in the
background)."""

from __future__ import annotations

import os

import streamlit as st

from persobench.app.page_cache import current_home, current_state
from persobench.app.chrome import empty_store_notice, page_setup
from persobench.app.loaders import dataset_samples, dataset_table, import_preview, runs_table, store_problems
from persobench.app.text import md_escape
from persobench.app.widgets import job_card, show_sample
from persobench.datasets import PAPER_ARCHIVE, download_progress, fetched_reference, paper_manifest
from persobench.jobs import JobManager, fetch_paper_steps, import_steps

page_setup()
st.title("Data")

tab_datasets, tab_runs, tab_import = st.tabs(["Datasets", "Runs in the store", "Import published results"])

with tab_datasets:
    table = dataset_table()
    st.dataframe(table, hide_index=True, width="stretch", height=36 * (len(table) + 1) + 3,
                 column_config={"samples": st.column_config.NumberColumn("samples", format="%d"),
                                "description": st.column_config.TextColumn(width="large")})
    st.caption("The paper's five tables are read from `$PERSOBENCH_REFERENCE/Prompts` (a checkout of the "
               "paper's repository). Any .csv or .jsonl file with the columns personas, context and "
               "act_response can be used by path: `python -m persobench run --dataset my.csv`.")
    loadable = [d for d, n in zip(table["dataset"], table["samples"]) if n == n and n]
    if loadable:
        c1, c2 = st.columns([2, 1])
        name = c1.selectbox("Examples from", loadable, key="data_examples_dataset",
                            index=loadable.index("sample") if "sample" in loadable else 0)
        count = c2.number_input("How many", min_value=1, max_value=10, value=2, key="data_examples_n")
        samples = list(dataset_samples(name).values())
        for sample in samples[: int(count)]:
            with st.container(border=True):
                show_sample(sample)

with tab_runs:
    home, sig = current_state()
    runs = runs_table(home, sig)
    if runs.empty:
        empty_store_notice()
    else:
        st.dataframe(runs.drop(columns=["has_generations"]), hide_index=True, width="stretch",
                     column_config={"has_scores": st.column_config.CheckboxColumn("scored"),
                                    "baseline": st.column_config.CheckboxColumn("baseline")})
        st.caption(f"{len(runs)} runs in {md_escape(home)}. Export one: "
                   "`python -m persobench export RUN --format csv`.")
    problems = store_problems(home, sig)
    if problems:
        st.warning(f"{len(problems)} run folder(s) could not be read:")
        for path, reason in problems:
            st.text(f"{path}: {reason}")

with tab_import:
    st.radio(
        "After importing, score with", ["lexical", "offline", "none"], horizontal=True, key="data_import_score",
        format_func={"lexical": "lexical metrics (fast: BLEU, ROUGE, Distinct, IDF overlap)",
                     "offline": "the full offline profile (BERTScore, GloVe, METEOR: slow on CPU)",
                     "none": "do not score"}.get,
    )
    st.markdown(f"**The paper's data in one step**: download {PAPER_ARCHIVE.repository} at commit "
                f"`{PAPER_ARCHIVE.commit[:12]}`, check it, unpack its prompts, replies and evaluations into "
                "the store's `reference` folder (then the default reference) and import the published runs.")
    fetched = fetched_reference(home)
    if fetched is not None:
        st.caption(f"Already fetched into {md_escape(fetched)}; fetching again replaces it.")
    st.text_input("Mirror URL (optional)", key="data_fetch_url", placeholder=PAPER_ARCHIVE.url)
    if not paper_manifest().complete:
        st.checkbox("Accept files the content manifest does not pin yet (their checksums are recorded in "
                    "FETCHED.json)", key="data_fetch_trust",
                    help="PersoBench's manifest of the pinned commit's file checksums is incomplete (it was written "
                         "offline; docs/datasets.md says how to complete it), so a download cannot be fully "
                         "verified. Without this the download is refused before it starts.")

    # Launched from on_click callbacks, which run once per click before any script pass: a click
    # must survive the rerun that takes a page opened on its own into app.py (chrome.page_setup).
    def fetch_in_background() -> None:
        url = str(st.session_state.get("data_fetch_url") or "").strip() or None
        _, started = JobManager(current_home()).launch(
            "fetch the paper's data", fetch_paper_steps(score=st.session_state["data_import_score"], url=url,
                                                        trust_unpinned=bool(st.session_state.get("data_fetch_trust"))))
        st.toast("Download started." if started else "This download is already running.")

    st.button("Download and import in the background", type="primary", key="data_fetch_go",
              on_click=fetch_in_background)
    st.divider()
    st.markdown(
        "Or import replies laid out like the paper's repository: `Prompts/*.csv`, "
        "`Responses/<dataset>/<model>[-COT].csv` and, when present, `Raw Responses/` (parsed with the paper's "
        "own post-processing). One run per dataset, model and mode; importing again is a no-op."
    )
    default = os.environ.get("PERSOBENCH_REFERENCE", "")
    folder = st.text_input("Folder", value=default, key="data_import_folder",
                           placeholder="/path/to/PersoBench (a checkout of the paper's repository)")
    if folder.strip():
        preview, problem = import_preview(folder.strip())
        if problem:
            st.warning(md_escape(problem))
        else:
            st.caption(f"{len(preview)} response files: "
                       f"{preview['dataset'].nunique()} datasets, {preview['model'].nunique()} models.")
            st.dataframe(preview, hide_index=True, width="stretch", height=240)
            def import_in_background() -> None:
                chosen = str(st.session_state["data_import_folder"]).strip()
                _, started = JobManager(current_home()).launch(
                    f"import {chosen}", import_steps(chosen, score=st.session_state["data_import_score"]))
                st.toast("Import started." if started else "This import is already running.")

            st.button("Import in the background", type="primary", key="data_import_go", on_click=import_in_background)

    @st.fragment(run_every=2.0)
    def import_jobs() -> None:
        manager = JobManager(current_home())
        for job in [j for j in manager.jobs() if j.steps and j.steps[0].kind in ("import", "fetch")][:5]:
            job_card(manager, job)
            download = download_progress(manager.home) if job.active and job.step_index == 0 else None
            if download is not None and job.steps[0].kind == "fetch":
                done, total = int(download["done"]), download.get("total")
                st.progress(min(done / total, 1.0) if total else 0.0,
                            text=f"downloaded {done / 2**20:.1f}" + (f" of {total / 2**20:.1f}" if total else "")
                            + " MiB")

    import_jobs()
