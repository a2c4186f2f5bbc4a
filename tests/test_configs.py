"""The configurations' field tables (persobench/config/): every configuration survives its stored form
(a hypothesis property test drawing values from the same table: types, bounds, choices, None where
optional), the CLI and the app's form refuse the same bad value with the same line, and a judge
timeout set in the app survives job.json."""

from __future__ import annotations

import functools
import json
import shlex
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import annotated_types
import pytest
import typing_extensions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic.fields import FieldInfo

from persobench.config import ConfigModel, JudgeConfig, RetryPolicy, changed, offered_fields
from persobench.config.fields import nested_value, ui_of
from persobench.config.run_config import GenerationConfig
from persobench.errors import ConfigurationError
from persobench.metrics.judge.judge_config import resolve_judge
from persobench.scoring.score_config import ScoreConfig
from tests.fakes.fixtures import openai_server  # noqa: F401 - fixture

MODELS = [RetryPolicy, JudgeConfig, GenerationConfig]


# --- strategies from the field table -------------------------------------------------------------------


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=8) | \
        st.floats(allow_nan=False, allow_infinity=False, width=32)
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)


def annotation_strategy(annotation: Any, constraints: tuple[Any, ...] = ()) -> st.SearchStrategy[Any]:
    """Values an annotation takes, within its bounds (``Annotated`` constraints, ``Literal`` choices)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *extra = typing.get_args(annotation)
        found = list(constraints)
        for item in extra:
            found += list(item.metadata) if isinstance(item, FieldInfo) else [item]
        return annotation_strategy(base, tuple(found))
    if origin in (Union, types.UnionType):
        return st.one_of([annotation_strategy(arg, constraints) for arg in typing.get_args(annotation)])
    if origin is Literal:
        return st.sampled_from(typing.get_args(annotation))
    if annotation is type(None):
        return st.none()
    if isinstance(annotation, type) and issubclass(annotation, ConfigModel):
        return model_strategy(annotation)
    if annotation is bool:
        return st.booleans()
    bounds = {"gt": None, "ge": None, "le": None}
    for item in constraints:
        for name in bounds:
            if isinstance(item, getattr(annotated_types, name.capitalize())):
                bounds[name] = getattr(item, name)
    if annotation is int:
        low = bounds["ge"] if bounds["ge"] is not None else (bounds["gt"] + 1 if bounds["gt"] is not None else -10**9)
        return st.integers(min_value=int(low), max_value=int(bounds["le"] if bounds["le"] is not None else 2**31))
    if annotation is float:
        low = bounds["gt"] if bounds["gt"] is not None else bounds["ge"]
        return st.floats(min_value=low, max_value=bounds["le"] if bounds["le"] is not None else 1e12,
                         exclude_min=bounds["gt"] is not None, allow_nan=False, allow_infinity=False)
    if annotation is str:
        size = next((item.min_length for item in constraints if isinstance(item, annotated_types.MinLen)), 0)
        return st.text(min_size=size, max_size=20)
    if origin is tuple:
        return st.lists(annotation_strategy(typing.get_args(annotation)[0]), max_size=4).map(tuple)
    if typing_extensions.is_typeddict(annotation):  # its typed keys (each may be absent), then any others
        typed = typing.get_type_hints(annotation, include_extras=True)
        return st.fixed_dictionaries({}, optional={key: annotation_strategy(hint) for key, hint in typed.items()}) \
            .flatmap(lambda keys: st.dictionaries(st.text(max_size=8).filter(lambda key: key not in typed),
                                                  _json_values(), max_size=3).map(lambda extra: {**extra, **keys}))
    if origin is dict:
        value = typing.get_args(annotation)[1]
        return st.dictionaries(st.text(max_size=8), _json_values() if value is Any else annotation_strategy(value),
                               max_size=4)
    raise AssertionError(f"no strategy for {annotation!r}: add one (a new field type)")


def model_strategy(config_model: type[ConfigModel], **given: st.SearchStrategy[Any]) -> st.SearchStrategy[ConfigModel]:
    """A configuration with every field drawn from its table (a registry's names where the field's flag
    offers them; ``given``: a field's own strategy), checked by the model."""
    fields = {}
    for name, info in config_model.model_fields.items():
        ui = ui_of(info)
        fields[name] = given[name] if name in given else st.sampled_from(tuple(ui.choices())) \
            if ui is not None and ui.choices else annotation_strategy(info.annotation, tuple(info.metadata))
    return st.fixed_dictionaries(fields).map(config_model.model_validate)


def score_strategy(home: Path) -> st.SearchStrategy[ScoreConfig]:
    """A ScoreConfig: its judge a JudgeConfig drawn from the judge's table and resolved against ``home``
    (any model name would not resolve: the judges' models are the fake server's), a Ray address only
    with the ray executor and in its public form (the stored form keeps no credentials)."""
    judges = model_strategy(JudgeConfig, model=st.sampled_from(["openai:judge-model", "anthropic:judge-model"]),
                            max_cost=st.none(), prompt=st.none(),  # no prices, one prompt version
                            base_url=st.sampled_from([None, "http://127.0.0.1:8000/v1", "https://judge.example/v1"])) \
        .map(lambda config: resolve_judge(config, home=home))
    local = model_strategy(ScoreConfig, judge=st.none() | judges, executor=st.just("local"), ray_address=st.none())
    ray = model_strategy(ScoreConfig, judge=st.none() | judges, executor=st.just("ray"),
                         ray_address=st.sampled_from([None, "auto", "10.0.0.5:6379", "ray://head:10001"]))
    return local | ray


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_configuration_survives_its_stored_form(model, data):
    config = data.draw(model_strategy(model))
    assert model.model_validate_json(config.model_dump_json()) == config
    assert model.model_validate(json.loads(json.dumps(config.model_dump(mode="json")))) == config
    if hasattr(config, "to_dict"):  # the form resume.json and job.json hold
        assert type(config).from_dict(json.loads(json.dumps(config.to_dict()))) == config


SCORE_HOME = Path("/nonexistent/persobench-home")  # resolving a judge reads no file of its home


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=score_strategy(SCORE_HOME))
def test_a_score_configuration_survives_its_stored_form(config):
    stored = json.loads(json.dumps(config.to_dict()))
    assert ScoreConfig.from_dict(stored, home=SCORE_HOME) == config
    if config.judge is not None:
        assert stored["judge"] == config.judge.config().model_dump(mode="json")


