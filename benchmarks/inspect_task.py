"""The inspect_ai task of ``benchmarks/peer.py``: the prompts PersoBench would send, one sample each,
answered by ``generate()`` and nothing else (no scorer), so both tools send the same requests.

Runs in the benchmark's own environment (``make bench-peer``), never in PersoBench's: it imports
only inspect_ai and reads the messages from the JSON file ``peer.py`` writes
(``inspect eval inspect_task.py -T messages=FILE``: a list of chat message lists).
"""

import json

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageSystem, ChatMessageUser
from inspect_ai.solver import generate


@task
def persobench_prompts(messages: str) -> Task:
    with open(messages, encoding="utf-8") as handle:
        prompts = json.load(handle)
    samples = [
        Sample(id=index, input=[ChatMessageSystem(content=m["content"]) if m["role"] == "system"
                                else ChatMessageUser(content=m["content"]) for m in chat])
        for index, chat in enumerate(prompts)
    ]
    return Task(dataset=MemoryDataset(samples), solver=generate())
