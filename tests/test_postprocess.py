"""Tests for persobench.generation.postprocess: statuses, both policies, the paper's published data, properties."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from persobench.generation.postprocess import POLICIES, ParsedOutput, Status, parse_output, summarize

REPO = Path(__file__).resolve().parents[1]
REFERENCE = Path(os.environ.get("PERSOBENCH_REFERENCE", REPO.parent / "shared" / "persobench-reference"))
RAW_DIR = REFERENCE / "Raw Responses"
PROCESSED_DIR = REFERENCE / "Responses"
needs_reference = pytest.mark.skipif(
    not RAW_DIR.is_dir() or not PROCESSED_DIR.is_dir(),
    reason=f"paper reference data not found at {REFERENCE} (set PERSOBENCH_REFERENCE)",
)

csv.field_size_limit(sys.maxsize)


def _raw_files() -> list[Path]:
    return sorted(RAW_DIR.glob("*/*.csv")) if RAW_DIR.is_dir() else []


def _twinned_files() -> list[Path]:
    return [p for p in _raw_files() if (PROCESSED_DIR / p.parent.name / p.name).is_file()]


def _file_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@cache
def _column(path: Path, column: str = "gen_response") -> tuple[str, ...]:
    # The csv module keeps empty cells as "" (pandas would turn them into NaN).
    with path.open(encoding="utf-8", newline="") as handle:
        return tuple(row[column] for row in csv.DictReader(handle))


# ------------------------------------------------------------------------------------------------
# robust policy: one example per status


@pytest.mark.parametrize(
    "raw",
    [
        '{"response": "Hi there!"}',
        'Sure! Here is my reply:\n{"response": "Hi there!"}\nHope that helps.',
        '```json\n{\n  "response": "Hi there!"\n}\n```',
        '```\n{"response": "Hi there!"}\n```\nNote: I kept it short.',
        '{"response": "Hi there!", "meta": {"tone": {"warm": true}}}',  # nested braces
        'Unannotated Response:\n{"response": "Hi there!"}\n\nAnnotated Response:\n{"response": "Hey',
        '{"persona": {"name": "Ann"}}\n{"response": "Hi there!"}',  # the object with "response" wins
        '{"output": {"response": "Hi there!"}}',  # a wrapper object
    ],
)
def test_robust_extracts_reply(raw: str) -> None:
    parsed = parse_output(raw)
    assert parsed.status == Status.OK
    assert parsed.response == "Hi there!"
    assert parsed.error is None
    start, end = parsed.json_span
    assert "Hi there!" in raw[start:end] and raw[start] == "{" and raw[end - 1] == "}"


def test_robust_accepts_raw_newlines_and_braces_inside_strings() -> None:
    raw = '{\n  "response": "Line one\nline two {not a brace problem}"\n}'
    assert parse_output(raw, policy="paper").status != Status.OK  # strict json.loads refuses it
    parsed = parse_output(raw)
    assert parsed.status == Status.OK
    assert parsed.response == "Line one\nline two {not a brace problem}"


def test_reasoning_is_extracted_and_a_missing_one_is_noted_not_failed() -> None:
    cot = '{"reasoning": "User1 likes dogs.", "response": "Dogs are great!"}'
    parsed = parse_output(cot, require_reasoning=True)
    assert (parsed.status, parsed.reasoning, parsed.response) == (Status.OK, "User1 likes dogs.", "Dogs are great!")
    assert parsed.note is None
    # The paper never failed a CoT reply for lacking its reasoning; the robust policy records it.
    vanilla = parse_output('{"response": "Dogs are great!"}', require_reasoning=True)
    assert (vanilla.status, vanilla.response, vanilla.reasoning) == (Status.OK, "Dogs are great!", None)
    assert vanilla.error is None and "reasoning missing" in vanilla.note
    assert parse_output('{"response": "Dogs are great!"}').note is None
    blank = parse_output('{"reasoning": "  ", "response": "Dogs!"}', require_reasoning=True)
    assert blank.status == Status.OK and "empty" in blank.note


@pytest.mark.parametrize("raw,status,response", [
    ('```json\n{"response": "Hi there!"}\n```', "ok", "Hi there!"),
    ('{\n  "reasoning": "short"\n  "response": "Hi"\n}', "invalid_json", None),  # the missing comma, copied
    ('Sure! {"response": "Hi there!"}', "invalid_json", None),  # prose around the JSON
    ('{"response": "Hi"} {"response": "again"}', "invalid_json", None),
    ('{"reply": "Hi"}', "missing_field", None),
    ('{"response": ""}', "empty", None),
    ('{"response": 42}', "ok", "42"),
    ('[{"response": "Hi"}]', "invalid_json", None),
    ('{\n  "response": "cut off by the token', "truncated", None),
])
def test_paper_policy_closed_style_is_strict_json_of_the_whole_reply(raw: str, status: str, response) -> None:
    parsed = parse_output(raw, policy="paper", paper_style="closed-fences")
    assert (parsed.status, parsed.response) == (status, response)
    # The open-source style finds the non-greedy {...} inside prose that the closed style rejects.
    if raw.startswith("Sure!"):
        assert parse_output(raw, policy="paper", paper_style="open").response == "Hi there!"


def test_paper_closed_style_matches_the_notebook_code() -> None:
    """The notebook's own lines, run beside the policy on a spread of replies."""
    import json

    def notebook(text: str):
        response_text = text.strip().replace('```json', '').replace('```', '').strip()
        try:
            data = json.loads(response_text)
            value = data.get('response', '')
        except json.JSONDecodeError:
            return None
        except Exception:  # noqa: BLE001 - the notebook's outer handler (a list has no .get)
            return None
        return None if value in ('', None) else str(value)

    replies = ['{"response": "a"}', '```\n{"response": "b", "reasoning": "r"}\n```', ' {"response": "c"}\n',
               '{"response": null}', '{"x": 1}', 'text', '', '"just a string"', '{"response": "d",}',
               '{"response": "e"}\n```', '```json{"response": "f"}```', '{"response": true}']
    for raw in replies:
        parsed = parse_output(raw, policy="paper", paper_style="closed-fences")
        assert parsed.response == notebook(raw), raw


