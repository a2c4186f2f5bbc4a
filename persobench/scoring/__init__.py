"""Scoring stored runs: plan what each run lacks, have its NLI pairs labelled by the pass's judge,
compute it, write it under the run's lock.

- :mod:`~persobench.scoring.score_config`: :class:`ScoreConfig`, the typed request (``score``'s flags,
  a job's ``score`` step in ``job.json``).
- :mod:`~persobench.scoring.work_plan`: the plan step (:func:`plan_run`) and a run's samples.
- :mod:`~persobench.scoring.compute`: the compute step, pure (:func:`compute_run`); :func:`score_run`
  does plan, label, compute and write for one run.
- :mod:`~persobench.scoring.pass_steps`: the steps every executor takes the same way
  (:class:`PassSteps`: plan, label, write), among them the judge's label step (:func:`label_work`:
  each run's NLI pairs asked through the pass's judge session before the run is computed).
- :mod:`~persobench.scoring.writing`: the locked write (:func:`write_run`) and :class:`RunWork`.
- :mod:`~persobench.scoring.score_pass`: one pass over many runs (:func:`score_runs`): the pass's
  judge session and the executor the config names (:data:`EXECUTORS`), which runs the pass.
- :mod:`~persobench.scoring.executors`: the one :class:`ScoreExecutor` interface (``run_pass``) and
  the local executor; :mod:`~persobench.scoring.ray_executor`: the Ray one.
- :mod:`~persobench.scoring.outcome`: :class:`ScoreReport` (with the judge's counts), :class:`RunScore`.
- :mod:`~persobench.scoring.judge_estimate`: what a judge would label and cost, before sending.

The metric families and their models stay in :mod:`persobench.metrics`. Importing this package loads
the scoring stack but no model: the metric backends and Ray load when a pass needs them.
"""

from persobench.scoring.compute import score_run
from persobench.scoring.judge_estimate import JUDGED_METRICS, JUDGED_METRICS_TEXT, estimate_new_runs, estimate_runs
from persobench.scoring.outcome import RunScore, ScoreReport
from persobench.scoring.pass_steps import ScoreProgress
from persobench.scoring.ray_executor import import_ray
from persobench.scoring.score_config import EXECUTORS, INPUT_LAYOUTS, SCORE_FLAGS, ScoreConfig
from persobench.scoring.score_pass import score, score_runs

__all__ = ["EXECUTORS", "INPUT_LAYOUTS", "JUDGED_METRICS", "JUDGED_METRICS_TEXT", "SCORE_FLAGS", "RunScore",
           "ScoreConfig", "ScoreProgress", "ScoreReport", "estimate_new_runs", "estimate_runs", "import_ray",
           "score", "score_run", "score_runs"]
