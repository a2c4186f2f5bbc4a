"""What a scoring pass is asked to do (:class:`ScoreConfig`): the typed request ``score`` builds from
its flags, a job's ``score`` step stores in ``job.json`` (:meth:`ScoreConfig.to_dict`) and the job's
child runs (:meth:`ScoreConfig.from_dict`), exactly as :class:`~persobench.generation.GenerationConfig`
is for ``run``. :data:`SCORE_FLAGS` is the one mapping between its fields and the CLI flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from persobench.errors import ConfigurationError
from persobench.core.registry import Registry
from persobench.core.secrets import public_address, url_with_credentials
from persobench.metrics.backends import Profile
from persobench.metrics.judge.judge_config import Judge
from persobench.metrics.backends import get_profile
from persobench.metrics.metric_registry import validate_metric_names
from persobench.metrics.nli_inputs import AUTO, LAYOUTS, check_layout
from persobench.metrics.unieval import UPSTREAM, check_scorer


#: ``--nli-inputs`` choices: :data:`~persobench.metrics.nli_inputs.AUTO` then the layouts.
INPUT_LAYOUTS = (AUTO, *LAYOUTS)
#: Who runs a pass (``--executor``): name -> its :class:`~persobench.scoring.executors.ScoreExecutor`
#: class, imported on first use. A new executor is one line here and the class.
EXECUTORS: Registry[Any] = Registry("executor")
EXECUTORS.register("local", "persobench.scoring.executors:LocalExecutor", description="this process")
EXECUTORS.register("ray", "persobench.scoring.ray_executor:RayExecutor",
                   description="actors on a Ray cluster (pip install 'persobench[ray]')")
#: Field -> its ``score`` flag (the judge's own flags: :data:`persobench.metrics.judge.judge_config.JUDGE_FLAGS`).
SCORE_FLAGS = {"profile": "--profile", "metrics": "--metrics", "overrides": "--model", "precision": "--precision",
               "judge": "--judge", "executor": "--executor", "ray_address": "--ray-address",
               "input_layout": "--nli-inputs", "unieval_scorer": "--unieval-scorer"}


@dataclass(frozen=True)
class ScoreConfig:
    """A scoring pass over stored runs: which numbers, computed how and where."""

    profile: str = "offline"
    """Backend profile (``offline``: packaged models only, or ``standard``)."""
    metrics: tuple[str, ...] | None = None
    """Metric names to score; ``None``: every per-sample metric."""
    overrides: Mapping[str, str] = field(default_factory=dict)
    """Slot (or ``slot.option``) -> hub id or local path replacing the profile's model (``--model``)."""
    precision: str = "float32"
    """Arithmetic of the embedding models: ``float32`` or ``bfloat16`` (stored under its own profile key)."""
    judge: "Judge | None" = None
    """The LLM judge labelling the NLI pairs instead of the NLI model; ``None``: the NLI model."""
    executor: str = "local"
    """Where the values are computed: ``local`` (this process) or ``ray`` (actors on a Ray cluster)."""
    ray_address: str | None = None
    """With the ray executor: the cluster to join (``auto``, an address; ``None``: ``$RAY_ADDRESS``,
    else a new local instance)."""
    input_layout: str = AUTO
    """What the NLI classifier (or judge) and UniEval are given (:mod:`persobench.metrics.nli_inputs`):
    ``auto`` (each run's protocol decides: the paper notebooks' layout under the paper protocol,
    PersoBench's pairs otherwise), ``pairs`` or ``notebook`` for every run. Values computed in the
    notebook layout are stored under a profile key of their own (``+inputs=notebook``)."""
    unieval_scorer: str = UPSTREAM
    """How UniEval's scores are read (:mod:`persobench.metrics.unieval`): ``upstream`` (each input's
    own score) or ``paper`` (the paper's pinned scorer's slip, stored under ``+unieval=paper``)."""

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ConfigurationError(f"unknown executor {self.executor!r}; known: {', '.join(EXECUTORS.in_order())}")
        if self.ray_address and self.executor != "ray":
            raise ConfigurationError("a Ray address (--ray-address) needs the ray executor (--executor ray)")
        check_layout(self.input_layout)
        check_scorer(self.unieval_scorer)
        if self.metrics is not None and not isinstance(self.metrics, tuple):
            object.__setattr__(self, "metrics", tuple(self.metrics))
        object.__setattr__(self, "overrides", dict(self.overrides or {}))

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
        """The stored form (``job.json``): JSON values only, no key, no URL credentials."""
        return {"profile": self.profile, "metrics": list(self.metrics) if self.metrics is not None else None,
                "overrides": dict(self.overrides), "precision": self.precision,
                "judge": self.judge.to_dict() if self.judge is not None else None,
                "executor": self.executor,
                "ray_address": public_address(self.ray_address) if self.ray_address else None, "input_layout": self.input_layout,
                "unieval_scorer": self.unieval_scorer}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, home: Any, ignore: Sequence[str] = ()) -> "ScoreConfig":
        """The config of a stored form, its judge resolved against ``home``; ``ignore``: keys that
        belong to the caller (a job step's ``runs``). Reads the loose score dicts of older
        ``job.json`` files too (``profile``, ``metrics``, ``judge``); anything else unknown is one
        :class:`ConfigurationError` line."""

        if not isinstance(data, Mapping):
            raise ConfigurationError(f"score config: expected an object, got {type(data).__name__}")
        given = {k: v for k, v in data.items() if k not in ignore}
        unknown = sorted(set(given) - set(SCORE_FLAGS))
        if unknown:
            raise ConfigurationError(f"score config: unknown field(s) {', '.join(unknown)}; known: "
                                     f"{', '.join(SCORE_FLAGS)}")
        judge = given.get("judge")
        metrics = given.get("metrics")
        if metrics is not None and (isinstance(metrics, str) or not isinstance(metrics, Sequence)):
            raise ConfigurationError(f"score config: metrics must be a list of names or null, got {metrics!r}")
        return cls(profile=str(given.get("profile") or "offline"),
                   metrics=tuple(str(m) for m in metrics) if metrics is not None else None,
                   overrides={str(k): str(v) for k, v in dict(given.get("overrides") or {}).items()},
                   precision=str(given.get("precision") or "float32"),
                   judge=Judge.from_dict(judge, home=home) if judge else None,
                   executor=str(given.get("executor") or "local"), ray_address=url_with_credentials(given.get("ray_address")) or None,
                   input_layout=str(given.get("input_layout") or AUTO),
                   unieval_scorer=str(given.get("unieval_scorer") or UPSTREAM))
