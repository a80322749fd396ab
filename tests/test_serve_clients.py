"""`seq2seq serve` under careless and hostile clients: a request's work is bounded before anything is
searched, a long search takes turns with a short one instead of holding it up, a client that leaves has
its queued lines dropped and its running search stopped, connections that are silent, slow or idle are
closed and open ones capped, and SIGTERM answers every request within its grace period."""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import signal
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from helpers import start_server

from seq2seq_attn.api import Found
from seq2seq_attn.model.seq2seq import Seq2Seq
from seq2seq_attn.serving import turns
from seq2seq_attn.serving.app import create_app
from seq2seq_attn.serving.hosting import ModelSpec, host_models
from seq2seq_attn.serving.limits import BatchLimits, ConnectionLimits, Limits, Refusal
from seq2seq_attn.serving.turns import Turns

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
        ligatures = "\ufdfa" * 1000  # 1,000 characters that the model reads as 18,000
        scored = client.post("/v1/score", json={"sources": ["a"], "targets": [ligatures]})
        assert scored.status_code == 413 and "targets[0]: 18000 characters" in scored.json()["error"]
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


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each teacher-forced batch of the model (a scoring's), in order, as its number of pairs; a batch
    takes 10 ms more than it would, so that a scoring of many batches can be overtaken or left."""
    recorded: list[int] = []
    forward = Seq2Seq.forward

    def slower(self, src, *args, **kwargs):
        recorded.append(src.size(0))
        time.sleep(0.01)
        return forward(self, src, *args, **kwargs)

    monkeypatch.setattr(Seq2Seq, "forward", slower)
    return recorded


def leave_once_started(app: FastAPI, path: str, body: dict, started: list) -> list[dict]:
    """Post `body` to `path` of `app` and leave (the client disconnects) once `started` is not empty; what
    the app sent."""
    raw = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"localhost"), (b"content-length", str(len(raw)).encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 5000),
    }

    async def leave() -> list[dict]:
        left = asyncio.Event()
        messages = [{"type": "http.request", "body": raw, "more_body": False}]
        sent: list[dict] = []

        async def receive() -> dict:
            if messages:
                return messages.pop()
            await left.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)

        handled = asyncio.ensure_future(app(scope, receive, send))
        while not started and not handled.done():
            await asyncio.sleep(0.005)
        assert not handled.done(), sent
        left.set()
        await asyncio.wait_for(handled, 30)  # the handler does not wait for the search
        return sent

    return asyncio.run(leave())


def test_a_client_that_leaves_has_its_lines_dropped_and_its_search_stopped(
    tiny_run_dir: Path, steps: list[int]
) -> None:
    hosted = host_models([ModelSpec(100, [str(tiny_run_dir)], SLOW)], limits=BatchLimits(max_sentences=4))
    request = {"sentences": [LONG] * 17}  # within the default limits
    leave_once_started(create_app(hosted), "/v1/translate", request, steps)
    hosted[100].close()  # the search thread has ended
    # 17 lines make 5 batches of hundreds of steps each: the first stopped within a few steps, the
    # others never started
    assert 0 < len(steps) < 256


def test_a_client_that_leaves_has_its_scoring_stopped_before_its_next_batch(
    tiny_run_dir: Path, batches: list[int]
) -> None:
    hosted = host_models([ModelSpec(100, [str(tiny_run_dir)], {"batch_sentences": 1})])
    pairs = {"sources": ["the cat sat on the mat"] * 40, "targets": ["le chat"] * 40}  # 40 batches
    leave_once_started(create_app(hosted), "/v1/score", pairs, batches)
    hosted[100].close()  # the scoring thread has ended
    assert 0 < len(batches) < 10


def test_a_long_scoring_takes_turns_with_a_short_search_and_a_stopping_server_stops_it(
    tiny_run_dir: Path, batches: list[int], steps: list[int]
) -> None:
    hosted = host_models([ModelSpec(100, [str(tiny_run_dir)], {"batch_sentences": 1})])[100]
    sources, targets = ["the cat sat on the mat"] * 40, ["le chat"] * 40

    async def both() -> tuple:
        scoring = asyncio.ensure_future(hosted.score(sources, targets))
        while not batches:
            await asyncio.sleep(0.005)
        short = await hosted.translate(["the dog sat"])
        short_done_after = len(batches)
        scored = await scoring
        stopped = asyncio.ensure_future(hosted.score(sources, targets))
        while len(batches) == 40:
            await asyncio.sleep(0.005)
        hosted.stop(Refusal(503, "stopping"))
        with pytest.raises(Refusal, match="stopping"):
            await stopped
        return short, short_done_after, scored, len(batches) - 40

    short, short_done_after, scored, stopped_after = asyncio.run(both())
    hosted.close()
    assert short[0].candidates and short_done_after < 40  # answered between the scoring's batches
    assert [s.log_prob for s in scored] == [s.log_prob for s in hosted.model.score(sources, targets)]
    assert 0 < stopped_after < 40  # the second scoring stopped before its end


def test_a_short_search_does_not_wait_for_whole_scorings_queued_before_it(
    tiny_run_dir: Path, batches: list[int], steps: list[int]
) -> None:
    """Each scoring takes its turns one pair at a time: a request of 20 short pairs is one teacher-forced
    batch, and six of them queued would otherwise each hold the model for all of their pairs."""
    hosted = host_models([ModelSpec(100, [str(tiny_run_dir)])])[100]

    async def scorings_then_short() -> tuple:
        pairs = (["the cat sat on the mat"] * 20, ["le chat"] * 20)
        scorings = [asyncio.ensure_future(hosted.score(*pairs)) for _ in range(6)]
        while not batches:
            await asyncio.sleep(0.005)
        short = await hosted.translate(["the dog sat"])
        done_before = sum(scoring.done() for scoring in scorings)
        return short, done_before, await asyncio.gather(*scorings)

    short, done_before, scored = asyncio.run(scorings_then_short())
    hosted.close()
    assert short[0].candidates and done_before < 6
    assert all(len(scores) == 20 for scores in scored)


def test_a_stopping_server_answers_a_scoring_at_once_in_the_middle_of_its_batch(
    tiny_run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 503 goes out when `stop` says so, not when the teacher-forced batch in progress ends."""
    hosted = host_models([ModelSpec(100, [str(tiny_run_dir)])])[100]
    entered, release = threading.Event(), threading.Event()
    forward = Seq2Seq.forward

    def held(self, *args, **kwargs):
        entered.set()
        release.wait(30)
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(Seq2Seq, "forward", held)

    async def stop_mid_batch() -> None:
        scoring = asyncio.ensure_future(hosted.score(["the cat sat"], ["le chat"]))
        while not entered.is_set():
            await asyncio.sleep(0.005)
        hosted.stop(Refusal(503, "the server is stopping"))
        with pytest.raises(Refusal, match="the server is stopping"):
            await asyncio.wait_for(scoring, 5)

    try:
        asyncio.run(stop_mid_batch())
    finally:
        release.set()
        hosted.close()


def test_the_default_connection_cap_leaves_half_the_open_files_to_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (256, 4096))
    assert ConnectionLimits().max_connections == 128  # 300 silent connections no longer exhaust 256 files
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert ConnectionLimits().max_connections == 1000