# --- job steps: one typed request per kind, through job.json ----------------------------------------------


def request_strategy() -> st.SearchStrategy[Any]:
    """A step request of any kind, each field drawn from its table (a score step's pass and its judge
    as the user gives it, its runs ``job``, ``all`` or ids)."""
    from persobench.jobs import FetchRequest, ImportRequest, RunRequest, ScoreRequest

    passes = score_strategy(SCORE_HOME).map(lambda config: changed(config, judge=None))
    scores = model_strategy(ScoreRequest, config=passes, judge=st.none() | model_strategy(JudgeConfig))
    return st.one_of(model_strategy(RunRequest), scores, model_strategy(ImportRequest), model_strategy(FetchRequest))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=st.lists(request_strategy(), min_size=1, max_size=4), withhold=st.booleans(),
       run_id=st.none() | st.text(min_size=1, max_size=12))
def test_every_kind_of_job_step_survives_job_json(requests, withhold, run_id):
    """Steps of every kind, written to job.json as the launcher writes them and read back as the runner
    and the page read them: the same typed requests, and the same job id."""
    from persobench.jobs import JobStep, job_id_for, read_steps

    steps = [JobStep(f"step {n}", request, {"dataset": "sample"}, run_id, withhold)
             for n, request in enumerate(requests)]
    written = json.loads(json.dumps({"steps": [step.to_dict() for step in steps]}))
    again = read_steps(written, Path("job.json"))
    assert again == tuple(steps)
    assert [step.kind for step in again] == [request.kind for request in requests]
    assert job_id_for("t", again) == job_id_for("t", steps)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=score_strategy(SCORE_HOME), runs=st.sampled_from(["job", "all"]) | st.lists(st.text(min_size=1,
                                                                                              max_size=12), max_size=3))
