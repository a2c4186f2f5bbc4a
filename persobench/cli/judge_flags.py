"""``score --judge``: the flags, the dry run and the report of the LLM judge that labels NLI pairs.

Kept apart from :mod:`persobench.cli.score_command` so that the command wires it in a few lines: build the
judge (:func:`judge_from_args`), pass it to the profile, and print :func:`report` at the end;
``--dry-run`` prints :func:`dry_run` instead of scoring.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any, Callable

from persobench.cli.command_support import CLIError
from persobench.scoring import JUDGED_METRICS_TEXT, estimate_runs
from persobench.config import JudgeConfig, add_config_flags, config_from_args
from persobench.metrics import JUDGE_FLAGS, resolve_judge
from persobench.metrics import JudgeLabeller, judge_batch_note
from persobench.llm import batch_cost
from persobench.providers import supports_batch
from persobench.core import public_address, public_url

#: Flags whose value may carry credentials: printed in their public form.
_PUBLIC_FORMS = {"--judge-base-url": public_url, "--ray-address": public_address}


def add_arguments(score: argparse.ArgumentParser) -> None:
    """The judge's flags on the ``score`` parser."""

    group = score.add_argument_group(
        "LLM judge", f"label the NLI pairs of {JUDGED_METRICS_TEXT} with an LLM "
        "instead of the NLI model; scores are stored under a profile key naming the judge and its prompt")
    add_config_flags(group, JudgeConfig)  # --judge ... --batch-fallback, from the judge's field table
    score.add_argument("--dry-run", action="store_true",
                       help="with --judge: show the prompt, the pairs to label, tokens and estimated cost; "
                            "send and write nothing")


def judge_from_args(args: argparse.Namespace, home: Any) -> Any:
    """The resolved :class:`~persobench.metrics.judge.judge_config.Judge` of ``--judge`` and its flags
    (None without it): the :class:`~persobench.config.judge.JudgeConfig` the flags build, checked
    by its field table (the line the app's form shows for the same value), resolved against ``home``."""

    if args.judge is None:
        given = [JUDGE_FLAGS[name] for name in ("base_url", "max_cost", "timeout", "prompt", "plain")
                 if getattr(args, JUDGE_FLAGS[name].lstrip("-").replace("-", "_"))]
        given += [flag for flag, value in (("--dry-run", args.dry_run), ("--batch", args.batch),
                                           ("--batch-fallback", args.batch_fallback != "stop")) if value]
        if given:
            raise CLIError(f"{', '.join(given)} need(s) --judge PROVIDER:MODEL")
        return None
    return resolve_judge(config_from_args(JudgeConfig, args), home=home)


def _money(value: float | None) -> str:
    return "unknown (no prices for this judge)" if value is None else f"${value:,.4f}"


def dry_run(profile: Any, runs: list[Any], samples_for: Callable[[Any], Any], metrics: list[str] | None) -> int:
    """Print the judge, its prompt, and per run and in total the pairs, tokens and cost; send nothing."""

    judge = profile.judge
    template = judge.template
    form = "structured output: JSON {\"label\": enum}" if judge.structured else "one-word answer"
    print(f"judge {judge.model_name}, prompt {template.version} ({template.sha256}), {form}; "
          f"profile key {profile.key}")
    messages = template.messages("{premise}", "{hypothesis}", structured=judge.structured)
    for message in messages:
        print(f"--- {message['role']} ---")
        print(message["content"])
    print("--- pairs ---")
    total = estimate_runs(profile, runs, samples_for, metrics, show=print)
    print(f"total: {total.pairs} distinct pair(s), {total.cached} in the response cache, {total.requests} "
          f"request(s) to send, ~{total.prompt_tokens:,} prompt tokens, at most {total.completion_tokens:,} "
          f"completion tokens, estimated cost at most {_money(total.cost_usd)}")

    if supports_batch(judge.spec.provider):
        cost = batch_cost(judge.spec, total.prompt_tokens, total.completion_tokens)
        print(f"estimated batch cost: at most {_money(cost)} (batch API"
              + (", this command: --batch)" if judge.batch is not None else "; add --batch)"))
    if judge.max_cost is not None and total.cost_usd is not None and total.cost_usd > judge.max_cost:
        print(f"note: above --judge-max-cost {_money(judge.max_cost)}: the judge would stop at the cap")
    if supports_batch(judge.spec.provider) and (note := judge_batch_note(JudgeLabeller(judge))):
        print(note)  # pairs a batch of this judge still holds
    print("dry run: nothing sent, nothing written")
    return 0


def check_cost(profile: Any, runs: list[Any], samples_for: Callable[[Any], Any], metrics: list[str] | None) -> None:
    """Before sending: say when the upper-bound estimate passes ``--judge-max-cost``."""
    judge = profile.judge
    if judge is None or judge.max_cost is None:
        return
    total = estimate_runs(profile, runs, samples_for, metrics)
    if total.cost_usd is not None and total.cost_usd > judge.max_cost:
        print(f"note: the judge's {total.requests} request(s) may cost up to {_money(total.cost_usd)}, above "
              f"--judge-max-cost {_money(judge.max_cost)}: it stops sending at the cap and the pairs left get no value")


def report(profile: Any, scored: Any) -> int:
    """Print what the judge did in this pass (``scored``: the
    :class:`~persobench.scoring.outcome.ScoreReport`, summed over every process that computed); the
    number of pairs left without an answer."""
    if profile.judge is None or scored.judge is None:
        return 0

    s = scored.judge
    print(f"judge {profile.judge.model_name} (prompt {profile.judge.template.version}): {s.pairs} pair(s): "
          f"{s.cached} from the response cache, {s.sent} answered now ({s.attempts} request(s)); "
          f"{s.unparseable} unparseable and {s.unanswered} unanswered (counted, no value); "
          f"~{s.prompt_tokens:,} prompt + {s.completion_tokens:,} completion tokens, cost {_money(s.cost_usd)}")
    why = [f"{n} {reason}" for n, reason in ((getattr(s, "over_cap", 0), "over the cost cap"),
                                               (getattr(s, "run_deleted", 0), "for a deleted run"),
                                               (getattr(s, "refused_usage", 0), "refused for unusable token usage"))
           if n]
    if why:
        print(f"  not labelled: {', '.join(why)}")
    if getattr(s, "timed_out", 0):
        print(f"  {s.timed_out} request(s) timed out, each counted at its reserved cost (the server may have "
              "answered and billed it)")
    if s.first_error:
        print(f"  first failed request: {s.first_error}")
    return s.unanswered


def fallback_command(args: argparse.Namespace) -> str:
    """The command the user gave, credentials left out, with ``--batch-fallback interactive``: what
    sends the requests of a failed judge batch one by one."""
    words, given = [], list(getattr(args, "command_line", []))
    while given:
        word = given.pop(0)
        flag, sep, value = word.partition("=")
        if flag == "--batch-fallback":
            if not sep and given:
                given.pop(0)
            continue
        if flag in _PUBLIC_FORMS:
            if sep:
                word = f"{flag}={_PUBLIC_FORMS[flag](value)}"
            elif given:
                words.append(word)
                word = _PUBLIC_FORMS[flag](given.pop(0))
        words.append(word)
    return shlex.join(["python", "-m", "persobench", *words, "--batch-fallback", "interactive"])