# ----------------------------------------------------------------------------------------------------------
# a real server: slow, silent and too many connections, and SIGTERM with stalled clients


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def until_closed(sock: socket.socket) -> bytes:
    """What the server sends before it closes the connection (a test fails if it keeps it 30 s)."""
    received = b""
    with sock:
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
    return received


def body_of(answer: bytes) -> dict:
    return json.loads(answer.split(b"\r\n\r\n", 1)[1])


@pytest.mark.slow(seconds=20)
def test_silent_slow_and_idle_connections_are_closed_and_open_ones_capped(tiny_run_dir: Path) -> None:
    options = ["--header-timeout", "2", "--body-timeout", "2", "--keep-alive", "2", "--max-connections", "6"]
    server, url = start_server("--model", str(tiny_run_dir), *options)
    try:
        silent = [connect(url) for _ in range(6)]  # as many as the cap: the next is told so at once
        refused = until_closed(connect(url))
        assert refused.startswith(b"HTTP/1.1 503 ")
        assert body_of(refused) == {"error": "too many connections: at most 6 open", "status": "error"}
        assert all(until_closed(sock) == b"" for sock in silent)  # no request within the header timeout
        half = connect(url)
        half.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        stalled = connect(url)
        stalled.sendall(b'POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99\r\n\r\n{"sen')
        idle = connect(url)
        idle.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert until_closed(half).startswith(b"HTTP/1.1 408 ")
        late = until_closed(stalled)
        assert late.startswith(b"HTTP/1.1 408 ") and b"connection: close" in late.lower()
        assert body_of(late) == {"error": "the body did not arrive within 2 s", "status": "error"}
        assert b'"status":"ok"' in until_closed(idle)  # answered, then closed once idle
        malformed = connect(url)  # refused as every request is: JSON, then closed
        malformed.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n")
        refused = until_closed(malformed)
        assert refused.startswith(b"HTTP/1.1 400 ")
        assert body_of(refused) == {"error": "invalid HTTP request", "status": "error"}
        assert httpx.get(f"{url}/v1/health", timeout=30).status_code == 200  # and it serves on
    finally:
        server.kill()
        server.wait()