@pytest.mark.parametrize(
    "raw",
    [
        '{\n  "response": "The Nazareth House is a historic complex built between 1924 and',
        '```json\n{\n  "reasoning": "User1 loves history.",\n  "response": "You would',
        '{"response": "He said \\"hi',  # cut inside an escape-laden string
        '{"response": "ok"',  # string closed, object not
        '{"reasoning": "a", "response": "b",',
        "Here is the JSON:\n{",
        '{"response": "I \\u00',  # cut inside a unicode escape
        '{"response": "The "best" view is from the',  # stray unescaped quotes, then cut
    ],
)
def test_text_ending_inside_an_object_is_truncated(raw: str) -> None:
    parsed = parse_output(raw)
    assert parsed.status == Status.TRUNCATED, parsed
    assert parsed.response is None and "ends inside" in parsed.error


def test_finish_reason_decides_between_truncated_and_malformed() -> None:
    prose = "Unannotated Response:\nThis is the Truman Galusha House, built in 1790 and"
    assert parse_output(prose).status == Status.INVALID_JSON
    for reason in ("length", "max_tokens", "MAX_TOKENS"):
        assert parse_output(prose, finish_reason=reason).status == Status.TRUNCATED
    # The model stopped by itself, so an unclosed object is malformed output, not a cut.
    stopped = parse_output('{"response": "abc', finish_reason="stop")
    assert stopped.status == Status.INVALID_JSON and "never closed" in stopped.error
    # A complete reply is usable even when generation ran on until the limit.
    assert parse_output('{"response": "abc"} and then some', finish_reason="length").status == Status.OK


@pytest.mark.parametrize(
    "raw, detail",
    [
        ('{"response": "He said "hi" to me"}', "Expecting"),  # unescaped quotes, but closed
        ('{\n  "reasoning": "r"\n  "response": "x"\n}', "delimiter"),  # missing comma
        ('{"response": "a",}', "Expecting"),
        ("I'd love to go hiking with you this weekend!", "no JSON object"),
        ("{'response': 'single quotes are Python, not JSON'}", "no JSON object"),
        # Broken before the cut: a malformed object, then the model repeats itself until the limit.
        ('{"response": "I\\\'m fine"}\n---\n{"response": "I\\\'m', "Invalid \\escape"),
    ],
)
def test_malformed_json_is_invalid_json(raw: str, detail: str) -> None:
    parsed = parse_output(raw)
    assert parsed.status == Status.INVALID_JSON
    assert parsed.response is None and detail in parsed.error