def test_a_score_step_gives_back_the_pass_it_was_built_from(config, runs):
    """A score step keeps its judge as the user gave it; the step's process resolves it against the home
    into the very ScoreConfig the page or the CLI built."""
    from persobench.jobs.model import JobStep, score_step

    step = score_step("score", config, runs)
    again = JobStep.from_dict(json.loads(json.dumps(step.to_dict())))
    assert again == step and again.request.score_config(home=SCORE_HOME) == config
    assert again.request.chosen_runs(["r1"]) == (["r1"] if runs == "job" else None if runs in ("all", []) else runs)
    stored = step.to_dict()["config"]
    assert stored == {**config.to_dict(), "runs": runs}  # the form job.json has held since score steps were typed


#: (step in job.json, what its line names): each kind's bad field, and a bad kind.
BAD_STEPS = [
    ({"kind": "run", "config": {"dataset": "sample", "model": "openai:x", "limit": 0}}, "limit must be at least 1"),
    ({"kind": "run", "config": {"dataset": "sample", "model": "openai:x", "colour": "red"}},
     "unknown field(s) colour"),
    ({"kind": "score", "config": {"profile": "offline", "runs": "some"}}, "runs must be 'job', 'all' or a list"),
    ({"kind": "score", "config": {"judge": {"model": "openai:j", "concurrency": 0}}}, "judge_concurrency must be"),
    ({"kind": "score", "config": {"precision": "float8"}}, "precision"),
    ({"kind": "import", "config": {"folder": ""}}, "folder"),
    ({"kind": "fetch", "config": {"url": None, "trust_unpinned": "yes"}}, "trust_unpinned"),
    ({"kind": "train", "config": {}}, "kind: unknown job step kind 'train'"),
]


@pytest.mark.parametrize("step, names", BAD_STEPS, ids=[f"{s['kind']}-{n}" for n, (s, _) in enumerate(BAD_STEPS)])
def test_a_bad_job_json_is_one_line_naming_the_file_the_step_and_the_field(tmp_path, step, names):
    """Read by the runner, listed by the page and resumed: the same one line, and nothing runs."""
    from persobench.jobs import JobManager, read_steps
    from persobench.jobs.job_process import run_job

    jobs = JobManager(tmp_path / "home")
    folder = jobs.job_dir("bad-job")
    folder.mkdir(parents=True)
    good = {"label": "import", "kind": "import", "config": {"folder": str(tmp_path)}}
    spec = {"title": "bad", "home": str(tmp_path / "home"), "steps": [good, {"label": "second", **step}]}
    (folder / "job.json").write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(ConfigurationError) as caught:
        read_steps(spec, folder / "job.json")
    line = str(caught.value)
    assert line.startswith(f"{folder / 'job.json'}: step 2 (second): ") and names in line and "\n" not in line
    status = jobs.status("bad-job")
    assert status.unreadable and status.steps == () and status.message == line and not status.resumable
    with pytest.raises(ConfigurationError, match="step 2 \\(second\\)"):
        jobs.resume("bad-job")
    assert run_job(folder) == 2  # the runner reads every step before it runs one
    state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
    assert state["state"] == "failed" and state["message"] == line
    assert not (folder / "lock").exists() and jobs.status("bad-job").state == "failed"


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_the_strategies_reach_past_the_defaults(model):
    """The draws are not all defaults: each offered field takes more than one value."""
    seen: dict[str, set] = {}

    @settings(max_examples=40, deadline=None)
    @given(model_strategy(model))
    def draw(config):
        for offered in offered_fields(model):
            seen.setdefault(".".join(offered.path), set()).add(repr(nested_value(config, offered.path)))

    draw()
    assert all(len(values) > 1 for values in seen.values()), seen


