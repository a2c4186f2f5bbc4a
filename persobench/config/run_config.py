"""What defines a generation run (:class:`GenerationConfig`): the field table ``run``'s flags are
generated from (:func:`persobench.config.flags.add_config_flags`) and ``resume.json`` / a job's ``run``
step store (:meth:`GenerationConfig.to_dict`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Mapping

from pydantic import ConfigDict, Field, ValidatorFunctionWrapHandler, field_validator, with_config
from typing_extensions import TypedDict

from persobench.config.fields import ConfigModel, Ui, validated
from persobench.config.judge import BATCH_FALLBACK_HELP, BATCH_POLL_HELP, CONCURRENCY_CHOICES, BatchFallback
from persobench.config.retry_policy import RetryPolicy
from persobench.errors import ConfigurationError

#: The ``run`` flag that sets a request's deadline (named when a request runs out of time).
TIMEOUT_FLAG = "--timeout"
#: The model ``run`` uses without ``--model``: offline, in this process.
DEFAULT_LOCAL_MODEL = "local:smollm2"
#: The prompt modes: the reply only, or reasoning then the reply.
Mode = Literal["vanilla", "cot"]
#: The post-processing policies.
Policy = Literal["robust", "paper"]

_Whole = Annotated[int, Field(ge=1)]
#: The New run page's tooltips.
STRUCTURED_WIDGET_HELP = (
    "Ask the provider to guarantee the reply's JSON shape (a JSON schema for OpenAI-compatible servers and Anthropic, "
    "grammar-constrained decoding for local models). A separate configuration, labelled +structured on its own "
    "board: it no longer measures whether the model follows the format instruction (instructability). Baselines "
    "ignore it.")
BATCH_WIDGET_HELP = (
    "Send the requests through the provider's batch API (OpenAI Batch API, Anthropic Message Batches): about half "
    "the price, answered within 24 hours. The same run and cache: the run waits for its batch, and a restarted one "
    "collects it instead of submitting again. Models without a batch API ignore it.")


@with_config(ConfigDict(extra="allow"))
class ModelOptions(TypedDict, total=False):
    """A run's model options (``run --option KEY=VALUE``), merged over the models-file entry: any key the
    provider takes, passed on as given. A key typed here is checked by its bounds (and has a flag of its
    own, ``--max-reply-bytes``)."""

    max_reply_bytes: Annotated[int, Field(strict=True, ge=1, le=2**30, description="The largest reply read, in "
                                          "bytes; a bigger one fails the sample as ``too_large``. At most 1 GiB: a "
                                          "bigger cap (a 23-digit one) is a typo that would read any reply whole.")]


class GenerationConfig(ConfigModel):
    """Everything that defines a generation run (the CLI flags map one to one onto these)."""

    dataset: Annotated[str, Field(min_length=1, description="Registered dataset name or path to a .csv/.jsonl "
                                  "file."), Ui("--dataset", help="dataset name or .csv/.jsonl path (default: sample)")] \
        = "sample"
    model: Annotated[str, Field(min_length=1, description="``provider:model`` spec or a name from the models file."),
                     Ui("--model", help="PROVIDER:MODEL (openai, anthropic, local, baseline) or a models-file name "
                                        "(default: local:smollm2, offline)")] = DEFAULT_LOCAL_MODEL
    base_url: Annotated[str | None, Field(description="Server URL for OpenAI-compatible servers (overrides the "
                                          "models file)."),
                        Ui("--base-url", help="OpenAI-compatible server URL (vLLM, Ollama, ...)")] = None
    mode: Annotated[Mode, Field(description='Prompt mode, "vanilla" (reply only) or "cot" (reasoning, then reply).'),
                    Ui("--mode", help="vanilla (reply only) or cot (reasoning, then reply); default vanilla")] \
        = "vanilla"
    template: Annotated[str | None, Field(description="Template name (``paper``, ``paper-open``, ``persobench``) or "
                                          "file; default: the paper's protocol, ``paper-open`` for local models and "
                                          "``paper`` for every other provider."),
                        Ui("--template", "NAME|FILE", "paper (the paper's closed-source prompt), paper-open (its "
                           "open-source prompt, raw text), persobench (ours) or a template file; default: the paper's "
                           "protocol, paper-open for local models and the -vllm presets, paper for the others")] = None
    chat_template: Annotated[bool | None, Field(strict=True, description="Local models: wrap the prompt in the tokenizer's chat "
                                                "template; default: the template's own setting (off for "
                                                "``paper-open``, on otherwise). Chat APIs always apply theirs."),
                             Ui("--chat-template", help="local models and servers with a completions endpoint (the "
                                "-vllm presets): wrap the prompt in the model's chat template, 'off' sends it as raw "
                                "text (default: off for paper-open, on otherwise; a vLLM server gets 'on' at its chat "
                                "endpoint); chat APIs always apply their own. A prompt wrapped unlike its template "
                                "declares is another protocol, never on the paper's board")] = None
    limit: Annotated[_Whole | None, Field(description="Number of samples (a deterministic subset chosen by ``seed``); "
                                          "``None`` for all."),
                     Ui("--limit", help="number of samples (deterministic subset)", widget="number", key="limit",
                        label="Samples per dataset (0 = all)", initial=10, zero_is_none=True, step=5)] = None
    seed: Annotated[int, Field(description="Subset seed, and the sampling seed when temperature > 0."),
                    Ui("--seed", help="subset seed, and sampling seed when temperature > 0", widget="number",
                       key="seed", label="Subset seed", step=1)] = 0
    concurrency: Annotated[_Whole | Literal["auto"],
                           Field(description="Maximum requests in flight, or ``\"auto\"``: found while the run goes, "
                                 "raised while replies come back and halved on a 429 or 5xx."),
                           Ui("--concurrency", "N|auto", "maximum requests in flight (default 8), or auto: start at 2, "
                              "raise while replies come back, halve on a 429 or 5xx", widget="select",
                              key="concurrency", label="Requests in flight", options=CONCURRENCY_CHOICES,
                              widget_help="auto: start at 2, raise while replies come back, halve on a 429 or 5xx "
                                          "(at most 32).")] = 8
    max_concurrency: Annotated[int, Field(ge=1, description="The most requests in flight ``\"auto\"`` may reach."),
                               Ui("--max-concurrency", "N", "ceiling for --concurrency auto (default 32)")] = 32
    max_tokens: Annotated[_Whole | None, Field(description="Completion budget; default from the template (110 "
                                               "vanilla, 220 cot)."),
                          Ui("--max-tokens", help="completion budget (default 110 vanilla, 220 cot)")] = None
    temperature: Annotated[Annotated[float, Field(ge=0, le=2)] | None,  # 2: the most any chat API takes
                           Field(description="Sampling temperature; default from the template (0)."),
                           Ui("--temperature", help="sampling temperature (default 0)")] = None
    top_p: Annotated[Annotated[float, Field(gt=0, le=1)] | None,
                     Field(description="Nucleus sampling mass; ``None`` for the provider default."),
                     Ui("--top-p", help="nucleus sampling mass (default: provider's)")] = None
    policy: Annotated[Policy | None, Field(description="Post-processing policy (\"robust\" or \"paper\"); default: the "
                                           "template family's. A plan's config holds the policy it resolved to."),
                      Ui("--policy", help="post-processing policy (default: paper for the paper's templates, so a "
                                          "default run is on the paper's protocol; robust for the others)")] = None
    options: Annotated[ModelOptions, Field(description="Extra model options merged over the models-file entry."),
                       Ui("--option", "KEY=VALUE", "model option (VALUE parsed as JSON when it can be), repeatable",
                          nested={"max_reply_bytes": Ui("--max-reply-bytes", "N", "largest reply read, in bytes "
                                                        "(default 1048576 = 1 MiB); a bigger one fails the sample as "
                                                        "too_large and keeps its start (same as --option "
                                                        "max_reply_bytes=N)", unit="bytes")})] \
        = Field(default_factory=ModelOptions)
    models_file: Annotated[str | None, Field(description="Model registry file; default: discovered."),
                           Ui("--models", "FILE", "model registry file (TOML or YAML)", dest="models_file")] = None
    retry: Annotated[RetryPolicy, Field(description="Retry and timeout settings."),
                     Ui(nested={"max_attempts": Ui("--max-attempts",
                                                   help="attempts per request, retries included (default 6)"),
                                "timeout": Ui(TIMEOUT_FLAG, unit="seconds for the whole request",
                                              help="deadline in seconds for each HTTP request, the whole reply "
                                                   "included (default 60)")})] = Field(default_factory=RetryPolicy)
    checkpoint_every: Annotated[int, Field(ge=1, description="Rewrite the table after this many new completions."),
                                Ui("--checkpoint-every", help="rewrite the table every N replies (default 50)")] = 50
    fail_fast_after: Annotated[int, Field(description="Stop the run when this many first requests all fail for the "
                                          "same non-retryable reason.")] = 20
    cache_dir: Annotated[str | None, Field(description="Response cache folder; default ``<home>/responses``.")] = None
    structured: Annotated[bool, Field(strict=True, description="Ask the provider to guarantee the reply's JSON shape; part of "
                                      "the cache key, run id and protocol."),
                          Ui("--structured", help="ask the provider to guarantee the reply's JSON shape "
                             "(response_format json_schema, Anthropic output_config, grammar-constrained local "
                             "decoding); a separate configuration: it no longer measures instruction following",
                             widget="checkbox", key="structured", label="Structured output",
                             widget_help=STRUCTURED_WIDGET_HELP)] = False
    batch_size: Annotated[_Whole | None, Field(description="Samples per forward pass for in-process models; "
                                               "``None``: the provider's measured default. Not part of the cache key."),
                          Ui("--batch-size", help="local models: samples per forward pass (default 8, measured: see "
                                                  "docs/performance.md)")] = None
    batch: Annotated[bool, Field(strict=True, description="Send the requests through the provider's batch API. Not part of the "
                                 "cache key or run id."),
                     Ui("--batch", help="send the requests through the provider's batch API (OpenAI Batch API, "
                        "Anthropic Message Batches): about half the price, answered within 24 h; the batch id is kept "
                        "in the run folder, so running the same command again collects it instead of submitting "
                        "twice", widget="checkbox", key="batch", label="Batch API", widget_help=BATCH_WIDGET_HELP)] \
        = False
    batch_wait: Annotated[Annotated[float, Field(ge=0)] | None,
                          Field(description="With ``batch``: seconds to wait for the batch; ``None`` until it ends, "
                                "``0`` submit and return."),
                          Ui("--batch-wait", "SECONDS", "with --batch: stop waiting after SECONDS (0: submit and "
                             "exit); the batch keeps running and the same command collects it later (default: wait "
                             "until it ends)", unit="seconds")] = None
    batch_poll: Annotated[float, Field(gt=0, description="With ``batch``: seconds between two status requests."),
                          Ui("--batch-poll", "SECONDS", BATCH_POLL_HELP, unit="seconds")] = 30.0
    batch_fallback: Annotated[BatchFallback, Field(description="The requests of a batch that failed as a whole: "
                                                   "``stop`` or ``interactive``. Not part of the cache key or run id."),
                              Ui("--batch-fallback", help=BATCH_FALLBACK_HELP)] = "stop"

    @field_validator("options", mode="wrap")
    @classmethod
    def _options_in_given_order(cls, value: Any, check: ValidatorFunctionWrapHandler) -> Any:
        """The options checked, in the order given: pydantic puts a ``TypedDict``'s typed keys first, and
        ``resume.json``, the manifest and the printed command keep the user's order."""
        checked = check(value)
        return {key: checked[key] for key in value} if isinstance(value, dict) else checked

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``retry`` as an object); :meth:`from_dict` inverts it. Jobs store it in
        ``job.json`` and runs in ``resume.json``, so a front end never passes a config as argv."""
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "GenerationConfig":
        """The config of :meth:`to_dict`; unknown keys are an error naming them, a bad value one line."""
        unknown = sorted(set(data) - set(cls.model_fields))
        if unknown:
            raise ConfigurationError(f"generation config: unknown field(s) {', '.join(unknown)}")
        return validated(cls, data)