def test_missing_field() -> None:
    parsed = parse_output('{"reasoning": "User2 is shy.", "reply": "Hello."}')
    assert parsed.status == Status.MISSING_FIELD
    assert "'reply'" in parsed.error and parsed.reasoning == "User2 is shy."
    null = parse_output('{"response": null}')
    assert null.status == Status.MISSING_FIELD and "null" in null.error
    listed = parse_output('{"response": ["a", "b"]}')
    assert listed.status == Status.MISSING_FIELD and "list" in listed.error


@pytest.mark.parametrize("raw", [None, "", "   \n\t ", '{"response": ""}', '```json\n{"response": "  "}\n```'])
def test_empty(raw: str | None) -> None:
    parsed = parse_output(raw)
    assert parsed.status == Status.EMPTY and parsed.response is None and parsed.error


@pytest.mark.parametrize(
    "raw",
    [
        "I'm sorry, but I can't help with that request.",
        "I\u2019m sorry, but I can\u2019t continue this conversation.",
        "As an AI language model, I cannot pretend to have personal experiences.",
        "Sorry, I cannot help with generating that.",
        "I cannot assist with this request.",
    ],
)
def test_refusal(raw: str) -> None:
    parsed = parse_output(raw)
    assert parsed.status == Status.REFUSED and parsed.response is None
    # Refusals are about the content, not the token budget.
    assert parse_output(raw, finish_reason="length").status == Status.REFUSED


def test_persona_reply_that_sounds_like_a_refusal_is_still_a_reply() -> None:
    parsed = parse_output('{"response": "I\'m sorry, but I can\'t make it to the party."}')
    assert parsed.status == Status.OK
    # Ordinary prose that merely mentions being sorry is malformed output, not a refusal.
    assert parse_output("Oh no, I'm sorry to hear about your dog.").status == Status.INVALID_JSON


def test_status_values_and_unknown_policy() -> None:
    assert [s.value for s in Status] == [
        "ok", "truncated", "invalid_json", "missing_field", "empty", "refused", "api_error",
    ]
    assert str(Status.TRUNCATED) == "truncated" and Status("ok") is Status.OK
    parsed = parse_output('{"response": "x"}')
    assert type(parsed.status) is str and parsed.ok and parsed.policy == "robust"
    with pytest.raises(ValueError, match="robust"):
        parse_output("{}", policy="strict")
    with pytest.raises(AttributeError):
        parsed.status = "empty"  # type: ignore[misc]  # frozen


def test_summarize() -> None:
    outputs = [parse_output(t) for t in ['{"response": "a"}', '{"response": "b', "", '{"response": "c"}']]
    counts = summarize([o.status for o in outputs] + [Status.API_ERROR])
    assert list(counts) == [s.value for s in Status]
    assert counts == {
        "ok": 2, "truncated": 1, "invalid_json": 0, "missing_field": 0, "empty": 1, "refused": 0, "api_error": 1,
    }
    assert summarize(outputs)["ok"] == 2
    assert sum(summarize([]).values()) == 0
    with pytest.raises(ValueError, match="bogus"):
        summarize(["ok", "bogus"])