# --- the CLI and the form refuse alike ---------------------------------------------------------------

#: (widget key, form value, flag, flag text): the same bad value given to the judge form and to `score`.
BAD_JUDGE_VALUES = [
    ("judge_timeout", 0.0, "--judge-timeout", "0"),
    ("judge_timeout", -5.0, "--judge-timeout", "-5"),
    ("judge_max_cost", -1.0, "--judge-max-cost", "-1"),
    ("judge_model", "   ", "--judge", " "),
]


def _form_errors(at) -> list[str]:
    return [str(e.value) for e in at.error]


@pytest.mark.parametrize("key, form_value, flag, text", BAD_JUDGE_VALUES)
def test_the_cli_and_the_form_refuse_a_bad_value_with_the_same_line(tmp_path, monkeypatch, capsys, key, form_value,
                                                                     flag, text):
    from persobench.cli import main
    from tests.test_app import open_page

    home = tmp_path / "home"
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    argv = ["--home", str(home), "score", "--judge", "openai:gpt-4o-mini", flag, text]
    if flag == "--judge":
        argv = ["--home", str(home), "score", "--judge", text]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    cli_line = err[len("error: "):].strip()

    at = open_page("pages/metrics.py")
    at.toggle(key="metrics_judge_on").set_value(True).run()
    widget = at.text_input(key=f"metrics_{key}") if isinstance(form_value, str) else at.number_input(key=f"metrics_{key}")
    (widget.input(form_value) if isinstance(form_value, str) else widget.set_value(form_value)).run()
    assert not at.exception
    shown = [line.replace("\\", "") for line in _form_errors(at)]  # the page escapes Markdown
    assert shown == [cli_line], (shown, cli_line)
    assert at.button(key="metrics_judge_launch").disabled  # Launch stays off until the field is valid
    # the field set right: the error goes and the judge form no longer blocks the launch
    widget = at.text_input(key=f"metrics_{key}") if isinstance(form_value, str) else at.number_input(key=f"metrics_{key}")
    (widget.input("openai:gpt-4o-mini") if isinstance(form_value, str) else widget.set_value(5.0)).run()
    assert _form_errors(at) == []


def test_a_judge_timeout_set_in_the_app_survives_job_json(tmp_path, monkeypatch, openai_server):
    """The judge form's timeout (key ``metrics_judge_timeout``) reaches job.json as the judge's retry
    policy and the job's judge sends with it (the form had no timeout; job.json kept none)."""
    from persobench.jobs import JobManager
    from persobench.metrics.judge.labeller import JudgeLabeller
    from tests.fakes.judge import judge_script
    from tests.test_app import open_page, wait_for
    from tests.test_judge import _sample_run

    home = tmp_path / "home"
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    _sample_run(home)
    openai_server.script = judge_script({}, default="entailment")
    at = open_page("pages/metrics.py")
    at.toggle(key="metrics_judge_on").set_value(True).run()
    at.text_input(key="metrics_judge_model").input("openai:judge-model").run()
    at.text_input(key="metrics_judge_base_url").input(openai_server.base_url).run()
    at.number_input(key="metrics_judge_timeout").set_value(5.0).run()
    at.toggle(key="metrics_judge_estimate").set_value(True).run()
    at.button(key="metrics_judge_launch").click().run()
    assert not at.exception
    jobs = JobManager(home)
    job = wait_for(lambda: (s := jobs.jobs()) and not s[0].active and s[0], timeout=180)
    assert job.state == "completed", job.message
    [folder] = (home / "jobs").iterdir()
    stored = json.loads((folder / "job.json").read_text(encoding="utf-8"))["steps"][-1]["config"]
    assert stored["judge"]["retry"]["timeout"] == 5.0
    judge = job.steps[-1].request.score_config(home=home).judge  # as the job's score step read it
    assert judge.retry.timeout == 5.0
    assert JudgeLabeller(judge).policy.timeout == 5.0  # what the job's judge requests were sent with



