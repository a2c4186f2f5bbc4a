"""What a scoring pass is asked to do (:class:`ScoreConfig`): the typed request ``score`` builds from
its flags, a job's ``score`` step stores in ``job.json`` (:meth:`ScoreConfig.to_dict`) and the job's
child runs (:meth:`ScoreConfig.from_dict`), exactly as :class:`~persobench.generation.GenerationConfig`
is for ``run``. :data:`SCORE_FLAGS` is the one mapping between its fields and the CLI flags.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any, Literal, Mapping, Sequence

from pydantic import ConfigDict, Field, ValidationError, field_serializer, model_validator

from persobench.config import ConfigModel, Ui, config_error, offered_fields, validated
from persobench.errors import ConfigurationError
from persobench.core.registry import Registry
from persobench.core.secrets import public_address, url_with_credentials
from persobench.metrics.backends import Profile
from persobench.metrics.judge.judge_config import Judge
from persobench.metrics.backends import get_profile
from persobench.metrics.metric_registry import validate_metric_names
from persobench.metrics.nli_inputs import AUTO, LAYOUTS, check_layout
from persobench.metrics.unieval import UNIEVAL_SCORERS, UPSTREAM, check_scorer


#: ``--nli-inputs`` choices: :data:`~persobench.metrics.nli_inputs.AUTO` then the layouts.
INPUT_LAYOUTS = (AUTO, *LAYOUTS)
#: Who runs a pass (``--executor``): name -> its :class:`~persobench.scoring.executors.ScoreExecutor`
#: class, imported on first use. A new executor is one line here and the class.
EXECUTORS: Registry[Any] = Registry("executor")
EXECUTORS.register("local", "persobench.scoring.executors:LocalExecutor", description="this process")
EXECUTORS.register("ray", "persobench.scoring.ray_executor:RayExecutor",
                   description="actors on a Ray cluster (pip install 'persobench[ray]')")
#: The ``score`` flags' help texts (public: tests/fixtures/cli_flags.json).
_HELP = {
    "profile": "backend profile (default offline: packaged models only)",
    "metrics": "comma-separated metric names (default: all per-sample metrics)",
    "precision": "arithmetic of the embedding models (BERTScore, persona similarity): float32 (default), or bfloat16, "
                 "about 3x faster on CPUs with AMX/AVX512-BF16, values within ~1e-3, stored under a profile key of "
                 "their own",
    "executor": "where the values are computed: local (this process, default) or ray (actors on a Ray cluster, one per "
                "CPU or GPU; needs pip install 'persobench[ray]'); results are written here either way, so the two are "
                "interchangeable and resumable",
    "ray_address": "with --executor ray: the cluster to join (auto: the one `ray start` runs on this machine; default: "
                   "$RAY_ADDRESS, else a new local Ray instance)",
    "input_layout": "what the NLI model (or --judge) and UniEval are given: auto (default: the paper notebooks' layout "
                    "for runs under the paper protocol, PersoBench's pairs for the others), pairs or notebook for every "
                    "run; notebook-layout values are stored under a profile key of their own (+inputs=notebook), so "
                    "boards never mix the two",
    "unieval_scorer": "how UniEval's scores are read: upstream (default: each input scored once, as UniEval's own "
                      "scorer) or paper (the paper's pinned scorer, whose windows give sample k the score of input "
                      "k//8+k%%8, to compare with the published numbers); paper values are stored under a profile key "
                      "of their own (+unieval=paper)",
}


class ScoreConfig(ConfigModel):
    """A scoring pass over stored runs: which numbers, computed how and where. Its field table gives
    ``score``'s flags (the judge's own: :class:`~persobench.config.judge.JudgeConfig`)."""

    model_config = ConfigDict(**ConfigModel.model_config, arbitrary_types_allowed=True)

    profile: Annotated[Literal["offline", "standard"],
                       Field(description="Backend profile (``offline``: packaged models only, or ``standard``)."),
                       Ui("--profile", help=_HELP["profile"])] = "offline"
    metrics: Annotated[tuple[str, ...] | None,
                       Field(description="Metric names to score; ``None``: every per-sample metric."),
                       Ui("--metrics", "A,B,...", _HELP["metrics"], split=",")] = None
    overrides: Annotated[dict[str, str], Field(description="Slot (or ``slot.option``) -> hub id or local path "
                                               "replacing the profile's model (``--model``).")] = {}
    precision: Annotated[Literal["float32", "bfloat16"],
                         Field(description="Arithmetic of the embedding models: ``float32`` or ``bfloat16`` (stored "
                               "under its own profile key)."),
                         Ui("--precision", help=_HELP["precision"])] = "float32"
    judge: Annotated[Judge | None, Field(description="The LLM judge labelling the NLI pairs instead of the NLI model, "
                                         "resolved; ``None``: the NLI model. Stored as its JudgeConfig.")] = None
    executor: Annotated[str, Field(description="Where the values are computed: ``local`` (this process) or ``ray`` "
                                   "(actors on a Ray cluster); a name of :data:`EXECUTORS`."),
                        Ui("--executor", help=_HELP["executor"], choices=EXECUTORS.in_order)] = "local"
    ray_address: Annotated[str | None, Field(description="With the ray executor: the cluster to join (``auto``, an "
                                             "address; ``None``: ``$RAY_ADDRESS``, else a new local instance); stored "
                                             "in its public form."),
                           Ui("--ray-address", "auto|ADDRESS", _HELP["ray_address"])] = None
    input_layout: Annotated[str, Field(description="What the NLI classifier (or judge) and UniEval are given "
                                       "(:mod:`persobench.metrics.nli_inputs`): ``auto`` (each run's protocol "
                                       "decides), ``pairs`` or ``notebook`` for every run."),
                            Ui("--nli-inputs", help=_HELP["input_layout"], choices=lambda: INPUT_LAYOUTS)] = AUTO
    unieval_scorer: Annotated[str, Field(description="How UniEval's scores are read: ``upstream`` or ``paper`` "
                                         "(stored under ``+unieval=paper``)."),
                              Ui("--unieval-scorer", help=_HELP["unieval_scorer"], choices=lambda: UNIEVAL_SCORERS)] \
        = UPSTREAM

    def __init__(self, **data: Any) -> None:
        # built directly (the library's callers), a bad value is one ConfigurationError line too
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise config_error(exc, type(self)) from None

    @model_validator(mode="after")
    def _registered(self) -> "ScoreConfig":
        if self.executor not in EXECUTORS:
            raise ConfigurationError(f"unknown executor {self.executor!r}; known: {', '.join(EXECUTORS.in_order())}")
        if self.ray_address and self.executor != "ray":
            raise ConfigurationError("a Ray address (--ray-address) needs the ray executor (--executor ray)")
        check_layout(self.input_layout)
        check_scorer(self.unieval_scorer)
        return self

    @field_serializer("judge")
    def _stored_judge(self, judge: Judge | None) -> dict[str, Any] | None:
        return judge.to_dict() if judge is not None else None

    @field_serializer("ray_address")
    def _public_ray_address(self, address: str | None) -> str | None:
        return public_address(address) if address else None

    def resolve_profile(self) -> "Profile":
        """The checked profile (one-line :class:`ConfigurationError` for an unknown one, slot or path)."""

        profile = get_profile(self.profile, dict(self.overrides), precision=self.precision, judge=self.judge)
        # auto: resolved per run (plan_run)
        return replace(profile, input_layout=self.input_layout, unieval_scorer=self.unieval_scorer)

    def checked_metrics(self) -> tuple[str, ...] | None:
        """:attr:`metrics`, each checked to be registered (one line naming an unknown one)."""
        if self.metrics is None:
            return None

        return tuple(validate_metric_names(list(self.metrics)))

    def to_dict(self) -> dict[str, Any]:
        """The stored form (``job.json``): JSON values only, the judge as its
        :class:`~persobench.config.judge.JudgeConfig` (no key), no URL credentials."""
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, home: Any, ignore: Sequence[str] = ()) -> "ScoreConfig":
        """The config of a stored form, its judge resolved against ``home``; ``ignore``: keys that
        belong to the caller (a job step's ``runs``). Reads the loose score dicts of older
        ``job.json`` files too (``profile``, ``metrics``, ``judge``); anything else unknown is one
        :class:`ConfigurationError` line."""

        if not isinstance(data, Mapping):
            raise ConfigurationError(f"score config: expected an object, got {type(data).__name__}")
        given = {k: v for k, v in data.items() if k not in ignore}
        unknown = sorted(set(given) - set(cls.model_fields))
        if unknown:
            raise ConfigurationError(f"score config: unknown field(s) {', '.join(unknown)}; known: "
                                     f"{', '.join(cls.model_fields)}")
        metrics = given.get("metrics")
        if metrics is not None and (isinstance(metrics, str) or not isinstance(metrics, Sequence)):
            raise ConfigurationError(f"score config: metrics must be a list of names or null, got {metrics!r}")
        judge = given.get("judge")
        # null in an older loose dict: the default
        values = {name: value for name, value in given.items() if value is not None and name != "judge"}
        values["ray_address"] = url_with_credentials(given.get("ray_address")) or None
        values["judge"] = Judge.from_dict(judge, home=home) if judge else None
        return validated(cls, values)


#: Field -> its ``score`` flag, read from the field table (the judge's own flags:
#: :data:`persobench.metrics.judge.judge_config.JUDGE_FLAGS`); ``--model`` sets ``overrides``.
SCORE_FLAGS = {**{offered.path[0]: offered.ui.flag for offered in offered_fields(ScoreConfig) if offered.ui.flag},
               "overrides": "--model", "judge": "--judge"}
