"""The judge's path from the Metrics page to the HTTP request, measured on the real thing.

The Metrics page launches the judge (AppTest, a click), the job process and its step child run,
and the judge's requests reach the fake server. An audit hook (Python's ``sys.addaudithook``, put in
every process through a ``sitecustomize`` on ``PYTHONPATH``: nothing in the library knows of it)
records the call stack at the three moments the path moves on: the page starting the job process,
the job process starting the step, and the step calling the provider's ``generate`` for a judge
request (watched from the provider's reachability check on, in the thread that then sends). The repository files on those stacks are the path; docs/development.md
("Following one request") lists them. Their number is not a target (issue 38): the test keeps the
documentation true.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.fakes.fixtures import openai_server  # noqa: F401 - fixture
from tests.fakes.judge import judge_script
from tests.test_app import open_page, wait_for
from tests.test_judge import _sample_run

ROOT = Path(__file__).resolve().parents[1]

PROBE = '''
import itertools, json, os, sys

_count = itertools.count()


def _stack():
    frame, files = sys._getframe(2), []
    while frame is not None:
        files.append(frame.f_code.co_filename)
        frame = frame.f_back
    return files[::-1]


def _hook(event, args):
    out = os.environ.get("PERSOBENCH_PATH_PROBE")
    if not out:
        return
    if event == "subprocess.Popen":
        argv = [str(a) for a in (args[1] or [])]
        if not any("persobench.jobs" in a for a in argv):
            return
        record = {"event": "spawn", "argv": argv}
    elif event == "socket.connect":
        address = args[1]
        if not (isinstance(address, tuple) and len(address) >= 2
                and str(address[1]) == os.environ.get("PERSOBENCH_PATH_PROBE_PORT")):
            return
        # The provider's reachability check, in the thread that sends next: from here on, watch for
        # the provider's generate() (the SDK connects in a task of its own, with a stack of its own).
        sys.setprofile(_profile)
        return
    else:
        return
    _save(out, record, _stack())


def _profile(frame, event, arg):
    code = frame.f_code
    if event == "call" and code.co_name == "generate" and code.co_filename.endswith("openai_provider.py"):
        sys.setprofile(None)
        files = []
        while frame is not None:
            files.append(frame.f_code.co_filename)
            frame = frame.f_back
        _save(os.environ["PERSOBENCH_PATH_PROBE"], {"event": "request"}, files[::-1])


def _save(out, record, files):
    record.update(files=files, pid=os.getpid())
    with open(os.path.join(out, f"{os.getpid()}-{next(_count)}.json"), "w") as handle:
        json.dump(record, handle)


sys.addaudithook(_hook)
'''


def _repo_files(stack: list[str]) -> list[str]:
    """The repository's own files on a stack (outermost first, each once): not the tests, not the
    libraries, not Python's."""
    seen: dict[str, None] = {}
    for name in stack:
        path = Path(name)
        if not path.is_absolute() or ".venv" in path.parts or "site-packages" in path.parts:
            continue
        try:
            relative = path.resolve().relative_to(ROOT)
        except ValueError:
            continue
        if relative.parts[0] in ("persobench", "pages") or relative.name == "app.py":
            seen.setdefault(relative.as_posix(), None)
    return list(seen)


def _documented_path() -> list[str]:
    """The files of docs/development.md's "Following one request" table, in order."""
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    section = text.split("## Following one request", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| \d+ \| [a-z]+ \| `([^`]+)` \|", section, flags=re.M)


def test_the_judges_path_from_the_metrics_page_to_the_request_is_the_documented_one(
        tmp_path, monkeypatch, openai_server):
    from persobench.jobs import JobManager

    probe_dir, records = tmp_path / "probe", tmp_path / "records"
    probe_dir.mkdir()
    records.mkdir()
    (probe_dir / "sitecustomize.py").write_text(PROBE)
    namespace: dict = {}
    exec(compile(PROBE, str(probe_dir / "sitecustomize.py"), "exec"), namespace)  # this (the app's) process
    home = tmp_path / "home"
    monkeypatch.setenv("PERSOBENCH_HOME", str(home))
    monkeypatch.setenv("PERSOBENCH_PATH_PROBE", str(records))
    monkeypatch.setenv("PERSOBENCH_PATH_PROBE_PORT", openai_server.url.rsplit(":", 1)[1])
    monkeypatch.setenv("PYTHONPATH", str(probe_dir))
    store, samples = _sample_run(home)
    openai_server.script = judge_script({}, default="entailment")

    at = open_page("pages/metrics.py")
    at.toggle(key="metrics_judge_on").set_value(True).run()
    at.text_input(key="metrics_judge_model").input("openai:judge-model").run()
    at.text_input(key="metrics_judge_base_url").input(openai_server.base_url).run()
    at.toggle(key="metrics_judge_estimate").set_value(True).run()
    at.button(key="metrics_judge_launch").click().run()
    assert not at.exception
    job = wait_for(lambda: (s := JobManager(home).jobs()) and not s[0].active and s[0], timeout=180)
    assert job.state == "completed", job.message
    assert len(openai_server.requests) == sum(2 + len(s.persona_sentences()) for s in samples)

    found = [json.loads(p.read_text()) for p in sorted(records.glob("*.json"))]
    spawns = [r for r in found if r["event"] == "spawn"]
    requests = [r for r in found if r["event"] == "request"]
    assert len(spawns) == 2 and requests, json.dumps(found, indent=0)[-6000:]
    launch, step = sorted(spawns, key=lambda r: r["argv"][-1] == "job", reverse=True)
    assert launch["argv"][-2:] == ["job", launch["argv"][-1]] and step["argv"][-3] == "step"
    on_the_way = {*_repo_files(launch["files"]), *_repo_files(step["files"]), *_repo_files(requests[0]["files"])}

    assert _repo_files(launch["files"]) == ["pages/metrics.py", "persobench/jobs/manager.py"]
    assert _repo_files(step["files"]) == ["persobench/jobs/job_process.py"]
    request_files = _repo_files(requests[0]["files"])
    assert request_files[0] == "persobench/jobs/job_process.py"
    assert request_files[-1] == "persobench/providers/openai_provider.py"

    documented = _documented_path()
    # The form builds the JudgeConfig before the click, so it is on no stack; the table lists it first.
    assert documented[:2] == ["pages/metrics.py", "persobench/app/judge_form.py"]
    assert set(documented) - {"persobench/app/judge_form.py"} == on_the_way, sorted(on_the_way)