# --- job.json and resume.json written by the version before the field tables -----------------------------

OLD_JOB = Path(__file__).resolve().parent / "fixtures" / "jobs_v1" / "job.json"


def test_an_old_job_json_still_resumes(tmp_path, openai_server):
    """tests/fixtures/jobs_v1/job.json was written by the dataclass configurations (2a9ac24): the judge's
    timeout flat in its dict, null batch fields. Read through the typed models it runs as it did."""
    from persobench.jobs import read_steps
    from persobench.jobs.job_process import run_job
    from persobench.store.run_store import RunStore
    from tests.fakes.judge import judge_script

    home = tmp_path / "home"
    folder = home / "jobs" / "old-job"
    folder.mkdir(parents=True)
    text = OLD_JOB.read_text(encoding="utf-8").replace('"HOME"', json.dumps(str(home)))
    text = text.replace("JUDGE_URL", openai_server.base_url)
    (folder / "job.json").write_text(text, encoding="utf-8")
    openai_server.script = judge_script({}, default="entailment")

    run_step, score = read_steps(json.loads(text), OLD_JOB)
    run = run_step.request.config
    assert (run.retry.timeout, run.retry.max_attempts, run.concurrency, run.limit) == (30.0, 3, "auto", 2)
    assert score.request.judge.retry.timeout == 5.0 and score.request.judge.batch_poll == 30.0
    assert score.request.runs == "job" and score.request.config.metrics == ("c_score",)
    stored = score.to_dict()["config"]["judge"]
    assert stored["retry"]["timeout"] == 5.0 and "timeout" not in stored  # today's form: the whole retry policy

    assert run_job(folder) == 0
    state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
    assert state["state"] == "completed", state
    [run_dir] = RunStore(home).runs()
    assert run_dir.run_id == run_step.run_id  # the models give the run the id the dataclasses gave it
    scores = run_dir.read_table("scores")
    assert set(scores["metric"]) == {"c_score"} and (scores["value"] == 1.0).all()
    assert len(openai_server.requests) > 0


def test_an_old_job_resumed_from_its_card_stays_one_job(tmp_path, openai_server):
    """Resume read the old job.json in today's form, whose job id differs (the judge's retry policy is
    whole now): it started a second job and left the old card failed. It resumes in its own folder, its
    job.json rewritten in today's form."""
    from persobench.jobs import JobManager
    from tests.fakes.judge import judge_script
    from tests.test_app import wait_for

    home = tmp_path / "home"
    jobs = JobManager(home)
    folder = jobs.job_dir("old-job")
    folder.mkdir(parents=True)
    text = OLD_JOB.read_text(encoding="utf-8").replace('"HOME"', json.dumps(str(home)))
    (folder / "job.json").write_text(text.replace("JUDGE_URL", openai_server.base_url), encoding="utf-8")
    (folder / "state.json").write_text(json.dumps({"state": "failed", "step": 1}), encoding="utf-8")
    openai_server.script = judge_script({}, default="entailment")
    assert jobs.resume("old-job") == ("old-job", True)
    status = wait_for(lambda: (s := jobs.status("old-job")) and not s.active and s, timeout=180)
    assert status.state == "completed", status.message
    assert jobs.job_ids() == ["old-job"] and len(status.run_ids) == 1
    judge = json.loads((folder / "job.json").read_text(encoding="utf-8"))["steps"][1]["config"]["judge"]
    assert judge["retry"]["timeout"] == 5.0 and "timeout" not in judge


