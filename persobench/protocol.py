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
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from persobench.store import RunManifest

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

    @property
    def is_paper(self) -> bool:
        """True for exactly the paper's protocol in this mode (family, budget, temperature, policy)."""
        return self == paper_protocol(self.mode)

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
        return " · ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The protocol's fields, for JSON exports."""
        return dataclasses.asdict(self)

    @classmethod
    def from_label(cls, label: str) -> "Protocol":
        """The protocol a :attr:`label` names (its exact inverse); ValueError for any other text."""
        parts = label.split(" · ")
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
                   chat_template)


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
    """A :class:`~persobench.store.RunManifest` from a manifest, a run or the manifest's dict form."""
    manifest = getattr(manifest, "manifest", manifest)  # a Run
    if isinstance(manifest, Mapping):
        from persobench.store import RunManifest

        return RunManifest.from_dict(manifest)
    return manifest


def template_family(manifest: Any) -> str:
    """The template family recorded in a manifest, else the one its template name implies."""
    manifest = _manifest(manifest)
    if manifest.template_family:
        return str(manifest.template_family)
    if not manifest.template:
        return "?"
    from persobench.prompts import template_family as family_of_name  # built-ins and their former names

    return family_of_name(manifest.template)


def _number(value: Any, kind: type) -> Any:
    try:
        number = kind(value)
    except (TypeError, ValueError):
        return None
    return None if isinstance(number, float) and math.isnan(number) else number


def _declared_chat_template(template: str) -> bool:
    """Whether the built-in ``template`` asks for a chat template (``paper-open``: no, raw text);
    True for template files, as :class:`~persobench.prompts.PromptTemplate` defaults."""
    from persobench.prompts import BUILTIN_TEMPLATES, TEMPLATE_ALIASES

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
    """The protocol of a run, from its manifest (a :class:`~persobench.store.RunManifest`, a
    :class:`~persobench.store.Run` or the manifest's dict form).

    Missing fields take today's defaults: ``structured`` False, policy ``robust`` (the generation
    default). A run imported from the paper's published data is the paper protocol.
    """
    manifest = _manifest(manifest)
    mode = str(manifest.mode or "vanilla")
    if manifest.source == "imported":
        return paper_protocol(mode)
    parameters = manifest.parameters or {}
    structured = parameters.get("structured", False)
    return Protocol(
        name=template_family(manifest),
        chat_template=_chat_template_deviation(manifest),
        mode=mode,
        max_tokens=_number(parameters.get("max_tokens"), int),
        temperature=_number(parameters.get("temperature"), float),
        policy=str(parameters.get("policy") or "robust"),
        structured=bool(structured),
    )
