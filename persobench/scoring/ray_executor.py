"""Scoring on a Ray cluster (``score --executor ray``): the compute step on Ray actors, the plan and
the write in the driver.

How the work is split: the families a request needs are put in groups (a family with those it
requires, e.g. persona coverage with NLI: :func:`family_groups`); each run's work
(:class:`~persobench.scoring.writing.RunWork`) becomes one shard per group it needs. A pool of
actors (:func:`plan_actors`), each serving fixed groups, scores the shards: an actor loads the
models of its groups once (the per-process model cache) and keeps one text encoder, given each
dataset's texts in one pass before its runs (as the local path does) and emptied after them.
Groups with a torch model ask for a GPU each when the cluster has GPUs; everything else takes one
CPU. Each family sees the replies the whole run would give it, so the values equal the local ones.

The driver alone plans, labels and writes (:class:`~persobench.scoring.pass_steps.PassSteps`, as on
the local executor): each dataset's runs are planned, their NLI pairs asked of the pass's judge in
the driver (the answers travel inside each run's work, so no actor sends a judge request), then
their shards are submitted; when every shard of a run is back the driver merges them into the run
through :func:`~persobench.scoring.writing.write_run` under the run's lock, exactly as a local score
does. So a Ray score and a local one send the judge the same requests, store the same values and
report the same counts, and a killed one resumes with only the values it had not written.

Embeddings on disk: the driver writes a probe file in the store's embedding cache; an actor that
reads it (same machine, or the store on a shared filesystem) uses that cache, others keep their
embeddings in memory.

Ray is an optional extra (``pip install 'persobench[ray]'``), imported only here.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generator, Iterator, Sequence

from persobench.errors import ConfigurationError, PersoBenchError
from persobench.metrics.backends import Profile
from persobench.metrics.encoders.encoder import EmbeddingRequest, merged_request
from persobench.scoring.pass_steps import Computed, PassSteps, ScoreProgress
from persobench.scoring.writing import RunWork
from persobench.metrics.sample_scores import ScoreResult
import os
import socket
from urllib.parse import urlsplit
from persobench.core.secrets import public_address
from persobench.metrics.backends import default_device
from persobench.metrics.encoders.encoder import TextEncoder
from persobench.metrics.family import Progress
from persobench.metrics.sample_scores import prepare_embeddings
from persobench.scoring.compute import compute_run
from persobench.metrics.judge.judge_session import JudgeSession
from persobench.metrics.encoders.encoder import store_cache_root
from persobench.metrics.metric_registry import validate_metric_names
from persobench.scoring.outcome import RunScore
from persobench.scoring.score_config import ScoreConfig
from persobench.store.run_store import Run, RunStore
import logging
import persobench
from persobench.scoring.work_plan import GPU_SLOTS, FamilyGroup, family_groups, work_embedding_request  # noqa: F401 - re-exported
from persobench.scoring.compute import combine_results
from persobench.core.secrets import public_text


#: What to install for ``--executor ray``.
RAY_EXTRA = "pip install 'persobench[ray]'"


def import_ray() -> Any:
    """The ``ray`` module, or :class:`ConfigurationError` in one line saying what to install."""
    try:
        import ray
    except ImportError:
        raise ConfigurationError(f"the ray executor needs Ray, which is not installed: {RAY_EXTRA}") from None
    return ray


# --- Splitting the work ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ActorSlot:
    """One actor of the pool: what it asks Ray for and which family groups it serves."""

    gpu: bool
    """Asks for one GPU (else one CPU)."""
    groups: tuple[int, ...]
    """Indices into the family groups."""


def plan_actors(groups: Sequence[FamilyGroup], cpus: int, gpus: int, runs: int | None = None) -> list[ActorSlot]:
    """The actor pool for ``groups`` on a cluster with ``cpus`` CPUs and ``gpus`` GPUs: the groups with
    a torch model on one actor per GPU when there are GPUs, the rest on one actor per CPU. With fewer
    actors than groups an actor serves several groups; with more, a group's runs are spread over
    several actors, never more actors than shards (``runs`` per group) to give them."""
    on_gpu = [i for i, g in enumerate(groups) if g.gpu] if gpus >= 1 else []
    on_cpu = [i for i in range(len(groups)) if i not in on_gpu]

    def cap(slots: int, group_ids: list[int]) -> int:
        return slots if runs is None else min(slots, len(group_ids) * max(1, runs))

    return ([ActorSlot(True, g) for g in _spread(on_gpu, cap(gpus, on_gpu))] +
            [ActorSlot(False, g) for g in _spread(on_cpu, cap(max(1, cpus), on_cpu))])


def _spread(group_ids: list[int], slots: int) -> list[tuple[int, ...]]:
    if not group_ids:
        return []
    if slots <= len(group_ids):
        return [tuple(group_ids[k::slots]) for k in range(slots)]
    return [(group_ids[k % len(group_ids)],) for k in range(slots)]


# --- The actor ------------------------------------------------------------------------------------


class ScoringWorker:
    """The body of a scoring actor (wrapped by ``ray.remote`` at run time): one profile, one text
    encoder, models loaded once per process by the backends' cache. Calls run in submission order.
    It never sends a judge request: a judged run's answers come inside its work."""

    def __init__(self, profile: "Profile", cache_root: str | None, probe: str | None) -> None:

        # The actor's own device: Ray shows it the GPU it was given (CUDA_VISIBLE_DEVICES).
        self.profile = dataclasses.replace(profile, device=default_device())
        shared = bool(cache_root and probe and (Path(cache_root) / probe).is_file())
        self.encoder = TextEncoder(self.profile, Path(cache_root) if shared and cache_root else None)
        self.disk_cache = shared

    def describe(self) -> dict[str, Any]:
        """Where this actor runs and whether it reads the store's embedding cache."""

        return {"host": socket.gethostname(), "pid": os.getpid(), "device": self.profile.device,
                "disk_cache": self.disk_cache}

    def prepare(self, request: "EmbeddingRequest") -> None:
        """Embed a dataset's texts in one pass (kept until :meth:`release`)."""

        prepare_embeddings(self.encoder, request, Progress(None))

    def score(self, work: "RunWork", metrics: tuple[str, ...]) -> "ScoreResult | str | None":
        """One shard: ``work``'s missing values of ``metrics``; a deliberate error comes back as its line."""
        # Only the device is the actor's: the rest of the profile is the run's, as the plan resolved
        # it (its input layout under the run's protocol, its judge, its overrides).
        on_this_device = dataclasses.replace(work.profile, device=self.profile.device)
        try:
            return compute_run(dataclasses.replace(work, profile=on_this_device), metrics=metrics,
                               encoder=self.encoder)
        except PersoBenchError as exc:
            return str(exc)

    def release(self) -> None:
        """Forget the dataset's in-memory embeddings (the disk cache stays)."""
        self.encoder.release()

    def stats(self) -> dict[str, Any]:
        """The encoder's counts (texts embedded, read from disk)."""
        return dataclasses.asdict(self.encoder.stats)


