"""What each kind of job step asks for: one typed request per kind (:data:`STEP_REQUESTS`), a field
table like the configurations it holds, stored in ``job.json`` as the step's ``config``
(:meth:`StepRequest.to_dict`) and read back by :meth:`StepRequest.from_dict`.

* ``run``: :class:`RunRequest`, a :class:`~persobench.generation.GenerationConfig`;
* ``score``: :class:`ScoreRequest`, a :class:`~persobench.scoring.ScoreConfig` with its judge as the
  user gave it (:class:`~persobench.config.JudgeConfig`), and which runs;
* ``import``: :class:`ImportRequest`, a folder in the paper's layout;
* ``fetch``: :class:`FetchRequest`, the paper's archive (or a mirror's), then its import.

A request is what the user asked for, checked field by field: what only running it can refuse (an
unknown model, a judge without prices under a cost cap) is refused by the step when it runs, so a
job whose model went away still lists, and its card says why it failed.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, ClassVar, Literal, Mapping, Self, Sequence, TypeAlias

from pydantic import Field, field_validator, model_validator

from persobench.config import ConfigModel, JudgeConfig, changed, validated
from persobench.errors import ConfigurationError
from persobench.generation import GenerationConfig
from persobench.metrics import resolve_judge
from persobench.scoring import ScoreConfig

#: Which runs a score step scores: ``"job"`` (those the job's run steps completed), ``"all"`` (every
#: run in the store) or the ids of stored runs.
RunSelection: TypeAlias = Literal["job", "all"] | tuple[Annotated[str, Field(min_length=1)], ...]


class StepRequest(ConfigModel):
    """What one step asks for. Its stored form is its fields as JSON; a kind whose stored form is
    older than its model (``run``, ``score``) reads it in :meth:`from_dict`."""

    kind: ClassVar[str]
    """The step kind this request is (``job.json``'s ``kind``)."""

    def to_dict(self) -> dict[str, Any]:
        """The stored form (``job.json``'s ``config``): JSON values only, no credentials."""
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """The request of a stored form; a bad one is one :class:`ConfigurationError` line naming the field."""
        return validated(cls, _object(data))

    def base_urls(self) -> tuple[str, ...]:
        """The public forms of the URLs the step sends to whose credentials travel in the job's
        environment (:func:`persobench.core.credentials_environment`)."""
        return ()


def _object(data: Any) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ConfigurationError(f"config: expected an object, got {type(data).__name__}")
    return data


class RunRequest(StepRequest):
    """A ``run`` step: one generation run."""

    kind: ClassVar[str] = "run"
    config: Annotated[GenerationConfig, Field(description="The run; its base URL in the public form (credentials "
                                              "travel in the job's environment).")]

    def to_dict(self) -> dict[str, Any]:
        return self.config.to_dict()

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        return cls(config=GenerationConfig.from_dict(_object(data)))

    def base_urls(self) -> tuple[str, ...]:
        return (self.config.base_url,) if self.config.base_url else ()


class ScoreRequest(StepRequest):
    """A ``score`` step: a scoring pass over the job's runs, every stored run or the runs named."""

    kind: ClassVar[str] = "score"
    config: Annotated[ScoreConfig, Field(description="The pass, without its judge (``judge`` holds it as given).")]
    judge: Annotated[JudgeConfig | None, Field(description="The LLM judge as the user gave it, resolved when the step "
                                               "runs (:meth:`score_config`); ``None``: the NLI model.")] = None
    runs: Annotated[RunSelection, Field(description="``job``: the runs this job's run steps completed; ``all``: "
                                        "every run in the store; or run ids.")] = "job"

    @field_validator("runs", mode="before")
    @classmethod
    def _selection(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in ("job", "all"):
            raise ConfigurationError(f"runs must be 'job', 'all' or a list of run ids, got {value!r}")
        return tuple(value) if isinstance(value, list) else value

    @model_validator(mode="after")
    def _judge_as_given(self) -> Self:
        if self.config.judge is not None:
            raise ConfigurationError("a score step keeps its judge as the user gave it (its judge field), "
                                     "not resolved in its config: build it with ScoreRequest.of")
        return self

    @classmethod
    def of(cls, config: ScoreConfig, runs: str | Sequence[str] = "job") -> "ScoreRequest":
        """The request for ``config`` (its judge kept as its :class:`~persobench.config.JudgeConfig`: no key,
        the base URL's public form) and ``runs``."""
        return validated(cls, {"config": changed(config, judge=None),
                               "judge": config.judge.config() if config.judge is not None else None,
                               "runs": runs if isinstance(runs, str) else list(runs)})

    def to_dict(self) -> dict[str, Any]:
        """``ScoreConfig.to_dict()`` with the judge's fields in its ``judge`` and ``runs`` beside them
        (the form ``job.json`` has held since score steps were typed)."""
        return {**self.config.to_dict(), "judge": self.judge.model_dump(mode="json") if self.judge else None,
                "runs": self.runs if isinstance(self.runs, str) else list(self.runs)}

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """Also the loose ``profile``/``metrics``/``judge`` dicts of older jobs, and their judges' older
        forms (a flat ``timeout``, ``null`` batch fields: :class:`~persobench.config.JudgeConfig` reads them)."""
        given = _object(data)
        judge = given.get("judge")
        if judge is not None and not isinstance(judge, Mapping):
            raise ConfigurationError(f"judge: expected an object with a model, got {judge!r}")
        config = ScoreConfig.from_dict({k: v for k, v in given.items() if k != "judge"}, home=None, ignore=("runs",))
        return validated(cls, {"config": config, "judge": validated(JudgeConfig, judge) if judge else None,
                               "runs": given.get("runs", "job")})

    def score_config(self, *, home: str | os.PathLike[str]) -> ScoreConfig:
        """The pass's configuration, its judge resolved against ``home`` (its models file, its response
        cache; one line for an unknown model or a judge without prices under a cap)."""
        if self.judge is None:
            return self.config
        return changed(self.config, judge=resolve_judge(self.judge, home=home))

    def chosen_runs(self, job_runs: Sequence[str]) -> list[str] | None:
        """The run ids to score (``job_runs``: those this job completed), or ``None`` for every stored run
        (``all``, and an empty list, which the Metrics page's judge jobs store for it)."""
        if self.runs == "job":
            return list(job_runs)
        return None if self.runs == "all" else list(self.runs) or None


class ImportRequest(StepRequest):
    """An ``import`` step: published replies in the paper's repository layout, as runs."""

    kind: ClassVar[str] = "import"
    folder: Annotated[str, Field(min_length=1, description="The folder (an absolute path).")]


class FetchRequest(StepRequest):
    """A ``fetch`` step: download the paper's data, then import it."""

    kind: ClassVar[str] = "fetch"
    url: Annotated[str | None, Field(description="A mirror's URL in its public form (its credentials travel in "
                                     "the job's environment); ``None``: the pinned archive.")] = None
    trust_unpinned: Annotated[bool, Field(strict=True, description="Accept files the content manifest does not pin "
                                          "(``fetch-paper --trust-unpinned``).")] = False

    def base_urls(self) -> tuple[str, ...]:
        return (self.url,) if self.url else ()


#: Step kind -> its request model, in the order the docs name them.
STEP_REQUESTS: dict[str, type[StepRequest]] = {
    request.kind: request for request in (RunRequest, ScoreRequest, ImportRequest, FetchRequest)}