def test_import_stays_light() -> None:
    code = (
        "import sys, persobench.generation.postprocess\n"
        "heavy = sorted(m for m in ('pandas', 'torch', 'numpy') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------------------------------------------------
# paper policy: the notebook's semantics


def test_paper_uses_first_non_greedy_span_with_response() -> None:
    # Non-greedy: the span stops at the first "}", so nested objects never parse for the paper.
    nested = '{"response": "Hi!", "meta": {"a": 1}}'
    assert parse_output(nested, policy="paper").status == Status.INVALID_JSON
    assert parse_output(nested).status == Status.OK
    # Later spans are tried; spans without "response" are skipped.
    raw = '{"broken": "x" "y"} {"name": "Ann"} {"response": "second"} {"response": "third"}'
    parsed = parse_output(raw, policy="paper")
    assert (parsed.status, parsed.response, parsed.policy) == (Status.OK, "second", "paper")
    assert raw[parsed.json_span[0] : parsed.json_span[1]] == '{"response": "second"}'


def test_paper_spans_do_not_overlap() -> None:
    # re.findall resumes after each match: the span "{ {"response": "a"}" fails and the inner "{"
    # is never retried, so this text is invalid for the paper.
    raw = '{ {"response": "a"}'
    assert parse_output(raw, policy="paper").status != Status.OK
    assert parse_output(raw).status == Status.OK


def test_paper_keeps_text_verbatim_and_empty_is_a_failure() -> None:
    parsed = parse_output('{"response": "  spaced out  ", "reasoning": "r"}', policy="paper")
    assert parsed.response == "  spaced out  " and parsed.reasoning == "r"
    assert parse_output('{"response": ""}', policy="paper").status == Status.EMPTY
    assert parse_output('{"response": null}', policy="paper").status == Status.MISSING_FIELD
    # pandas wrote non-string values with str(): the published table holds "42" / "True".
    assert parse_output('{"response": 42}', policy="paper").response == "42"
    assert parse_output('{"response": true}', policy="paper").response == "True"


def test_paper_failures_carry_the_robust_diagnosis() -> None:
    assert parse_output('{"response": "cut off mid', policy="paper").status == Status.TRUNCATED
    assert parse_output("", policy="paper").status == Status.EMPTY
    assert parse_output(None, policy="paper").status == Status.EMPTY
    assert parse_output('{"answer": "x"}', policy="paper").status == Status.MISSING_FIELD


# ------------------------------------------------------------------------------------------------
# the paper's published data


@needs_reference
@pytest.mark.parametrize("raw_path", _twinned_files(), ids=_file_id)
def test_paper_policy_reproduces_published_responses(raw_path: Path) -> None:
    raw = _column(raw_path)
    published = _column(PROCESSED_DIR / raw_path.parent.name / raw_path.name)
    assert len(raw) == len(published) > 0
    mismatches = []
    for row, (text, expected) in enumerate(zip(raw, published)):
        parsed = parse_output(text, policy="paper")
        # The published table holds the reply text, or an empty cell for a failure.
        if parsed.ok != (expected != "") or (parsed.response or "") != expected:
            mismatches.append((row, parsed.status, (parsed.response or "")[:60], expected[:60]))
    assert not mismatches, f"{len(mismatches)} rows differ, first: {mismatches[:3]}"


def test_reference_has_twinned_files() -> None:
    if not RAW_DIR.is_dir():
        pytest.skip(f"paper reference data not found at {REFERENCE}")
    # Guards against the parametrized test above silently collecting nothing.
    assert len(_twinned_files()) >= 20


# One published COT row whose model misspelled the key ("reasonaing"); every other valid COT row
# carries a reasoning string.
_COT_ROWS_WITHOUT_REASONING = {("IT-ConvAI2", "Llama3-1-8B-Instruct-COT", 972)}


@needs_reference
def test_reasoning_is_extracted_exactly_for_cot_files() -> None:
    # The published Responses tables keep only the reply, so reasoning is checked against the mode.
    checked = 0
    missing = set()
    for raw_path in _raw_files():
        cot = raw_path.stem.endswith("-COT")
        for row, text in enumerate(_column(raw_path)):
            parsed = parse_output(text, policy="paper")
            if not parsed.ok:
                continue
            checked += 1
            if cot and parsed.reasoning is None:
                missing.add((raw_path.parent.name, raw_path.stem, row))
            if not cot:
                assert parsed.reasoning is None, (raw_path, row)
            if cot and parsed.reasoning is not None:
                start, end = parsed.json_span
                assert json.loads(text[start:end])["reasoning"] == parsed.reasoning
    assert missing == _COT_ROWS_WITHOUT_REASONING
    assert checked > 20000
    # The paper kept such replies; the robust policy does too and notes the missing reasoning.
    noted = parse_output(_column(RAW_DIR / "IT-ConvAI2" / "Llama3-1-8B-Instruct-COT.csv")[972], require_reasoning=True)
    assert noted.status == Status.OK and noted.reasoning is None and "reasoning missing" in noted.note


@needs_reference
def test_robust_policy_shows_focus_failures_are_truncations() -> None:
    focus = [p for p in _raw_files() if p.parent.name == "FoCus"]
    assert focus
    statuses = []
    for raw_path in focus:
        for text in _column(raw_path):
            if not parse_output(text, policy="paper").ok:
                statuses.append(parse_output(text).status)
    counts = summarize(statuses)
    # Measured on the published data: 2126 of 2391 paper-invalid FoCus rows (88.9%) end inside the
    # JSON object; the rest are prose without JSON or malformed objects.
    assert len(statuses) > 2000
    assert counts["truncated"] / len(statuses) > 0.85, counts
    assert counts["ok"] == 0, counts


@needs_reference
def test_robust_never_loses_a_reply_the_paper_found() -> None:
    for raw_path in _raw_files():
        for row, text in enumerate(_column(raw_path)):
            paper = parse_output(text, policy="paper")
            if paper.ok and paper.response.strip():
                robust = parse_output(text)
                assert robust.ok, (raw_path, row, robust)
                assert robust.response == paper.response, (raw_path, row)


# ------------------------------------------------------------------------------------------------
# properties

_NO_BRACES = st.text(st.characters(blacklist_characters="{}"), max_size=40)
_KEYS = st.text(max_size=8).filter(lambda k: k != "response")
_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
# Nested values never carry a "response" key, so only the top-level one can be picked.
_JSON_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def _replies(draw: st.DrawFn) -> tuple[dict, str]:
    response = draw(st.text(min_size=1).filter(lambda s: s.strip()))
    extra = draw(st.dictionaries(_KEYS, _JSON_VALUES, max_size=3))
    obj = {**extra, "response": response} if draw(st.booleans()) else {"response": response, **extra}
    indent = draw(st.sampled_from([None, 0, 2, 4, "\t"]))
    body = json.dumps(obj, indent=indent, ensure_ascii=draw(st.booleans()))
    return obj, body


@st.composite
def _wrapped(draw: st.DrawFn) -> tuple[dict, str, int, int]:
    """A reply object with prose and an optional code fence around it, and the object's span."""
    obj, body = draw(_replies())
    before, after = draw(_NO_BRACES), draw(_NO_BRACES)
    if draw(st.booleans()):
        before, after = before + "\n```" + draw(st.sampled_from(["json", "JSON", ""])) + "\n", "\n```\n" + after
    return obj, before + body + after, len(before), len(before) + len(body)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_wrapped())