# --- The driver's side ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardsDone:
    """Every shard of one run, back from the actors."""

    work: "RunWork"
    """The run's planned work."""
    result: "ScoreResult | None"
    """The shards' values combined (None when none came back)."""
    error: str = ""
    """Why a shard failed (one line), or ""; the values of the other shards are in ``result``."""


class RayScoring:
    """The actor pool for one scoring call (a context manager): joins the cluster at ``address``
    (or uses the one this process already joined), starts the actors, and gives back each run's
    values as its shards finish. Leaving it stops the actors, and Ray when it started it."""

    def __init__(self, profile: "Profile", wanted: Sequence[str], *, address: str | None = None,
                 cache_root: Path | None = None, runs: int | None = None) -> None:
        self.profile = profile
        self.runs = runs
        self.groups = family_groups(wanted)
        self.address = address
        self.cache_root = cache_root
        self.ray = import_ray()
        self.actors: list[Any] = []
        self.slots: list[ActorSlot] = []
        self._started_ray = False
        self._probe: Path | None = None
        self._pending: dict[Any, tuple[str, int]] = {}  # shard ref -> (run id, group)
        # run id -> (work, shards still out, results back, errors back)
        self._runs: dict[str, tuple["RunWork", int, list[Any], list[str]]] = {}
        self._next: dict[int, int] = {}
        self._submitted = 0  # shards submitted so far
        self._back = 0  # shards back so far

    def __enter__(self) -> "RayScoring":
        ray = self.ray
        if ray.is_initialized():
            _check_joined(ray, self.address)
        else:
            self._connect()
        resources = ray.cluster_resources()
        # The cluster's resources decide (a GPU the driver sees but Ray does not offer cannot be asked for).
        self.slots = plan_actors(self.groups, int(resources.get("CPU", 1)), int(resources.get("GPU", 0)),
                                 self.runs)
        probe = None
        if self.cache_root is not None:
            probe = f".ray-probe-{uuid.uuid4().hex}"
            self.cache_root.mkdir(parents=True, exist_ok=True)
            self._probe = self.cache_root / probe
            self._probe.write_text("persobench\n", encoding="utf-8")
        actor_class = ray.remote(ScoringWorker)
        for slot in self.slots:
            # A CPU actor holds its CPU; a GPU actor holds only its GPU, so GPU actors never wait for
            # the CPU actors (which take every CPU) and the pool never waits for itself.
            options = {"num_cpus": 0, "num_gpus": 1} if slot.gpu else {"num_cpus": 1}
            self.actors.append(actor_class.options(**options).remote(
                self.profile, str(self.cache_root) if self.cache_root else None, probe))
        return self

    def _connect(self) -> None:
        _check_reachable(self.address)
        try:
            # The driver's own persobench goes with the job, so every worker runs the same code.
            self.ray.init(address=self.address, include_dashboard=False, log_to_driver=False,
                          logging_level=logging.WARNING,
                          runtime_env={"py_modules": [persobench], "excludes": ["__pycache__", "*.pyc"]})
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = public_address(self.address) if self.address else "a new local Ray instance"
            raise ConfigurationError(f"cannot start or reach Ray at {where}: {public_text(_one_line(exc))}") from None
        self._started_ray = True

    def __exit__(self, *exc: object) -> None:
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors = []
        if self._probe is not None:
            self._probe.unlink(missing_ok=True)
        if self._started_ray:
            self.ray.shutdown()

    def describe(self) -> str:
        """The pool in a few words ("2 actors (2 CPU)")."""
        gpu = sum(1 for s in self.slots if s.gpu)
        kinds = ", ".join(part for part in (f"{gpu} GPU" if gpu else "",
                                            f"{len(self.slots) - gpu} CPU" if len(self.slots) > gpu else "") if part)
        return f"{len(self.slots)} actor{'s' if len(self.slots) != 1 else ''} ({kinds})"

    def actors_of(self, group: int) -> list[int]:
        return [k for k, slot in enumerate(self.slots) if group in slot.groups]

    def submit(self, works: Sequence["RunWork"]) -> list["RunWork"]:
        """Queue the shards of ``works`` (the runs of one dataset): each actor first embeds the texts
        of its shards in one pass, then scores them, then forgets the texts. Returns the works that
        need nothing computed (the caller writes them at once)."""

        idle = [w for w in works if not w.todo]
        shards: dict[int, list[tuple["RunWork", int]]] = {}
        for work in works:
            if not work.todo:
                continue
            needed = [g for g, group in enumerate(self.groups) if any(m in work.todo for m in group.metrics)]
            self._runs[work.run_id] = (work, len(needed), [], [])
            for g in needed:
                pool = self.actors_of(g)
                turn = self._next.get(g, 0)
                self._next[g] = turn + 1
                shards.setdefault(pool[turn % len(pool)], []).append((work, g))
        for k, mine in shards.items():
            request = merged_request(work_embedding_request(work, self.groups[g].metrics) for work, g in mine)
            if request.pairs or request.sentences:
                self.actors[k].prepare.remote(request)
            for work, g in mine:
                self._pending[self.actors[k].score.remote(work, self.groups[g].metrics)] = (work.run_id, g)
                self._submitted += 1
            self.actors[k].release.remote()
        return idle

    def finished(self, progress: Callable[[int, int], None] | None = None, *,
                 wait: bool = True) -> Iterator[ShardsDone]:
        """Each run's values as soon as all its shards are back; without ``wait``, only those back
        already. ``progress(back, submitted)`` per shard, over every shard submitted so far."""

        ray = self.ray
        while self._pending:
            ready, _ = ray.wait(list(self._pending), num_returns=1, timeout=None if wait else 0)
            if not ready:
                return
            ref = ready[0]
            run_id, g = self._pending.pop(ref)
            work, expected, results, errors = self._runs[run_id]
            try:
                value = ray.get(ref)
            except ray.exceptions.RayError as exc:  # an actor died (out of memory, node lost ...)
                value = f"Ray could not score {', '.join(self.groups[g].families)}: {_one_line(exc)}"
            if isinstance(value, ScoreResult):
                results.append(value)
            elif isinstance(value, str):
                errors.append(value)
            self._back += 1
            if progress is not None:
                progress(self._back, self._submitted)
            self._runs[run_id] = (work, expected - 1, results, errors)
            if expected == 1:  # the run's last shard
                del self._runs[run_id]
                yield ShardsDone(work, combine_results(results), errors[0] if errors else "")


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``HOST:PORT`` or ``ray://[USER@]HOST[:PORT]`` address; ``None`` for ``auto``
    and any other form (Ray reads those itself)."""
    host, sep, port = address.rpartition("@")[2].rpartition(":")
    if address.startswith("ray://"):  # a Ray client address (its user info, if any, is never printed)
        try:
            parts = urlsplit(address)
            host, sep, port = parts.hostname or "", ":", str(parts.port or 10001)
        except ValueError:
            return None
    if not sep or "://" in address and not address.startswith("ray://") or not port.isdigit():
        return None
    return host, int(port)


def _check_reachable(address: str | None) -> None:
    """Refuse a ``HOST:PORT`` nothing answers on in one line, at once (Ray itself retries for minutes)."""
    address = address or os.environ.get("RAY_ADDRESS") or ""
    endpoint = _host_port(address)
    if endpoint is None:
        return  # "auto" or a new local instance: Ray says what is wrong
    try:
        socket.create_connection(endpoint, timeout=10).close()
    except OSError as exc:
        raise ConfigurationError(f"cannot reach Ray at {public_address(address)}: {exc.strerror or exc}; start it with "
                                 "`ray start --head` or give its address with --ray-address") from None


def _check_joined(ray: Any, address: str | None) -> None:
    """Refuse a pass whose address names another cluster than the one this process has joined: Ray
    keeps one connection per process, so the pass would run there, not where it was asked to.
    ``auto``, no address, and a connection that does not say where it goes (a Ray client) use it."""
    if not address or address == "auto":
        return
    try:
        joined = str(ray.get_runtime_context().gcs_address or "")
    except Exception:  # noqa: BLE001 - a connection that cannot say where it goes is used, as before
        joined = ""
    wanted, there = _host_port(address), _host_port(joined)
    if wanted is None or there is None:
        return
    if (_machine(wanted[0]), wanted[1]) != (_machine(there[0]), there[1]):
        raise ConfigurationError(f"this process is already connected to Ray at {public_address(joined)}, not at "
                                 f"{public_address(address)} (--ray-address): score in a new process to use "
                                 "that cluster")


def _machine(host: str) -> str:
    """A host as it can be compared: its address, every address of this machine being one."""
    try:
        found = socket.gethostbyname(host)
        own = socket.gethostbyname_ex(socket.gethostname())[2]
    except OSError:
        return host.lower()
    return "this machine" if found.startswith("127.") or found in own else found


def _one_line(exc: BaseException) -> str:
    """The message of ``exc`` (a Ray error carries the remote traceback first, its message last)."""
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]


class RayExecutor:
    """The :class:`~persobench.scoring.executors.ScoreExecutor` on a Ray cluster: the driver plans and
    labels each dataset's runs and submits their shards at once (the actors never wait for the
    driver), writes each run when its last shard is back, and writes those already back between two
    datasets."""

    device = "ray"

    def __init__(self, profile: "Profile", wanted: Sequence[str], *, address: str | None = None,
                 cache_root: Path | None = None, runs: int | None = None) -> None:
        self.pool = RayScoring(profile, wanted, address=address, cache_root=cache_root, runs=runs)

    @classmethod
    def where(cls, config: ScoreConfig, profile: "Profile") -> str:  # noqa: ARG003 - the protocol's signature
        import_ray()  # before any work: without Ray, one line saying what to install
        return cls.device

    @classmethod
    def open(cls, config: ScoreConfig, profile: "Profile", store: RunStore, runs: Sequence[Run]) -> "RayExecutor":
        """Joins ``config.ray_address`` when entered; as many actors as the cluster and ``runs`` call for."""
        wanted = config.checked_metrics()
        return cls(profile, validate_metric_names(list(wanted) if wanted is not None else None),
                   address=config.ray_address, cache_root=store_cache_root(store.home), runs=len(runs))

    def __enter__(self) -> "RayExecutor":
        self.pool.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.__exit__(*exc)

    def run_pass(self, steps: PassSteps, judge: "JudgeSession | None",
                 progress: "ScoreProgress | None") -> Generator[RunScore, None, None]:
        """Plan a dataset, label it, submit its shards, write what is back; at the end, write the rest
        as it comes back."""
        label = f"ray {self.pool.describe()}"
        report = (lambda done, total: progress(label, done, total)) if progress is not None else None

        def written(done: ShardsDone) -> RunScore:
            return steps.written(Computed(done.work, done.result, done.error))

        for group in steps.planned():
            group = steps.labelled(group, judge, progress)
            yield from steps.refusals()
            for work in self.pool.submit(group.works):  # nothing to compute: written at once
                yield steps.written(Computed(work, None))
            for done in self.pool.finished(report, wait=False):
                yield written(done)
        yield from steps.refusals()
        for done in self.pool.finished(report):
            yield written(done)