def test_an_old_resume_json_config_still_loads():
    """resume.json holds GenerationConfig.to_dict(): the dataclass's asdict form reads as the model. Its
    retry policy's ``timeout_flag`` (the flag a timeout error named, stored until the session was given
    it) is read and dropped: nothing else renamed, nothing else lost."""
    old = json.loads(OLD_JOB.read_text(encoding="utf-8"))["steps"][0]["config"]  # the same asdict form
    assert old["retry"]["timeout_flag"] == "--timeout"
    config = GenerationConfig.from_dict(old)
    assert config.to_dict() == {**old, "retry": {k: v for k, v in old["retry"].items() if k != "timeout_flag"}}


def test_the_new_run_form_checks_its_run_fields_like_run_does(tmp_path, monkeypatch, capsys):
    """New run's limit, seed and requests-in-flight widgets are GenerationConfig's (same keys, defaults);
    a bad limit is refused under its widget in `run`'s line and Launch stays disabled."""
    from persobench.cli import main
    from tests.test_app import open_page

    monkeypatch.setenv("PERSOBENCH_HOME", str(tmp_path / "home"))
    assert main(["--home", str(tmp_path / "home"), "run", "--model", "baseline:reference", "--dry-run",
                 "--limit", "-3"]) == 2
    cli_line = capsys.readouterr().err.removeprefix("error: ").strip()
    at = open_page("pages/new_run.py")
    assert (at.number_input(key="new_limit").value, at.number_input(key="new_seed").value,
            at.selectbox(key="new_concurrency").value) == (10, 0, "8")
    assert not at.button(key="new_launch").disabled
    at.number_input(key="new_limit").set_value(-3).run()
    assert not at.exception
    assert [str(e.value).replace("\\", "") for e in at.error] == [cli_line] == ["limit must be at least 1, got -3 (--limit)"]
    assert at.button(key="new_launch").disabled
    at.number_input(key="new_limit").set_value(0).run()  # 0 = all samples: no limit
    assert not at.error and not at.button(key="new_launch").disabled


def test_a_stored_retry_policy_with_its_old_timeout_flag_still_loads(tmp_path):
    """Until the session was given the flag a timeout error names, RetryPolicy stored it (``timeout_flag``)
    in resume.json and in job.json's steps: such a policy still loads, the flag dropped (the judge's
    requests name ``--judge-timeout`` whatever the stored policy says: test_llm.py)."""
    from persobench.jobs.model import JobStep
    from pydantic import ValidationError

    old = {"max_attempts": 3, "base_delay": 1.0, "max_delay": 60.0, "max_retry_after": 600.0, "timeout": 5.0,
           "timeout_flag": "--judge-timeout"}
    policy = RetryPolicy.model_validate(old)
    assert policy == RetryPolicy(max_attempts=3, timeout=5.0) == RetryPolicy.model_validate_json(json.dumps(old))
    assert "timeout_flag" not in policy.model_dump()
    judge = {"model": "openai:judge-model", "base_url": "http://127.0.0.1:9/v1", "retry": old}
    assert JudgeConfig.model_validate(judge).retry == policy
    step = JobStep.from_dict({"label": "LLM judge", "kind": "score", "config": {"judge": judge, "runs": "job"}})
    assert step.request.score_config(home=tmp_path).judge.retry == policy
    run = GenerationConfig.from_dict({"retry": {**old, "timeout_flag": "--timeout"}})
    assert run.retry == policy and run.to_dict()["retry"] == policy.model_dump(mode="json")
    with pytest.raises(ValidationError):  # any other unknown field is still refused
        RetryPolicy.model_validate({**old, "timeout_flags": "--timeout"})


# --- run's flags of a form of their own: --chat-template on/off, --option KEY=VALUE, --max-reply-bytes -------


@functools.lru_cache(maxsize=1)
def _parser():
    from persobench.cli import build_parser

    return build_parser()


