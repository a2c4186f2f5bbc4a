"""The LLM judge as a user gives it (:class:`JudgeConfig`): the one field table that ``score --judge``'s
flags, the app's judge form and a job's stored ``score`` step are made from. Pure data: the model is
resolved (provider, prompt template, prices, batch support) by
:func:`persobench.metrics.judge.judge_config.resolve_judge`, which the CLI and the form both call.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from persobench.config.fields import ConfigModel, Ui
from persobench.config.retry_policy import RetryPolicy

#: What a batch that failed as a whole leaves its requests to (``--batch-fallback``).
BatchFallback = Literal["stop", "interactive"]
#: The ``score`` flag that sets a judge request's deadline (named when a request runs out of time).
JUDGE_TIMEOUT_FLAG = "--judge-timeout"
#: The judge's concurrency choices the forms offer first.
CONCURRENCY_CHOICES = ("8", "auto", "1", "4", "16", "32")
#: ``--batch-wait``'s help for the judge (``run`` says it in its own words).
JUDGE_BATCH_WAIT_HELP = ("with --batch: stop waiting after SECONDS (0: submit and go on); pairs still waiting get no "
                         "value until a later command collects them (default: wait until the batch ends)")
#: ``--batch-poll`` and ``--batch-fallback``, the same words for ``run`` and ``score --judge``.
BATCH_POLL_HELP = "with --batch: seconds between two status requests (default 30)"
BATCH_FALLBACK_HELP = ("the requests of a batch that failed as a whole (refused by the provider, or every line an "
                       "error): stop (default: the command stops in one line naming the failure and the command that "
                       "sends them) or interactive (send them one by one, at full price)")
#: What a form says of the Batch API checkbox.
JUDGE_BATCH_WIDGET_HELP = ("Send the judge's requests through the provider's batch API (OpenAI Batch API, Anthropic "
                           "Message Batches): about half the price, answered within 24 hours; the job waits for the "
                           "batch. Judges without a batch API cannot use it.")


class JudgeConfig(ConfigModel):
    """Which model judges, with which prompt, and how its requests are sent."""

    model: Annotated[str, Field(min_length=1, description="The judge model (any spec ``run`` takes: "
                                "``openai:gpt-4o-mini``, a preset, a models-file name)."),
                     Ui("--judge", "PROVIDER:MODEL", "the judge: any model spec `run` takes (openai:gpt-4o-mini, a "
                        "preset, a models-file name)", widget="text", key="judge_model", label="Judge model",
                        widget_help="Any model a run takes: provider:model, a preset, or a models-file name.",
                        initial="openai:gpt-4o-mini")]
    base_url: Annotated[str | None, Field(description="Server URL of an OpenAI-compatible judge; stored in its "
                                          "public form (credentials come from the environment)."),
                        Ui("--judge-base-url", "URL", "server URL of an OpenAI-compatible judge (vLLM, Ollama, ...)",
                           widget="text", key="judge_base_url", label="Judge base URL (OpenAI-compatible servers)",
                           placeholder="http://localhost:11434/v1")] = None
    concurrency: Annotated[Annotated[int, Field(ge=1)] | Literal["auto"],
                           Field(description="Requests in flight, or ``\"auto\"`` (raised while replies come back, "
                                 "halved on a 429 or 5xx)."),
                           Ui("--judge-concurrency", "N|auto", "judge requests in flight, or auto (raised while "
                              "replies come back, halved on 429/5xx); default 8", widget="select",
                              key="judge_concurrency", label="Judge requests in flight",
                              options=CONCURRENCY_CHOICES)] = 8
    max_cost: Annotated[Annotated[float, Field(ge=0)] | None,
                        Field(description="Stop sending once the judge's estimated spend (USD) would pass this; "
                              "``None``: no cap."),
                        Ui("--judge-max-cost", "USD", "stop sending judge requests once their estimated cost would "
                           "pass this many US dollars (pairs left unlabelled get no value; a later run with a higher "
                           "cap finishes them)", widget="number", key="judge_max_cost",
                           label="Max judge cost (USD, 0 = no cap)", initial=0.0, zero_is_none=True, step=0.5,
                           unit="US dollars")] = None
    retry: Annotated[RetryPolicy | None,
                     Field(description="Retry and timeout settings; ``None``: generation's defaults. The CLI and "
                           "the form offer its request deadline (``timeout``)."),
                     Ui(nested={"timeout": Ui(JUDGE_TIMEOUT_FLAG, "SECONDS", "deadline in seconds for each judge "
                                              "request, the whole reply included (default 60); a request past it is "
                                              "retried, then the pair is left unlabelled", widget="number",
                                              key="judge_timeout", label="Judge request timeout (seconds)",
                                              widget_help="Deadline for each judge request, the whole reply "
                                              "included; a request past it is retried, then the pair is left "
                                              "unlabelled.", initial=60.0, step=5.0,
                                              unit="seconds for the whole request")})] = None
    prompt: Annotated[str | None, Field(description="Version of the prompt template; ``None``: the package's "
                                        "current one."),
                      Ui("--judge-prompt", "VERSION", "version of the judge's prompt template (default: the "
                         "package's current one, shown by --dry-run)")] = None
    plain: Annotated[bool, Field(strict=True, description="Ask for the one-word answer even where the provider has structured "
                                 "output (a server that takes no ``response_format``). Part of the identity."),
                     Ui("--judge-plain", help="ask the judge for a one-word label instead of structured output (for "
                        "servers that take no response_format)")] = False
    batch: Annotated[bool, Field(strict=True, description="Send through the provider's batch API first (about half the price). "
                                 "Not part of the identity: the same requests."),
                     Ui("--batch", help="send the judge's requests through the provider's batch API (OpenAI, "
                        "Anthropic): about half the price, answered within 24 h; a later command collects a batch "
                        "still running", widget="checkbox", key="judge_batch", label="Batch API",
                        widget_help=JUDGE_BATCH_WIDGET_HELP)] = False
    batch_wait: Annotated[Annotated[float, Field(ge=0)] | None,
                          Field(description="With ``batch``: seconds to wait for the batch; ``None`` until it ends."),
                          Ui("--batch-wait", "SECONDS", JUDGE_BATCH_WAIT_HELP, unit="seconds")] = None
    batch_poll: Annotated[float, Field(gt=0, description="With ``batch``: seconds between two status requests."),
                          Ui("--batch-poll", "SECONDS", BATCH_POLL_HELP, unit="seconds")] = 30.0
    batch_fallback: Annotated[BatchFallback, Field(description="The requests of a batch that failed as a whole: "
                                                   "``stop`` or ``interactive`` (sent one by one at full price)."),
                              Ui("--batch-fallback", help=BATCH_FALLBACK_HELP)] = "stop"
    max_concurrency: Annotated[int, Field(ge=1, description="The most requests in flight ``\"auto\"`` may reach.")] = 32

    @model_validator(mode="before")
    @classmethod
    def _older_forms(cls, data: Any) -> Any:
        """The judge dicts older ``job.json`` files hold: a flat ``timeout`` (before the retry policy was
        stored whole) and ``null`` for the batch fields of a judge without the batch API."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "timeout" in data and "retry" not in data:
            timeout = data.pop("timeout")
            data["retry"] = None if timeout is None else {"timeout": timeout}
        for name in ("plain", "batch", "batch_poll", "batch_fallback", "concurrency", "max_concurrency"):
            if name in data and data[name] is None:
                del data[name]
        return data
