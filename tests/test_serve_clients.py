"""`seq2seq serve` under careless and hostile clients: a request's work is bounded before anything is
searched, a long search takes turns with a short one instead of holding it up, and a client that leaves
has its queued lines dropped and its running search stopped."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from seq2seq_attn.api import Found
from seq2seq_attn.model.seq2seq import Seq2Seq
from seq2seq_attn.serving.app import create_app
from seq2seq_attn.serving.hosting import ModelSpec, host_models
from seq2seq_attn.serving.limits import BatchLimits, Limits

LOCAL = "http://localhost"
LONG = " ".join(["the cat sat on the mat"] * 40)  # 919 characters: more pieces than a source keeps (256)
# EOS is forbidden before as many target pieces as source pieces: a long line takes hundreds of steps
SLOW = {"beam_size": 2, "min_len_a": 1.0}


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each search step of the model, in order, as the source length of its batch; a step takes 2 ms more
    than it would, so that a search of hundreds of steps lasts long enough to be overtaken."""
    recorded: list[int] = []
    step = Seq2Seq.step

    def slower(self, enc, state, y_prev):
        recorded.append(enc.annotations.size(1))
        time.sleep(0.002)
        return step(self, enc, state, y_prev)

    monkeypatch.setattr(Seq2Seq, "step", slower)
    return recorded


def test_a_request_over_the_default_work_limits_is_refused_before_any_search(tiny_run_dir: Path) -> None:
    hosted = host_models([ModelSpec(100, [str(tiny_run_dir)])])
    searched: list[list[str]] = []

    def search(lines: list[str], settings: object) -> list[Found]:
        searched.append(lines)
        return [Found([], None) for _ in lines]

    hosted[100].batcher.search = search
    longest = "x" * Limits().max_chars
    with TestClient(create_app(hosted), base_url=LOCAL) as client:
        for body, fragment in [
            ({"sentences": [longest] * 64}, "128000 characters x nbest 1: at most 16000 per request"),
            (
                {"sentences": [longest] * 8, "nbest": 20},
                "16000 characters x nbest 20: at most 16000 per request",
            ),
            (
                {"sentences": [longest] * 4, "attention": True},
                "attention for 8000 characters: at most 4000 per request",
            ),
        ]:
            answer = client.post("/v1/translate", json=body)
            assert (answer.status_code, answer.json()["error"]) == (413, fragment)
        onmt = client.post("/translator/translate", json=[{"src": longest, "id": 100}] * 64)
        assert onmt.status_code == 413 and "128000 characters" in onmt.json()["error"]
        scored = client.post("/v1/score", json={"sources": [longest] * 6, "targets": [longest] * 6})
        assert scored.status_code == 413 and "24000 characters" in scored.json()["error"]
        assert client.post("/v1/translate", json={"sentences": [longest] * 8}).status_code == 200
    assert sum(searched, []) == [longest] * 8  # only the request within the limits reached the model


def test_a_long_search_takes_turns_with_a_short_one(tiny_run_dir: Path, steps: list[int]) -> None:
    hosted = host_models([ModelSpec(100, [str(tiny_run_dir)], SLOW)])[100]

    async def both() -> tuple:
        heavy = asyncio.ensure_future(hosted.translate([LONG] * 4))
        while not steps:  # the long search has started
            await asyncio.sleep(0.005)
        short = await hosted.translate(["the dog sat"])
        return short, heavy.done(), await heavy

    short, heavy_done_first, heavy = asyncio.run(both())
    hosted.close()
    assert not heavy_done_first  # the short request was answered while the long one searched
    long_steps = [n for n, length in enumerate(steps) if length > 100]
    short_steps = [n for n, length in enumerate(steps) if length < 10]
    assert short_steps and long_steps[0] < short_steps[0] and short_steps[-1] < long_steps[-1]
    alone = hosted.model.search(["the dog sat"])  # and the answers are those searched alone
    assert [c.text for c in short[0].candidates] == [c.text for c in alone[0].candidates]
    assert len(heavy) == 4 and all(found.candidates for found in heavy)


def test_a_client_that_leaves_has_its_lines_dropped_and_its_search_stopped(
    tiny_run_dir: Path, steps: list[int]
) -> None:
    hosted = host_models([ModelSpec(100, [str(tiny_run_dir)], SLOW)], limits=BatchLimits(max_sentences=4))
    app = create_app(hosted)
    body = json.dumps({"sentences": [LONG] * 17}).encode()  # within the default limits
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/translate",
        "raw_path": b"/v1/translate",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"localhost"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 5000),
    }

    async def leave_after_the_first_step() -> list[dict]:
        left = asyncio.Event()
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        sent: list[dict] = []

        async def receive() -> dict:
            if messages:
                return messages.pop()
            await left.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)

        handled = asyncio.ensure_future(app(scope, receive, send))
        while not steps and not handled.done():
            await asyncio.sleep(0.005)
        assert not handled.done(), sent
        left.set()
        await asyncio.wait_for(handled, 30)  # the handler does not wait for the search
        return sent

    asyncio.run(leave_after_the_first_step())
    hosted[100].close()  # the search thread has ended
    # 17 lines make 5 batches of hundreds of steps each: the first stopped within a few steps, the
    # others never started
    assert 0 < len(steps) < 256
