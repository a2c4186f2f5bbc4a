"""A run's protocol: the conditions its outputs depend on, so that boards compare like with like.

A leaderboard is one dataset, one mode and one protocol. A protocol is a named family of prompt
templates plus the settings that change what a model writes or how it is read: the completion
budget, the sampling temperature, the post-processing policy, whether the reply was requested
as structured output, and whether the prompt reached the model through a chat template other than
the way its template declares. The paper's protocol is one family, ``paper``: the ``paper`` template
as chat messages for chat models and ``paper-open`` as raw text for open models (the paper's
``text-generation`` pipeline in ``open_source_models.ipynb``), as the paper compared closed- and
open-source models in one table. A ``paper-open`` prompt wrapped in a chat template (a local model
with ``--chat-template on``, or a server's chat endpoint) is another protocol: on two FoCus samples
SmolLM2 gave two invalid replies with it off and two valid ones with it on.

:func:`protocol_of` is the one place that computes a run's protocol from its manifest. Manifests
written before a field existed take today's defaults: ``structured=False``; runs imported from the
paper's published data are the paper protocol whatever template name they were recorded with.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, Mapping
from persobench.store.run_store import RunManifest
from persobench.prompts.templates import template_family as family_of_name
from persobench.prompts.templates import BUILTIN_TEMPLATES, TEMPLATE_ALIASES


__all__ = ["PAPER", "PAPER_MAX_TOKENS", "PAPER_POLICY", "PAPER_TEMPERATURE", "Protocol", "default_policy",
           "paper_protocol", "protocol_of", "template_family"]

#: The paper's template family.
PAPER = "paper"
#: The paper's generation settings (Section 4 of arXiv 2410.03198): greedy decoding, a 110-token
#: reply budget doubled in chain-of-thought mode, and its post-processing.
PAPER_MAX_TOKENS = {"vanilla": 110, "cot": 220}
PAPER_TEMPERATURE = 0.0
PAPER_POLICY = "paper"
#: The post-processing policy of every other template family.
DEFAULT_POLICY = "robust"
#: Label tags of :attr:`Protocol.chat_template` (absent when the prompt went as its template declares).
CHAT_TEMPLATE_TAGS = {True: "chat template", False: "raw text"}

@dataclass(frozen=True)
class Protocol:
    """What a run's numbers depend on besides the model; two runs are comparable when equal."""

    name: str
    """Template family: ``"paper"`` for the paper's templates (``paper`` and ``paper-open``), else
    the family the template declares (a template file's own name when it declares none)."""
    mode: str
    """Prompt mode, ``"vanilla"`` or ``"cot"``."""
    max_tokens: int | None
    """Completion budget in tokens (None when the run did not record one)."""
    temperature: float | None
    """Sampling temperature (None when the run did not record one)."""
    policy: str
    """Post-processing policy that decided which replies are valid (``"paper"`` or ``"robust"``)."""
    structured: bool = False
    """True when the reply was requested as structured output (JSON schema / tool call)."""
    chat_template: bool | None = None
    """How the prompt reached the model, relative to the way its template declares: ``None`` as
    declared (raw text for ``paper-open``, chat messages for ``paper`` and the other built-ins);
    ``True`` wrapped in a chat template though the template asks for raw text (``paper-open`` with
    ``--chat-template on``, or sent to a chat API/endpoint); ``False`` sent as raw text though the
    template asks for a chat template (``--chat-template off`` on a local model or a completions
    endpoint)."""
    top_p: float | None = None
    """Nucleus sampling mass; ``None`` for the provider's default."""
    seed: int | None = None
    """Sampling seed; ``None`` at temperature 0 (greedy decoding has nothing to seed) or unrecorded."""
    stop: tuple[str, ...] | None = None
    """Stop sequences; ``None`` for none."""
    extra_body: str | None = None
    """Every other provider option that changes what the model writes (``top_k``, ``repetition_penalty``,
    a server's ``extra_body`` fields ...), as canonical JSON; ``None`` for none."""
    dtype: str | None = None
    """A local model's weights dtype when it is not the paper's float32 (``bfloat16`` ...); ``None``
    for float32, API models and runs that did not record one."""

    @property
    def is_paper(self) -> bool:
        """True for exactly the paper's protocol in this mode (family, budget, temperature, policy)."""
        return self == paper_protocol(self.mode)

    def _extras(self) -> list[str]:
        """The label parts of the fields added after the label's first form, each only when set, so
        the labels of runs that set none of them are what they always were."""
        parts = []
        for name in _EXTRA_FIELDS:
            value = getattr(self, name)
            if value is not None:
                text = _short(value) if name == "top_p" else (
                    json.dumps(list(value), ensure_ascii=True) if name == "stop" else str(value))
                parts.append(f"{_EXTRA_TAGS[name]}={text}")
        return parts

    @property
    def label(self) -> str:
        """One line for board headers and row labels, e.g. ``paper · cot · 220 tokens · T=0 · policy paper``."""
        parts = [self.name, self.mode,
                 f"{self.max_tokens} tokens" if self.max_tokens is not None else "? tokens",
                 f"T={_short(self.temperature)}" if self.temperature is not None else "T=?",
                 f"policy {self.policy}"]
        if self.chat_template is not None:
            parts.append(CHAT_TEMPLATE_TAGS[self.chat_template])
        if self.structured:
            parts.append("structured")
        return " · ".join(parts + self._extras())

    def to_dict(self) -> dict[str, Any]:
        """The protocol's fields, for JSON exports."""
        return dataclasses.asdict(self)

    @classmethod
    def from_label(cls, label: str) -> "Protocol":
        """The protocol a :attr:`label` names (its exact inverse); ValueError for any other text."""
        parts = label.split(" · ")
        extras: dict[str, Any] = {}
        tags = {tag: name for name, tag in _EXTRA_TAGS.items()}
        while parts and parts[-1].partition("=")[0] in tags and parts[-1].partition("=")[0] not in extras:
            tag, _, text = parts.pop().partition("=")
            extras[tag] = text
        try:
            values = {tags[tag]: _parse_extra(tags[tag], text) for tag, text in extras.items()}
        except (ValueError, TypeError):
            raise ValueError(f"not a protocol label: {label!r}") from None
        structured = parts[-1] == "structured"
        if structured:
            parts = parts[:-1]
        chat_template = next((on for on, tag in CHAT_TEMPLATE_TAGS.items() if parts[-1] == tag), None)
        if chat_template is not None:
            parts = parts[:-1]
        if len(parts) < 5 or not parts[-3].endswith(" tokens") or not parts[-2].startswith("T=") \
                or not parts[-1].startswith("policy "):
            raise ValueError(f"not a protocol label: {label!r}")
        tokens, temperature = parts[-3].removesuffix(" tokens"), parts[-2].removeprefix("T=")
        return cls(" · ".join(parts[:-4]), parts[-4], None if tokens == "?" else int(tokens),
                   None if temperature == "?" else float(temperature), parts[-1].removeprefix("policy "), structured,
                   chat_template, **values)