def test_property_wrapped_reply_parses_exactly(case: tuple[dict, str, int, int]) -> None:
    obj, text, start, end = case
    parsed = parse_output(text)
    assert parsed.status == Status.OK, parsed
    assert parsed.response == obj["response"]
    assert parsed.json_span == (start, end)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_wrapped(), st.data())
def test_property_cut_reply_is_truncated(case: tuple[dict, str, int, int], data: st.DataObject) -> None:
    _obj, text, start, end = case
    cut = data.draw(st.integers(min_value=start + 1, max_value=end - 1), label="cut")
    parsed = parse_output(text[:cut])
    assert parsed.status == Status.TRUNCATED, (text[:cut], parsed)
    assert parsed.response is None


_JSONISH = st.text(st.sampled_from(list('{}[]":,\\ \n\tab01-etnrsuopl')), max_size=80)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.text(max_size=200), _JSONISH, st.none()),
    st.sampled_from(POLICIES),
    st.sampled_from([None, "length", "stop", "max_tokens", ""]),
    st.booleans(),
)
def test_property_never_raises(text: str | None, policy: str, finish_reason: str | None, require: bool) -> None:
    parsed = parse_output(text, policy=policy, finish_reason=finish_reason, require_reasoning=require)
    assert isinstance(parsed, ParsedOutput)
    assert parsed.status in {s.value for s in Status} - {Status.API_ERROR.value}
    assert (parsed.status == Status.OK) == (parsed.response is not None)
    assert (parsed.status == Status.OK) == (parsed.error is None)
    if parsed.json_span is not None:
        assert text[parsed.json_span[0]] == "{" and text[parsed.json_span[1] - 1] == "}"


def test_pathological_inputs_do_not_raise() -> None:
    for text in ["{" * 5000, '{"a":' * 3000, "[" * 3000 + "{", '{"response": "' + "\\" * 999, "}" * 100 + "{"]:
        for policy in POLICIES:
            assert parse_output(text, policy=policy).status != Status.OK


def test_paper_policy_strips_code_fences_for_gemini_only() -> None:
    """closed_source_models.ipynb: the Gemini cell removes "```json"/"```" before json.loads; the
    OpenAI cell (gpt-3.5-turbo, gpt-4-turbo, gpt-4o-mini) parses the reply as it came."""
    from persobench.generation.plan import paper_parse_style

    fenced = '```json\n{"response": "Hi"}\n```'
    assert paper_parse_style("paper", "openai", "gpt-4o-mini") == "closed"
    assert paper_parse_style("paper", "openai", "gemini-1.5-pro") == "closed-fences"
    assert paper_parse_style("paper-open", "openai", "gemini-1.5-pro") == "open"
    gpt = parse_output(fenced, policy="paper", paper_style="closed")
    assert gpt.status == "invalid_json" and gpt.response is None
    assert parse_output(fenced, policy="paper", paper_style="closed-fences").response == "Hi"
    # json.loads itself tolerates surrounding whitespace: so does the OpenAI style.
    assert parse_output(' {"response": "Hi"}\n', policy="paper", paper_style="closed").response == "Hi"