def never_reading(url: str) -> socket.socket:
    """A connection that pipelines requests for big answers (the OpenAPI schema) and reads none of them."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    host, port = url.removeprefix("http://").split(":")
    sock.connect((host, int(port)))
    sock.setblocking(False)
    with contextlib.suppress(BlockingIOError):  # until the server stops reading them
        sock.send(b"GET /openapi.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 2000)
    return sock


@pytest.mark.slow(seconds=10)
def test_a_client_that_never_reads_its_answers_loses_its_connection_and_its_place(tiny_run_dir: Path) -> None:
    options = [
        "--max-connections",
        "2",
        "--answer-timeout",
        "2",
        "--keep-alive",
        "30",
        "--header-timeout",
        "30",
    ]
    server, url = start_server("--model", str(tiny_run_dir), *options)
    try:
        readers = [never_reading(url) for _ in range(2)]
        assert until_closed(connect(url)).startswith(b"HTTP/1.1 503 ")  # they hold the two places
        deadline, answered = time.monotonic() + 20, None
        while time.monotonic() < deadline:
            try:
                answered = httpx.get(f"{url}/v1/health", timeout=5).status_code
            except httpx.TransportError:
                answered = None
            if answered == 200:
                break
            time.sleep(0.5)
        assert answered == 200  # the two readers were dropped, a client reading its answers is served
        for sock in readers:
            sock.close()
    finally:
        server.kill()
        server.wait()


@pytest.mark.slow(seconds=5)
def test_ctrl_c_stops_the_server_as_sigterm_does_with_exit_status_0(tiny_run_dir: Path) -> None:
    server, url = start_server("--model", str(tiny_run_dir), "--grace", "1")
    server.send_signal(signal.SIGINT)
    try:
        assert server.wait(30) == 0
    finally:
        server.kill()


@pytest.mark.e2e
@pytest.mark.slow(seconds=30)
def test_sigterm_answers_every_request_and_exits_within_the_grace_period(tiny_run_dir: Path) -> None:
    grace = 3
    server, url = start_server(
        "--model", str(tiny_run_dir), "--grace", str(grace), "--beam", "8", "--min-len-a", "1",
        "--max-sentences", "1000", "--max-request-chars", "1000000",
    )  # fmt: skip
    answers: list[httpx.Response] = []
    heavy = {"sentences": [LONG] * 500}  # many batches of hundreds of steps: more than the grace period
    searching = threading.Thread(
        target=lambda: answers.append(httpx.post(f"{url}/v1/translate", json=heavy, timeout=60))
    )
    searching.start()
    stalled = connect(url)  # its body never ends
    stalled.sendall(b'POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99\r\n\r\n{"sen')
    half = connect(url)  # its headers never end
    half.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    time.sleep(2)  # the heavy request is being searched
    stopped = time.monotonic()
    server.send_signal(signal.SIGTERM)
    try:
        assert server.wait(60) == 0
    finally:
        server.kill()
    took = time.monotonic() - stopped
    searching.join(60)
    output = server.stdout.read().decode()
    assert took < grace + 1, output  # within its grace (and a second for a busy machine to schedule)
    assert "Traceback" not in output and "rror" not in output, output
    assert answers[0].status_code == 503
    assert answers[0].json() == {"error": "the server is stopping", "status": "error"}
    assert body_of(until_closed(stalled)) == {"error": "the server is stopping", "status": "error"}
    assert until_closed(half) == b""


# ----------------------------------------------------------------------------------------------------------
# turns


class Clock:
    """A clock that only the searches move: each step computes exactly one second."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def test_searches_share_the_model_in_proportion_to_the_requests_they_serve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    monkeypatch.setattr(turns, "time", clock)
    shared, order, joined = Turns(), [], threading.Event()

    def search(name: str, weight: int, steps: int) -> None:
        with shared.turn(weight) as turn:
            for n in range(steps):
                turn.step()
                order.append(name)
                clock.now += 1.0
                if name == "long" and n == 4:  # five steps alone, then the short one joins
                    joined.set()
                    time.sleep(0.5)  # (real time for its thread to start and join)

    def short() -> None:
        joined.wait(30)
        search("short", 4, 12)  # a batch of four requests

    threads = [threading.Thread(target=search, args=("long", 1, 40)), threading.Thread(target=short)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert order.count("long") == 40 and order.count("short") == 12
    first, last = order.index("short"), len(order) - 1 - order[::-1].index("short")
    # four requests against one: four seconds for every one of the long search's, one step at a time
    assert order[first : last + 1] == (["short"] * 4 + ["long"]) * 2 + ["short"] * 4


def test_a_cancelled_search_stops_before_its_next_step_or_its_first() -> None:
    shared, steps = Turns(), []
    holding, waiting = shared.turn(), shared.turn()
    started = threading.Event()

    def search(turn: turns.Turn) -> None:
        with turn:
            started.set()
            for n in range(1000):
                turn.step()
                steps.append(n)
                time.sleep(0.001)

    errors: list[BaseException] = []

    def run(turn: turns.Turn) -> None:
        try:
            search(turn)
        except turns.Cancelled as error:
            errors.append(error)

    first = threading.Thread(target=run, args=(holding,))
    first.start()
    started.wait(30)
    waiting.cancel()  # never joined: it stops before its first step
    run(waiting)
    holding.cancel()
    first.join(30)
    assert len(errors) == 2 and 0 < len(steps) < 1000
