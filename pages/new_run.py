"""New run: choose datasets, models, modes, a sample limit and the metric profile; launch in the
background; follow progress (starting, running with an ETA, then done with a link to the results,
cancelled or failed with its error line); cancel; resume.

The run executes in a separate, detached process (``persobench.jobs.JobManager``): reruns of
this page, closing the tab or a second click neither stop it nor start it twice. API keys are read
from the app's environment by that process; this page never asks for, stores or shows one.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from persobench.app.page_cache import current_home
from persobench.app.chrome import app_environment, page_setup
from persobench.app.forms import config_widgets
from persobench.app.judge_form import judge_form, show_estimate
from persobench.config import GenerationConfig
from persobench.app.text import md_escape
from persobench.app.widgets import job_card
from persobench.app.loaders import batch_listing
from persobench.jobs import BUILTIN_MODEL_CHOICES, JobManager, launch_steps, LaunchChoice, plan_launch, registry_models
from persobench.jobs import local_time
from persobench.jobs import TEMPLATE_CHOICES
from persobench.providers import PAPER_PRESETS

page_setup()
st.title("New run")

home = current_home()
jobs = JobManager(home)

from persobench.datasets import dataset_names, get_dataset_info  # noqa: E402
from persobench.providers import PROVIDERS  # noqa: E402

names = dataset_names()
registry, registry_note = registry_models(home)
if "custom_models" not in st.session_state:
    st.session_state["custom_models"] = {}
custom: dict[str, str] = st.session_state["custom_models"]

with st.container(border=True):
    c1, c2 = st.columns(2)
    chosen_datasets = c1.multiselect(
        "Datasets", names, default=["sample"] if "sample" in names else [], key="new_datasets",
        help="The paper's tables need $PERSOBENCH_REFERENCE; hub datasets need the internet.",
        format_func=lambda n: f"{n} ({get_dataset_info(n).kind})",
    )
    model_choices = list(dict.fromkeys([*BUILTIN_MODEL_CHOICES, *PAPER_PRESETS, *registry, *custom]))
    chosen_models = c2.multiselect("Models", model_choices, default=["baseline:reference"], key="new_models",
                                   help="Built-in offline models and baselines, the paper's eight models (a "
                                        "-vllm name talks to a vLLM server), names from the models file, and "
                                        "models you add below.")
    c2.caption(md_escape(registry_note))
    with st.expander("Add a model by provider, name and base URL"):
        a1, a2, a3 = st.columns([1, 2, 2])
        provider = a1.selectbox("Provider", PROVIDERS.names(), index=PROVIDERS.names().index("openai"),
                                key="new_provider")
        model_name = a2.text_input("Model", placeholder="gpt-4o-mini, llama3.1:8b, …", key="new_model_name")
        base_url = a3.text_input("Base URL (OpenAI-compatible servers)", placeholder="http://localhost:11434/v1",
                                 key="new_base_url")
        st.caption("Keys come from the app's environment (OPENAI_API_KEY, ANTHROPIC_API_KEY, or the variable "
                   "named in the models file); they are never entered or shown here.")

        def add_model() -> None:
            spec = f"{st.session_state['new_provider']}:{st.session_state['new_model_name'].strip()}"
            custom[spec] = st.session_state["new_base_url"].strip()
            st.session_state["new_models"] = list(dict.fromkeys([*st.session_state.get("new_models", []), spec]))
            st.session_state["new_model_name"] = ""

        st.button("Add model", key="new_add_model", disabled=not model_name.strip(), on_click=add_model)
    d1, d2, d3, d4, d5 = st.columns(5)
    chosen_modes = d1.multiselect("Modes", ["vanilla", "cot"], default=["vanilla"], key="new_modes")
    profile = d4.selectbox("Metric profile", ["offline", "standard", "(do not score)"], key="new_profile",
                           help="offline: packaged models, no network. standard: the paper's models from the hub.")
    # limit, seed, requests in flight: GenerationConfig's widgets, checked by its fields (a bad one said under it)
    run_fields, run_errors = config_widgets(GenerationConfig, "new", {"limit": d2, "seed": d3, "concurrency": d5})
    limit, seed, concurrency = run_fields.get("limit"), run_fields.get("seed", 0), run_fields.get("concurrency", 8)
    judge, judge_ok = judge_form("new")  # a bad judge field keeps Launch disabled

t1, t2, t3 = st.columns([3, 1, 1])
template = t1.selectbox(
    "Prompt template", TEMPLATE_CHOICES, key="new_template",
    format_func=lambda t: TEMPLATE_CHOICES[t],
    help="The paper's protocol sends its closed-source prompt to API models and its open-source prompt, as "
         "raw text without a chat template, to local models; persobench is PersoBench's own wording.")
flags, _ = config_widgets(GenerationConfig, "new", {"structured": t2, "batch": t3})
structured, batch = flags["structured"], flags["batch"]
choices = [LaunchChoice(d, m, mode, custom.get(m) or None, template or None, structured, batch)
           for d in chosen_datasets for m in chosen_models for mode in chosen_modes]
if not choices:
    st.info("Pick at least one dataset, one model and one mode to see the estimate.")
elif run_errors:  # said under their widgets; nothing to estimate or launch until they are fixed
    st.button("Launch", type="primary", disabled=True, key="new_launch")
else:
    key_env = app_environment()
    plans = plan_launch(home, choices, limit=limit, seed=seed, env=key_env)
    table = pd.DataFrame(plans)
    shown = table[["dataset", "model", "mode", "template", "structured", "batch", "samples", "requests", "cached",
                   "prompt_tokens", "max_cost_usd", "batch_cost_usd", "problem"]]
    st.subheader("Before launching")
    st.dataframe(
        shown, hide_index=True, width="stretch",
        column_config={
            "requests": st.column_config.NumberColumn("requests to send"),
            "cached": st.column_config.NumberColumn("cache hits"),
            "prompt_tokens": st.column_config.NumberColumn("est. prompt tokens"),
            "max_cost_usd": st.column_config.NumberColumn("est. max cost (USD)", format="$%.4f",
                                                          help="Every reply at the token limit; blank = unknown price"),
            "batch_cost_usd": st.column_config.NumberColumn("est. max cost with the batch API (USD)", format="$%.4f",
                                                            help="Blank: no batch API or unknown price"),
        },
    )
    total_cost = table["max_cost_usd"].dropna().sum()
    unknown_cost = table["max_cost_usd"].isna().any()
    n_structured = int(table["structured"].sum())
    st.caption(f"{int(table['requests'].sum())} requests to send, {int(table['cached'].sum())} served from the "
               f"cache, about {int(table['prompt_tokens'].sum()):,} prompt tokens; estimated cost at most "
               f"{total_cost:.4f} USD" + (" plus models with unknown prices." if unknown_cost else ".")
               + (f" Structured output on for {n_structured} run(s) (a separate +structured configuration)."
                  if n_structured else " Structured output: baselines ignore it." if structured else ""))
    if table["key_withheld"].any():
        st.info("A base URL typed here is not one the operator configured, so runs against it are launched "
                "without the app's API keys (local servers such as vLLM or Ollama need none). To allow a server, "
                "add it to the models file or to PERSOBENCH_KEY_HOSTS in the app's environment.")
    blocked = table[table["problem"] != ""]
    ready = [p for p in plans if not p["problem"]]
    if not blocked.empty:
        st.warning(f"{len(blocked)} combination(s) cannot start (see the problem column); "
                   f"{len(ready)} can.")
    if judge is not None and ready:
        from persobench.jobs import estimate_for_launch

        show_estimate(*estimate_for_launch(home, judge, ready, limit=limit, seed=seed),
                      note="Replies are not written yet: each sample's reference stands in for its reply.", judge=judge)
    if "local:smollm2" in chosen_models:
        st.caption("local:smollm2 runs on this machine's CPU, 8 samples per forward pass: about 2.3x the "
                   "one-at-a-time speed of roughly 25 tokens per second on 2 cores, so a few seconds per reply.")
    if st.button("Launch", type="primary", disabled=not ready or not judge_ok or bool(run_errors), key="new_launch"):
        steps = launch_steps(ready, limit=limit, seed=seed, concurrency=concurrency,
                             profile=None if profile == "(do not score)" else profile,
                             judge=judge, home=home, env=key_env)
        title = f"{len(ready)} run(s): " + ", ".join(sorted({p['dataset'] for p in ready}))
        job_id, started = jobs.launch(title, steps, env=key_env)
        if started:
            st.toast("Launched in the background.")
        else:
            st.info("This exact run is already going; its progress is below.")


@st.fragment(run_every=2.0)
def show_jobs() -> None:
    statuses = jobs.jobs()
    listing = batch_listing(home)
    for problem in listing.problems:  # a damaged batch.json: one line naming it, the other batches listed
        st.warning(md_escape(problem))
    batches = listing.rows
    if batches:
        st.subheader("Batches")
        st.caption("Submitted to the providers' batch APIs, as the runs' batch.json records them (a run waits for "
                   "its batch and caches every reply when it ends; running it again collects a batch left waiting).")
        shown = pd.DataFrame(batches[:20])
        for column in ("submitted", "updated"):  # stored in UTC; shown in the browser's time zone
            shown[column] = shown[column].map(lambda stamp: local_time(str(stamp), st.context.timezone))
        st.dataframe(shown, hide_index=True, width="stretch")
    st.subheader("Runs launched from the app")
    if not statuses:
        st.caption("Nothing launched yet. Runs started from the command line (`python -m persobench run`) "
                   "appear on the other pages when they finish.")
        return
    for status in statuses[:20]:
        job_card(jobs, status)


show_jobs()