#: Protocol fields written into the label only when set, in label order, and their tags.
_EXTRA_FIELDS = ("top_p", "seed", "stop", "extra_body", "dtype")
_EXTRA_TAGS = {"top_p": "top_p", "seed": "seed", "stop": "stop", "extra_body": "body", "dtype": "dtype"}


def _parse_extra(name: str, text: str) -> Any:
    if name == "top_p":
        return float(text)
    if name == "seed":
        return int(text)
    if name == "stop":
        value = json.loads(text)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(text)
        return tuple(value)
    return text


def _short(number: float) -> str:
    """``0`` / ``0.7``, but every digit when ``:g`` would round (labels are board keys)."""
    text = f"{number:g}"
    return text if float(text) == number else repr(number)


def paper_protocol(mode: str) -> Protocol:
    """The paper's protocol in ``mode``."""
    return Protocol(PAPER, mode, PAPER_MAX_TOKENS.get(mode), PAPER_TEMPERATURE, PAPER_POLICY, False)


def default_policy(family: str) -> str:
    """The post-processing policy a run of template ``family`` gets unless one is asked for: the
    paper's parsing for the paper's templates (so a default run is on the paper's protocol and
    lands on the board of the published runs), ``robust`` for every other family."""
    return PAPER_POLICY if family == PAPER else DEFAULT_POLICY


def _manifest(manifest: Any) -> "RunManifest":
    """A :class:`~persobench.store.run_store.RunManifest` from a manifest, a run or the manifest's dict form."""
    manifest = getattr(manifest, "manifest", manifest)  # a Run
    if isinstance(manifest, Mapping):

        return RunManifest.from_dict(manifest)
    return manifest


def template_family(manifest: Any) -> str:
    """The template family recorded in a manifest, else the one its template name implies."""
    manifest = _manifest(manifest)
    if manifest.template_family:
        return str(manifest.template_family)
    if not manifest.template:
        return "?"

    return family_of_name(manifest.template)