def _run_config_of(args) -> GenerationConfig:
    from persobench.cli.generate import _config

    return _config(args)


def _run_config(*flags: str) -> GenerationConfig:
    return _run_config_of(_parser().parse_args(["run", *flags]))


def test_run_s_switch_dict_and_dict_key_flags_fill_the_configuration():
    assert (_run_config().chat_template, _run_config().options) == (None, {})
    assert _run_config("--chat-template", "on").chat_template is True
    assert _run_config("--chat-template", "off").chat_template is False
    config = _run_config("--option", "top_k=5", "--option", 'extra_body={"min_p": 0.1}', "--option", "stop=end",
                         "--option", "max_reply_bytes=10", "--max-reply-bytes", "2048", "--option", "top_k=6")
    # VALUE as JSON when it is JSON; a later --option of the same key wins; --max-reply-bytes wins over --option
    assert config.options == {"top_k": 6, "extra_body": {"min_p": 0.1}, "stop": "end", "max_reply_bytes": 2048}
    assert _run_config("--option", "max_reply_bytes=4096").options == {"max_reply_bytes": 4096}


@pytest.mark.parametrize("flags, line", [
    (("--option", "top_k"), "--option expects KEY=VALUE, got 'top_k'"),
    (("--option", "=5"), "--option expects KEY=VALUE, got '=5'"),
    (("--option", "max_reply_bytes=0"),
     "max_reply_bytes must be a whole number >= 1 and <= 1073741824 (bytes), got 0 (--max-reply-bytes)"),
    (("--option", "max_reply_bytes=true"),
     "max_reply_bytes must be a whole number >= 1 and <= 1073741824 (bytes), got True (--max-reply-bytes)"),
    (("--option", "max_reply_bytes=5.0"),
     "max_reply_bytes must be a whole number >= 1 and <= 1073741824 (bytes), got 5 (--max-reply-bytes)"),
    (("--max-reply-bytes", str(2**30 + 1)),
     "max_reply_bytes must be a whole number >= 1 and <= 1073741824 (bytes), got 1073741825 (--max-reply-bytes)"),
    (("--max-reply-bytes", "lots"),
     "max_reply_bytes must be a whole number >= 1 and <= 1073741824 (bytes), got 'lots' (--max-reply-bytes)"),
])
def test_a_bad_option_is_one_line_naming_its_flag(tmp_path, capsys, flags, line):
    from tests.cli_checks import one_line_error

    said = one_line_error(capsys, ["--home", str(tmp_path), "run", "--model", "baseline:reference", "--dry-run",
                                   "--no-progress", *flags])
    assert said == f"error: {line}"
    assert not (tmp_path / "runs").exists()


#: Runs of run's flags of a form of their own, as the hand-written flags planned and stored them (computed
#: on 05abb41, before those flags came from the field table): (flags, run id, first cache key, the config
#: in resume.json). The stored retry policy then also held ``"timeout_flag": "--timeout"``, dropped since
#: (the session is given the flag); the rest is stored as it was.
_OLD_STORED = {"dataset": "sample", "mode": "vanilla", "template": "paper", "limit": 2, "seed": 0, "concurrency": 8,
               "max_concurrency": 32, "max_tokens": None, "temperature": None, "top_p": None, "policy": "paper",
               "models_file": None, "retry": {"max_attempts": 6, "base_delay": 1.0, "max_delay": 60.0,
                                              "max_retry_after": 600.0, "timeout": 60.0, "timeout_flag": "--timeout"},
               "checkpoint_every": 50, "fail_fast_after": 20, "cache_dir": None, "structured": False,
               "batch_size": None, "batch": False, "batch_wait": None, "batch_poll": 30.0, "batch_fallback": "stop"}