def _number(value: Any, kind: type) -> Any:
    try:
        number = kind(value)
    except (TypeError, ValueError):
        return None
    return None if isinstance(number, float) and math.isnan(number) else number


def _declared_chat_template(template: str) -> bool:
    """Whether the built-in ``template`` asks for a chat template (``paper-open``: no, raw text);
    True for template files, as :class:`~persobench.prompts.templates.PromptTemplate` defaults."""

    name = TEMPLATE_ALIASES.get(template, (template, None))[0]
    built_in = BUILTIN_TEMPLATES.get((name, "vanilla"))
    return built_in.chat_template if built_in is not None else True


def _chat_template_deviation(manifest: "RunManifest") -> bool | None:
    """:attr:`Protocol.chat_template` of a run: how its prompt reached the model against the way its
    template declares. ``manifest.chat_template`` is True/False when the run chose (a local model, a
    completions endpoint); None means a chat API applied its own template, except for local and
    baseline runs whose manifests predate the field (taken as declared)."""
    declared = _declared_chat_template(manifest.template or "")
    applied = manifest.chat_template
    if applied is None:
        provider = str((manifest.model or {}).get("provider") or "")
        applied = declared if provider in ("local", "baseline", "") else True
    return None if bool(applied) == declared else bool(applied)


def protocol_of(manifest: Any) -> Protocol:
    """The protocol of a run, from its manifest (a :class:`~persobench.store.run_store.RunManifest`, a
    :class:`~persobench.store.run_store.Run` or the manifest's dict form).

    Missing fields take today's defaults: ``structured`` False, policy ``robust`` (the generation
    default). A run imported from the paper's published data is the paper protocol.
    """
    manifest = _manifest(manifest)
    mode = str(manifest.mode or "vanilla")
    if manifest.source == "imported":
        return paper_protocol(mode)
    parameters = manifest.parameters or {}
    structured = parameters.get("structured", False)
    temperature = _number(parameters.get("temperature"), float)
    model = manifest.model or {}
    options = dict(model.get("options") or {}) if isinstance(model.get("options"), Mapping) else {}
    provider = str(model.get("provider") or "")
    top_p = _number(parameters.get("top_p", options.get("top_p")), float)
    seed = _number(options.get("seed", parameters.get("seed")), int) if temperature else None
    stop = options.get("stop")
    stop = (stop,) if isinstance(stop, str) else tuple(str(x) for x in stop) if isinstance(stop, (list, tuple)) else None
    return Protocol(
        name=template_family(manifest),
        chat_template=_chat_template_deviation(manifest),
        mode=mode,
        max_tokens=_number(parameters.get("max_tokens"), int),
        temperature=temperature,
        policy=str(parameters.get("policy") or "robust"),
        structured=bool(structured),
        top_p=top_p, seed=seed, stop=stop or None,
        extra_body=_extra_body(provider, options),
        dtype=_local_dtype(provider, options),
    )


#: Model options that are not part of :attr:`Protocol.extra_body`: how the request travels (every
#: transport option of :data:`persobench.providers.spec.NON_OUTPUT_OPTIONS`, which a later stage
#: defines: tests/test_protocol.py checks this set holds them all), what model is loaded, how one
#: chat API takes the paper's prompt (``system_in_user``, the Gemini preset), the local mode, and
#: the options read into fields of their own.
NOT_PROTOCOL_OPTIONS = frozenset({
    "timeout", "headers", "max_tokens_param", "device", "organization", "project", "structured_format",
    "batch_size", "max_reply_bytes", "completions_endpoint", "local_mode", "system_in_user",
    "gguf_file", "revision", "trust_remote_code", "top_p", "seed", "stop", "dtype"})


def _extra_body(provider: str, options: Mapping[str, Any]) -> str | None:
    """Canonical JSON of the output-affecting options not read into a field of their own."""
    if provider in ("baseline", "imported"):
        return None
    body = {k: v for k, v in options.items() if k not in NOT_PROTOCOL_OPTIONS}
    return json.dumps(body, sort_keys=True, ensure_ascii=True, default=str) if body else None


def _local_dtype(provider: str, options: Mapping[str, Any]) -> str | None:
    """A local run's recorded weights dtype, unless it is the paper's float32."""
    dtype = options.get("dtype") if provider == "local" else None
    return None if dtype in (None, "", "float32") else str(dtype)