HAND_WRITTEN_RUNS = [
    (("--model", "openai:fake", "--base-url", "http://127.0.0.1:9/v1", "--limit", "2", "--option", "top_k=5",
      "--option", 'extra_body={"min_p": 0.1}', "--max-reply-bytes", "2048", "--option", "stop=end"),
     "sample__openai-fake__vanilla__37da27c1a9", "5c323436cbd0916628421561c97826f962f094435563fcb0e80d55c7c528dcc2",
     {**_OLD_STORED, "model": "openai:fake", "base_url": "http://127.0.0.1:9/v1", "chat_template": None,
      "options": {"top_k": 5, "extra_body": {"min_p": 0.1}, "stop": "end", "max_reply_bytes": 2048}}),
    (("--model", "local:smollm2", "--template", "paper", "--chat-template", "off", "--limit", "2"),
     "sample__local-smollm2__vanilla__19b7751e8d", "e679e0ca99c0679044d957febdc3c018c3c5532269695322be6d24791ba16611",
     {**_OLD_STORED, "model": "local:smollm2", "base_url": None, "chat_template": False, "options": {}}),
]


@pytest.mark.parametrize("flags, run_id, key, stored", HAND_WRITTEN_RUNS)
def test_run_s_own_flags_keep_the_run_id_cache_keys_and_stored_config(tmp_path, flags, run_id, key, stored):
    from persobench.generation import plan_generation
    from persobench.generation.lock import RESUME_FILE, write_resume_file
    from persobench.store.run_store import RunStore

    store = RunStore(tmp_path / "home")
    plan = plan_generation(_run_config(*flags), store=store)
    run = store.create(plan.manifest)
    write_resume_file(run, plan, store.home)
    resume = json.loads((run.path / RESUME_FILE).read_text(encoding="utf-8"))
    retry = {name: value for name, value in stored["retry"].items() if name != "timeout_flag"}
    assert (plan.run_id, plan.keys[0], resume["config"]) == (run_id, key, {**stored, "retry": retry})
    assert list(resume["config"]["options"]) == list(stored["options"])  # the options in the order given
    assert GenerationConfig.from_dict(stored) == GenerationConfig.from_dict(resume["config"])  # the old file loads


def _command_configs() -> st.SearchStrategy[GenerationConfig]:
    """GenerationConfigs a command line can give: the fields without a flag at their defaults, texts as a
    flag reads them (stripped, as the form does), option keys without ``=`` (``--option KEY=VALUE``)."""
    flagged = {offered.path for offered in offered_fields(GenerationConfig) if offered.ui.flag}
    defaults = {name: st.just(info.get_default(call_default_factory=True))
                for name, info in GenerationConfig.model_fields.items() if not any(p[0] == name for p in flagged)}
    retry = model_strategy(RetryPolicy, **{name: st.just(info.default) for name, info in RetryPolicy.model_fields.items()
                                           if ("retry", name) not in flagged})
    text = st.text(min_size=1, max_size=20).map(str.strip).filter(bool)
    keys = st.text(min_size=1, max_size=8).filter(lambda key: "=" not in key)
    options = st.fixed_dictionaries({}, optional={"max_reply_bytes": st.integers(1, 2**30)}).flatmap(
        lambda typed: st.dictionaries(keys, _json_values(), max_size=3).map(lambda extra: {**extra, **typed}))
    return model_strategy(GenerationConfig, **defaults, retry=retry, options=options, dataset=text, model=text,
                          template=st.none() | text, models_file=st.none() | text, base_url=st.none() | text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=_command_configs())
def test_the_printed_command_parses_back_to_the_public_configuration(config):
    """config_command is the inverse of run's flags: its argv, parsed by the real parser, is the config
    without its credentials (public_config), every flag of the field table included."""
    from persobench.generation.config import config_command, public_config

    command, _ = config_command(config, "/a home")
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "persobench"]
    args = _parser().parse_args(argv[3:])
    assert args.home == "/a home"
    assert _run_config_of(args) == public_config(config)[0]
