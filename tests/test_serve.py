"""`seq2seq serve`: OpenNMT-py's routes answer as its server does, `/v1` answers as the Python API does,
micro-batching changes no answer, limits and malformed bodies get one-line JSON errors, SIGTERM answers
the requests in flight, and the page shows a translation's attention in a real browser."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from helpers import (
    ROOT,
    assert_one_line_error,
    browse,
    make_run_dir,
    run_main,
    start_server,
    tiny_config,
    write_corpus,
)

import seq2seq_attn as s2s
from seq2seq_attn.errors import UserError
from seq2seq_attn.io import read_json
from seq2seq_attn.serving.app import create_app
from seq2seq_attn.serving.batching import MicroBatcher
from seq2seq_attn.serving.hosting import ModelSpec, host_models, read_conf
from seq2seq_attn.serving.limits import BatchLimits, Limits
from seq2seq_attn.serving.opennmt import word_alignment
from seq2seq_attn.serving.server import listen
from seq2seq_attn.serving.threads import FreshThreads, in_own_thread

LINES = ["the cat sat on the mat", "a big red dog ran to the house", "", "the dog sat"]
LIMITS = Limits(max_body_bytes=20_000, max_sentences=8, max_chars=300, max_nbest=4)
LOCAL = "http://localhost"  # a name the server answers (its Host check refuses TestClient's "testserver")
# What OpenNMT-py 3.5.1's `onmt_server` answered (recorded from it by benchmarks/serve_load.py --record)
OPENNMT = json.loads((ROOT / "tests" / "data" / "opennmt_server_3.5.1.json").read_text(encoding="utf-8"))


@pytest.fixture
def client(tiny_run_dir: Path):
    specs = [
        ModelSpec(100, [str(tiny_run_dir)], {"beam_size": 3, "nbest": 2}, "tiny", report_align=True),
        ModelSpec(7, [str(tiny_run_dir), str(tiny_run_dir)], {"beam_size": 3}, "pair"),
    ]
    with TestClient(create_app(host_models(specs), LIMITS), base_url=LOCAL) as client:
        yield client


def shape(value: object) -> object:
    """The JSON's structure: objects as their key -> shape, lists as the shape of their first item."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return (
        "number" if isinstance(value, int | float) and not isinstance(value, bool) else type(value).__name__
    )


# ----------------------------------------------------------------------------------------------------------
# OpenNMT-py's routes


def test_opennmt_routes_answer_with_the_shapes_of_its_server(client: TestClient) -> None:
    inputs = [{"src": line, "id": 100} for line in OPENNMT["translate"]["request"]]
    answer = client.post("/translator/translate", json=inputs)
    assert answer.status_code == 200
    ranks = answer.json()
    recorded = OPENNMT["translate"]["response"]  # n_best 2, two inputs
    assert len(ranks) == len(recorded) == 2  # one list per n-best rank
    assert [len(rank) for rank in ranks] == [len(rank) for rank in recorded] == [len(inputs)] * 2
    plain = ranks[1][0]
    assert shape(plain) == shape(recorded[1][0]) == shape(ranks[1][1]) == shape(recorded[0][1])
    assert [item["src"] for rank in ranks for item in rank] == [i["src"] for rank in recorded for i in rank]
    assert all(item["n_best"] == 2 for rank in ranks for item in rank)
    # with report_align, onmt/bin/server.py adds the segment's lists of alignments and their scores
    best = ranks[0][0]
    assert set(best) - set(plain) == {"align", "align_score"}
    assert [type(x) for x in best["align"] + best["align_score"]] == [str, str]

    models = client.get("/translator/models").json()
    assert set(models[0]) == set(OPENNMT["models"][0]) - {"tokenizer"}  # theirs names its tokenizer
    assert shape(models[0]["loaded"]) == shape(OPENNMT["models"][0]["loaded"])
    assert [m["model_id"] for m in models] == [100, 7]
    assert client.get("/translator/health").json() == OPENNMT["health"] == {"status": "ok"}


def test_the_first_inputs_id_picks_the_model_and_an_unknown_id_is_an_error(client: TestClient) -> None:
    answer = client.post("/translator/translate", json=[{"src": "the cat", "id": 7}, {"src": "a dog"}])
    assert [len(rank) for rank in answer.json()] == [2]  # model 7 searches its n-best of 1
    answer = client.post("/translator/translate", json=[{"src": "the cat", "id": 3}])
    assert answer.status_code == 404
    assert answer.json() == {"error": "No such model '3' (the models: 100, 7)", "status": "error"}


@pytest.mark.parametrize(
    ("method", "route"),
    [("post", "clone_model/100"), ("get", "unload_model/100"), ("get", "to_cpu/7"), ("get", "to_gpu/7")],
)
def test_opennmts_model_management_routes_say_they_are_not_supported(
    client: TestClient, method: str, route: str
) -> None:
    answer = client.request(method.upper(), f"/translator/{route}", json={"opt": {"beam_size": 2}})
    assert answer.status_code == 501
    error = answer.json()
    assert error["status"] == "error" and error["error"].startswith(f"{route.split('/')[0]}: not supported")
    assert client.post("/translator/translate", json=[{"src": "the cat", "id": 100}]).status_code == 200


def test_opennmt_translations_keep_the_sources_outer_whitespace(client: TestClient) -> None:
    sources = ["  the cat sat \n", "\ta dog", "the dog\u3000", "   ", ""]
    ranks = client.post("/translator/translate", json=[{"src": s, "id": 100} for s in sources]).json()
    best = s2s.load(client.app.state.hosted[100].spec.paths[0], beam_size=3).nbest(sources, 2)
    for rank, answers in enumerate(ranks):
        assert [a["src"] for a in answers] == sources
        texts = [c[rank].text if rank < len(c) else "" for c in best]
        # as OpenNMT-py: the source's leading and trailing whitespace around the translation
        assert [a["tgt"] for a in answers] == [
            "  " + texts[0] + " \n",
            "\t" + texts[1],
            texts[2] + "\u3000",
            "      ",  # a blank source: its whitespace before, nothing, its whitespace after
            "",
        ]


def test_a_request_without_an_id_asks_for_model_0_as_opennmt_py_does(
    client: TestClient, tiny_run_dir: Path
) -> None:
    answer = client.post("/translator/translate", json=[{"src": "the cat"}])
    assert answer.status_code == 404
    assert answer.json()["error"] == "No such model '0' (the models: 100, 7)"
    specs = [ModelSpec(0, [str(tiny_run_dir)], {"nbest": 2}), ModelSpec(5, [str(tiny_run_dir)])]
    with TestClient(create_app(host_models(specs)), base_url=LOCAL) as zero:
        assert len(zero.post("/translator/translate", json=[{"src": "the cat"}]).json()) == 2  # model 0's
    with TestClient(create_app(host_models(specs[1:])), base_url=LOCAL) as one:  # the only one hosted
        assert one.post("/translator/translate", json=[{"src": "the cat"}]).status_code == 200


def test_opennmt_alignments_link_each_target_word_to_a_source_word() -> None:
    attention = s2s.Attention(
        "le chat",
        ["\u2581the", "\u2581c", "at", "</s>"],
        ["\u2581le", "\u2581ch", "at", "</s>"],
        np.array([[0.8, 0.1, 0.05, 0.05], [0.1, 0.2, 0.6, 0.1], [0.1, 0.7, 0.1, 0.1], [0, 0, 0, 1.0]]),
    )
    assert word_alignment(attention) == ("0-0 1-1", "0-0.80000 1-0.70000")


# ----------------------------------------------------------------------------------------------------------
# /v1: the Python API's answers


def test_v1_translate_answers_as_the_python_api(client: TestClient, tiny_run_dir: Path) -> None:
    answer = client.post(
        "/v1/translate", json={"model": 100, "sentences": LINES, "nbest": 3, "attention": True}
    )
    assert answer.status_code == 200
    translations = answer.json()["translations"]
    model = s2s.load(tiny_run_dir, beam_size=3)
    expected = model.nbest(LINES, 3)
    assert [[c["text"] for c in t["candidates"]] for t in translations] == [
        [c.text for c in e] for e in expected
    ]
    scores = [[c["score"] for c in t["candidates"]] for t in translations]
    assert scores == [[c.score for c in e] for e in expected]
    for line, translation in zip(LINES, translations, strict=True):
        attention = model.attention(line)
        if attention is None:
            assert translation["attention"] is None and translation["candidates"] == []
            continue
        got = translation["attention"]
        assert (got["source"], got["target"]) == (attention.source, attention.target)
        np.testing.assert_allclose(got["weights"], attention.weights, atol=1e-5)


def test_v1_score_answers_as_the_api_and_an_ensemble_refuses_with_its_reason(
    client: TestClient, tiny_run_dir: Path
) -> None:
    pair = {"sources": ["the cat sat", ""], "targets": ["le chat", "x"]}
    answer = client.post("/v1/score", json={"model": 100, **pair})
    expected = s2s.load(tiny_run_dir).score(pair["sources"], pair["targets"])
    assert [s["log_prob"] for s in answer.json()["scores"]] == [s.log_prob for s in expected]
    assert answer.json()["scores"][1]["pieces"] == 0
    refused = client.post("/v1/score", json={"model": 7, **pair})
    assert refused.status_code == 422
    with pytest.raises(UserError) as reason:
        s2s.load([tiny_run_dir, tiny_run_dir]).score(pair["sources"], pair["targets"])
    assert refused.json() == {"error": str(reason.value), "status": "error"}


def test_the_card_has_the_config_the_size_and_an_exported_folders_bleu_by_length(
    tiny_run_dir: Path, tmp_path: Path
) -> None:
    sources = [f"the cat sat on the mat {'and the dog ' * n}" for n in range(12)]
    for name, lines in [("src", sources), ("ref", sources), ("hyp", sources[:6] + ["x"] * 6)]:
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = tmp_path / "report.json"
    args = ["--hyp", "hyp", "--label", "tiny", "--src", "src", "--ref", "ref", "--by-length"]
    assert run_main("eval", *args, "--bootstrap", "0", "--output", str(report), cwd=tmp_path).returncode == 0
    rows = [row for row in read_json(report)["systems"][0]["rows"] if row["subset"] == "all"]
    exported = tmp_path / "exported"
    assert run_main("export", str(tiny_run_dir), "-o", str(exported), "--report", str(report)).returncode == 0
    specs = [ModelSpec(1, [str(exported)]), ModelSpec(2, [str(tiny_run_dir)])]
    with TestClient(create_app(host_models(specs)), base_url=LOCAL) as client:
        card = client.get("/v1/models/1").json()
        assert card["bleu_by_length"] == [{"label": "tiny", "rows": rows}]
        assert card["parameters"] == s2s.load(tiny_run_dir).parameters > 0
        assert card["config"]["model"]["hidden_size"] == 16 and card["decode"]["beam_size"] >= 1
        assert client.get("/v1/models/2").json()["bleu_by_length"] is None  # a run folder carries none
        assert client.get("/v1/models").json()[0]["attention"] is True
        assert client.get("/v1/models/3").status_code == 404
        same = {"model": 1, "sentences": LINES, "nbest": 2}
        assert (
            client.post("/v1/translate", json=same).json()["translations"]
            == (client.post("/v1/translate", json={**same, "model": 2}).json()["translations"])
        )


# ----------------------------------------------------------------------------------------------------------
# limits and malformed bodies

REFUSED = [  # (route, body bytes, status, a fragment of the error)
    ("/v1/translate", b"{", 400, "not valid JSON"),
    ("/v1/translate", b"\xff\xfe{}", 400, "not valid JSON"),
    ("/v1/translate", b'{"sentences": "x"}', 422, "sentences: Input should be a valid list"),
    ("/v1/translate", b'{"sentences": [1]}', 422, "sentences.0"),
    ("/v1/translate", b'{"sentences": ["a"], "nbest": 0}', 422, "nbest"),
    ("/v1/translate", b'{"sentences": ["a"], "nbest": 5}', 413, "nbest 5: at most 4"),
    ("/v1/translate", json.dumps({"sentences": ["a"] * 9}).encode(), 413, "9 sentences: at most 8"),
    ("/v1/translate", json.dumps({"sentences": ["a" * 301]}).encode(), 413, "sentences[0]: 301 characters"),
    ("/v1/translate", json.dumps({"sentences": ["a" * 25_000]}).encode(), 413, "over 20000 bytes"),
    ("/v1/translate", b'{"model": 5, "sentences": ["a"]}', 404, "No such model '5'"),
    ("/v1/score", b'{"model": 100, "sources": ["a"], "targets": []}', 422, "1 source lines but 0 target"),
    ("/translator/translate", b"[]", 422, "at least one"),
    ("/translator/translate", b'{"src": "a"}', 422, "valid list"),
    ("/translator/translate", b'[{"id": 100}]', 422, "0.src: Field required"),
    ("/translator/translate", b"not json", 400, "not valid JSON"),
]


@pytest.mark.parametrize(("route", "body", "status", "fragment"), REFUSED)
def test_a_refused_request_gets_a_one_line_json_error(
    client: TestClient, route: str, body: bytes, status: int, fragment: str
) -> None:
    answer = client.post(route, content=body)
    assert answer.status_code == status
    error = answer.json()
    assert error["status"] == "error" and fragment in error["error"] and "\n" not in error["error"]


@pytest.mark.parametrize(
    ("route", "body", "where"),
    [
        ("/v1/translate", b'{"model": 100, "sentences": ["a \\ud800 b"]}', "sentences.0"),
        ("/translator/translate", b'[{"src": "\\udfff", "id": 100}]', "0.src"),
        ("/v1/score", b'{"model": 100, "sources": ["a"], "targets": ["\\ud83d"]}', "targets.0"),
    ],
)
def test_a_lone_surrogate_is_refused_in_one_log_line_and_the_connection_kept(
    client: TestClient, caplog: pytest.LogCaptureFixture, route: str, body: bytes, where: str
) -> None:
    # JSON's \\uD800 escape decodes to half of a UTF-16 pair: a str no UTF-8 encoder (sentencepiece's,
    # the answer's) takes
    with caplog.at_level(logging.INFO):
        answer = client.post(route, content=body)
    assert answer.status_code == 400
    assert answer.json()["error"] == f"{where}: a lone surrogate (U+D800 to U+DFFF) is not text"
    logged = [record for record in caplog.records if not record.name.startswith("httpx")]  # not the client
    assert [record.getMessage() for record in logged] == [f"refused: {answer.json()['error']}"]
    assert logged[0].exc_info is None
    assert answer.headers.get("connection") != "close"


def test_a_chunked_body_over_the_limit_is_refused_with_413(client: TestClient) -> None:
    def chunks():  # no Content-Length: the limit is found while the body is read
        yield b'{"model": 100, "sentences": ["'
        for _ in range(30):
            yield b"x" * 1000
        yield b'"]}'

    answer = client.post("/v1/translate", content=chunks())
    assert "content-length" not in answer.request.headers
    assert answer.status_code == 413
    assert answer.json() == {"error": "request body over 20000 bytes", "status": "error"}


def test_a_wrong_method_is_told_the_allowed_ones_and_head_answers_every_get_route(
    client: TestClient,
) -> None:
    refused = client.get("/v1/translate")
    assert (refused.status_code, refused.headers.get("allow")) == (405, "POST")
    assert refused.json() == {"error": "Method Not Allowed", "status": "error"}
    refused = client.delete("/v1/health")
    assert (refused.status_code, refused.headers.get("allow")) == (405, "GET, HEAD")
    routes = ["/", "/v1/health", "/v1/models", "/v1/models/7", "/translator/health", "/translator/models"]
    for route in routes:
        got, head = client.get(route), client.head(route)
        assert (got.status_code, head.status_code) == (200, 200), route
        assert head.content == b"" and head.headers["content-length"] == got.headers["content-length"]
        assert head.headers["content-type"] == got.headers["content-type"]


def malformed_bodies(count: int, seed: int = 0) -> list[bytes]:
    """Bodies a broken or hostile client may send: cut and corrupted JSON, wrong types, huge strings,
    invalid UTF-8, lone surrogates, deep nesting, empty lists, numbers where text goes."""
    rng = random.Random(seed)
    good = [
        json.dumps({"sentences": ["the cat sat"], "nbest": 2}).encode(),
        json.dumps([{"src": "the cat", "id": 100}]).encode(),
    ]
    values = [None, 0, -1, 1e308, True, "", "x" * 400, [], {}, [[]], ["a"] * 20, {"a": 1}, "\ud800", 2**70]
    makers = [
        lambda: rng.choice(good)[: rng.randrange(1, 30)],  # cut short
        lambda: bytes(rng.randrange(256) for _ in range(rng.randrange(1, 60))),  # noise
        lambda: rng.choice(good).replace(b"the", bytes([rng.randrange(0x80, 0x100)])),  # invalid UTF-8
        lambda: json.dumps({"sentences": rng.choice(values), "nbest": rng.choice(values)}).encode(),
        lambda: json.dumps([{"src": rng.choice(values), "id": rng.choice(values)}]).encode(),
        lambda: json.dumps(rng.choice(values)).encode(),
        lambda: b"[" * rng.randrange(1, 3000),  # nesting
        lambda: json.dumps(  # lone surrogates, where a model would read them
            {"model": 100, "sentences": [rng.choice(["\ud800", "a \udfff", "\ud83d\ude00\ud83d"])]}
        ).encode(),
        lambda: json.dumps(
            {"model": rng.choice(values), "sources": ["a"], "targets": rng.choice(values)}
        ).encode(),
    ]
    return [rng.choice(makers)() for _ in range(count)]


def test_a_thousand_malformed_bodies_are_each_answered_and_the_server_keeps_serving(
    client: TestClient,
) -> None:
    routes = ["/v1/translate", "/translator/translate", "/v1/score"]
    statuses = []
    for n, body in enumerate(malformed_bodies(1200)):
        # every fourth body chunked (no Content-Length), in pieces of 7 bytes
        content = (body[i : i + 7] for i in range(0, len(body), 7)) if n % 4 == 0 else body
        answer = client.post(routes[n % len(routes)], content=content)
        statuses.append(answer.status_code)
        assert answer.status_code in (200, 400, 404, 413, 422), (body[:80], answer.text[:200])
        if answer.status_code != 200:
            assert answer.json().get("status") == "error", (body[:80], answer.text[:200])
            assert answer.json()["status"] == "error" and "\n" not in answer.json()["error"]
    assert sum(status >= 400 for status in statuses) >= 1000
    assert len(set(statuses)) >= 4
    good = client.post("/v1/translate", json={"model": 100, "sentences": ["the cat sat"]})
    assert good.status_code == 200 and len(good.json()["translations"]) == 1


# ----------------------------------------------------------------------------------------------------------
# micro-batching


def run_together(batcher: MicroBatcher, requests: list[list[str]], settings=(1, False)) -> list:
    async def together() -> list:
        return await asyncio.gather(
            *(batcher.submit(lines, settings) for lines in requests), return_exceptions=True
        )

    return asyncio.run(together())


def test_requests_searched_together_get_the_answers_they_get_alone(tiny_run_dir: Path) -> None:
    model = s2s.load(tiny_run_dir, beam_size=3)
    batches: list[list[str]] = []

    def search(lines: list[str], settings: tuple) -> list:
        batches.append(lines)
        return model.search(lines, *settings)

    requests = [[f"{LINES[n % 2]} {'the ' * (n % 5)}".strip()] * (1 + n % 3) for n in range(12)]
    with ThreadPoolExecutor(1) as executor:
        batcher = MicroBatcher(search, executor, BatchLimits(max_sentences=16, max_wait=0.05))
        together = run_together(batcher, requests, (2, True))
    alone = [model.search(lines, 2, True) for lines in requests]
    for got, expected in zip(together, alone, strict=True):
        assert [[c.text for c in f.candidates] for f in got] == [
            [c.text for c in f.candidates] for f in expected
        ]
        for found, wanted in zip(got, expected, strict=True):
            # matrix kernels pick their blocking by row count, so the last float bits may differ
            scores = [c.score for c in found.candidates]
            assert scores == pytest.approx([c.score for c in wanted.candidates], rel=1e-5, abs=1e-6)
            np.testing.assert_allclose(
                found.attention.weights, wanted.attention.weights, rtol=1e-4, atol=1e-6
            )
    assert len(batches) < len(requests)  # they were batched
    assert max(len(batch) for batch in batches) <= 16


def test_each_search_runs_in_a_thread_of_its_own_that_ends_with_it() -> None:
    """FreshThreads: a new thread per task, gone once the task is done (so is the OpenMP team it made),
    at most `limit` at once, the rest started as others end; results and errors reach the
    futures, and shutdown waits for what was submitted."""
    gate, lock = threading.Event(), threading.Lock()
    threads: list[threading.Thread] = []
    started: list[int] = []
    running, most = [0], [0]

    def task(n: int) -> int:
        with lock:
            threads.append(threading.current_thread())
            started.append(n)
            running[0] += 1
            most[0] = max(most[0], running[0])
        gate.wait(5)
        with lock:
            running[0] -= 1
        if n == 3:
            raise ValueError("three")
        return n * n

    executor = FreshThreads(2, "test")
    futures = [executor.submit(task, n) for n in range(6)]
    time.sleep(0.2)
    assert sorted(started) == [0, 1]  # two run, four wait
    gate.set()
    executor.shutdown(wait=True)
    assert [future.result() for future in futures if future.exception() is None] == [0, 1, 4, 16, 25]
    assert isinstance(futures[3].exception(), ValueError)
    assert most[0] == 2 and sorted(started) == list(range(6))
    assert len({id(thread) for thread in threads}) == 6
    assert not any(thread.is_alive() for thread in threads)
    with pytest.raises(RuntimeError):
        executor.submit(task, 7)


def test_in_own_thread_returns_the_result_or_raises_the_error() -> None:
    assert in_own_thread(threading.current_thread) is not threading.current_thread()
    assert in_own_thread(pow, 2, 5) == 32

    def fails() -> None:
        raise UserError("bad")

    with pytest.raises(UserError, match="bad"):
        in_own_thread(fails)


def test_a_long_request_shares_its_batches_with_the_requests_behind_it() -> None:
    batches: list[list[str]] = []

    def search(lines: list[str], settings: object) -> list[str]:
        batches.append(lines)
        return [line.upper() for line in lines]

    long = [f"long {n}" for n in range(10)]
    with ThreadPoolExecutor(1) as executor:
        batcher = MicroBatcher(search, executor, BatchLimits(max_sentences=4, max_wait=0.05))
        answers = run_together(batcher, [long, ["short"]])
    assert answers == [[line.upper() for line in long], ["SHORT"]]
    assert batches[0] == ["long 0", "short", "long 1", "long 2"]  # one line of each in turn
    assert [len(batch) for batch in batches] == [4, 4, 3]


def test_short_lines_are_not_batched_with_long_ones_and_a_batch_is_bounded() -> None:
    batches: list[list[str]] = []

    def search(lines: list[str], settings: object) -> list[int]:
        batches.append(lines)
        return [len(line) for line in lines]

    long = [f"{n} {'x' * 1500}" for n in range(10)]
    requests = [long, ["short", "a b c"], ["y" * 100], long[:3] + ["the cat"]]
    with ThreadPoolExecutor(4) as executor:
        batcher = MicroBatcher(search, executor, BatchLimits(max_wait=0.05))
        answers = run_together(batcher, requests)
    assert answers == [[len(line) for line in lines] for lines in requests]
    for batch in batches:
        lengths = [len(line) for line in batch]
        assert max(lengths) <= 4 * min(lengths) or max(lengths) <= 64  # a lane: lengths within 4x
        assert len(batch) * max(lengths) <= BatchLimits().max_chars  # beam 1 here


def test_requests_of_other_settings_do_not_queue_a_short_request_behind_them() -> None:
    """The page asks for attention, OpenNMT-py clients for the model's n-best: each setting batches apart,
    and their batches take turns instead of one setting's requests waiting for all the others'."""
    started: list[object] = []

    def search(lines: list[str], settings: object) -> list[str]:
        started.append(settings)
        time.sleep(0.02)
        return lines

    async def heavy_then_short() -> tuple:
        heavy = [asyncio.ensure_future(batcher.submit(["a b c"] * 20, (n, False))) for n in (2, 3, 4)]
        await asyncio.sleep(0.01)
        short = await batcher.submit(["d"], (1, False))
        return short, all(job.done() for job in heavy), await asyncio.gather(*heavy)

    with ThreadPoolExecutor(4) as executor:
        batcher = MicroBatcher(search, executor, BatchLimits(max_sentences=4, max_wait=0.005))
        short, heavy_done_first, heavy = asyncio.run(heavy_then_short())
    assert short == ["d"] and heavy == [["a b c"] * 20] * 3
    assert not heavy_done_first and started.index((1, False)) < 4


def test_unmixed_batches_hold_one_requests_lines() -> None:
    batches: list[list[str]] = []

    def search(lines: list[str], settings: object) -> list[str]:
        batches.append(lines)
        return lines

    requests = [["a b c"] * 3, ["d e"] * 2, ["f"]]
    with ThreadPoolExecutor(1) as executor:
        unmixed = MicroBatcher(search, executor, BatchLimits(max_wait=0.05), mix_requests=False)
        assert run_together(unmixed, requests) == requests
    assert batches == requests


def test_a_request_that_breaks_the_search_fails_alone() -> None:
    def search(lines: list[str], settings: object) -> list[str]:
        if "boom" in lines:
            raise RuntimeError("the search broke")
        return lines

    with ThreadPoolExecutor(1) as executor:
        batcher = MicroBatcher(search, executor, BatchLimits(max_wait=0.05))
        answers = run_together(batcher, [["a"], ["boom", "b"], ["c", "d"]])
    assert answers[0] == ["a"] and answers[2] == ["c", "d"]
    assert isinstance(answers[1], RuntimeError)


def test_a_slow_search_blocks_neither_other_models_nor_health_checks(client: TestClient) -> None:
    release, started = threading.Event(), threading.Event()
    batcher = client.app.state.hosted[100].batcher
    search = batcher.search

    def slow(lines: list[str], settings: tuple) -> list:
        started.set()
        release.wait(30)
        return search(lines, settings)

    batcher.search = slow
    answers: list = []
    body = {"model": 100, "sentences": ["the cat sat"]}
    waiting = threading.Thread(target=lambda: answers.append(client.post("/v1/translate", json=body)))
    waiting.start()
    assert started.wait(30)  # model 100 is searching, and stays so until released
    assert client.get("/v1/health").status_code == 200
    other = client.post("/v1/translate", json={"model": 7, "sentences": ["a dog"]})
    assert other.status_code == 200 and len(other.json()["translations"]) == 1
    assert not answers  # the slow one is still searching
    release.set()
    waiting.join(30)
    assert answers[0].status_code == 200


# ----------------------------------------------------------------------------------------------------------
# the conf file and the command line


def test_a_conf_file_in_opennmt_pys_layout_is_read_and_checked(tmp_path: Path) -> None:
    conf = tmp_path / "conf.json"
    conf.write_text(
        json.dumps(
            {
                "models_root": "ignored",
                "models": [
                    {
                        "id": 100,
                        "model": "runs/a",
                        "opt": {"beam_size": 5, "n_best": 2, "report_align": True},
                    },
                    {"id": 101, "models": ["runs/a", "runs/b"], "name": "pair"},
                ],
            }
        )
    )
    first, second = read_conf(conf)
    assert (first.id, first.paths, first.decode, first.report_align) == (
        100,
        [str(tmp_path / "runs/a")],
        {"beam_size": 5, "nbest": 2},
        True,
    )
    assert second.paths == [str(tmp_path / "runs/a"), str(tmp_path / "runs/b")] and second.name == "pair"
    for text, fragment in [
        ('{"models": [', "conf.json:1: not JSON"),
        ('{"models": []}', "at least one model"),
        ('{"models": [{"id": 1}]}', 'models[0]: "model" must be a path'),
        ('{"models": [{"id": "x", "model": "a"}]}', "models[0].id: expected an integer"),
        ('{"models": [{"model": "a"}, {"model": "b"}]}', "model ids must differ"),
    ]:
        conf.write_text(text)
        with pytest.raises(UserError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
            read_conf(conf)


def test_opennmt_options_are_mapped_to_ours_or_ignored_with_one_warning(
    tmp_path: Path, tiny_run_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    recorded = OPENNMT["models"][0]["opt"]  # what a real conf.json of OpenNMT-py 3.5.1 held
    opt = {
        **recorded,
        "gpu": -1,
        "length_penalty": "wu",
        "alpha": 0.4,
        "min_length": 2,
        "block_ngram_repeat": 3,
        "ban_unk_token": True,
        "replace_unk": True,
        "coverage_penalty": "none",
        "seed": 3,
    }
    conf = tmp_path / "conf.json"
    conf.write_text(json.dumps({"models": [{"id": 100, "model": str(tiny_run_dir), "opt": opt}]}))
    (spec,) = read_conf(conf)
    assert spec.decode == {
        "beam_size": 5,
        "nbest": 1,
        "length_penalty": "gnmt",
        "alpha": 0.4,
        "min_len": 2,
        "no_repeat_ngram": 3,
        "no_unk": True,
        "replace_unk": True,
        "coverage_penalty": 0.0,  # OpenNMT-py's "none"
    }
    warning = capsys.readouterr().err
    assert (
        warning
        == f"serve: {conf}: models[0].opt: batch_size, max_length, gpu, seed: not decode keys, ignored\n"
    )
    model = host_models([spec])[100].model  # and the model loads with them
    assert (model.decode.min_len, model.decode.no_repeat_ngram, model.decode.length_penalty) == (2, 3, "gnmt")


def test_serve_refuses_bad_options_in_one_line(tmp_path: Path, tiny_run_dir: Path) -> None:
    assert_one_line_error(run_main("serve"), "give --model")
    assert_one_line_error(
        run_main("serve", "--model", str(tiny_run_dir), "--conf", str(tmp_path / "c.json")), "not both"
    )
    assert_one_line_error(
        run_main("serve", "--model", str(tiny_run_dir), "--max-sentences", "0"), "--max-sentences"
    )
    assert_one_line_error(run_main("serve", "--model", str(tmp_path / "none")), "no such run directory")
    ensemble = ["--model", str(tiny_run_dir), "--model", str(tiny_run_dir)]
    assert_one_line_error(  # the API's refusal, at start: a model's decode settings are fixed when it loads
        run_main("serve", *ensemble, "--lexical-shortlist"), "decode one run with it, not an ensemble"
    )
    assert_one_line_error(
        run_main("serve", "--model", str(tiny_run_dir), "--beam", "0"), "model 100: decode.beam_size"
    )


@pytest.fixture(scope="module")
def encdec_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny RNNencdec run: a decoder without attention."""
    config = tiny_config(tmp_path_factory.mktemp("encdec"), model={"attention": "none"})
    write_corpus(config.data_dir)
    return make_run_dir(config)


def test_a_model_without_attention_refuses_attention_requests_and_alignments(
    encdec_run: Path, tmp_path: Path
) -> None:
    with TestClient(create_app(host_models([ModelSpec(100, [str(encdec_run)])])), base_url=LOCAL) as client:
        assert client.get("/v1/models").json()[0]["attention"] is False
        body = {"sentences": ["the cat sat"], "attention": True}
        refused = client.post("/v1/translate", json=body)
        assert refused.status_code == 422
        assert refused.json()["error"] == "model 100 has no attention (model.attention: none): ask without it"
        plain = client.post("/v1/translate", json={**body, "attention": False})
        assert plain.status_code == 200 and plain.json()["translations"][0]["attention"] is None
    with pytest.raises(UserError, match="model 100: report_align: the model has no attention"):
        host_models([ModelSpec(100, [str(encdec_run)], report_align=True)])


def test_the_page_has_an_icon(client: TestClient) -> None:
    page = client.get("/").text
    assert '<link rel="icon" href="static/favicon.svg" type="image/svg+xml">' in page
    for route in ["/static/favicon.svg", "/favicon.ico"]:  # where the page says, where browsers look
        icon = client.get(route)
        assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
        assert icon.text.startswith("<svg")


def test_a_port_taken_is_a_one_line_error_before_any_serving_line(tiny_run_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = run_main("serve", "--model", str(tiny_run_dir), "--port", port)
    assert_one_line_error(result, f"cannot listen on 127.0.0.1:{port}", "in use")


def test_the_servers_connections_send_each_write_at_once() -> None:
    """Connections accepted on the listening socket have Nagle's algorithm off (TCP_NODELAY), as asyncio
    sets it for TCP sockets: with it on, an answer written in parts waits for the client's delayed
    acknowledgement whenever the client sends its next request at once (serving/server.py, `listen`)."""

    async def nodelay_of_a_connection() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(connected, sock=listen("127.0.0.1", 0))
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            return await asyncio.wait_for(accepted, 10)
        finally:
            writer.close()
            server.close()

    assert asyncio.run(nodelay_of_a_connection()) != 0


# ----------------------------------------------------------------------------------------------------------
# a real server: SIGTERM, and the page in a browser


@pytest.mark.e2e
@pytest.mark.slow(seconds=15)
def test_sigterm_answers_the_requests_in_flight_then_exits(tiny_run_dir: Path) -> None:
    # a batch waits 2 s for company: the request is in flight when SIGTERM comes
    server, url = start_server("--model", str(tiny_run_dir), "--max-wait-ms", "2000", "--beam", "2")
    try:
        answers: list[httpx.Response] = []
        request = threading.Thread(
            target=lambda: answers.append(
                httpx.post(f"{url}/v1/translate", json={"sentences": LINES}, timeout=60)
            )
        )
        request.start()
        time.sleep(0.8)
        server.send_signal(signal.SIGTERM)
        request.join(60)
        assert server.wait(60) == 0
        assert answers[0].status_code == 200
        assert len(answers[0].json()["translations"]) == len(LINES)
        with pytest.raises(httpx.TransportError):  # and it no longer listens
            httpx.get(f"{url}/v1/health", timeout=2)
    finally:
        server.kill()


@pytest.mark.e2e
@pytest.mark.slow(seconds=40)
def test_the_page_translates_and_draws_the_attention_in_chromium(tiny_run_dir: Path, tmp_path: Path) -> None:
    server, url = start_server("--model", str(tiny_run_dir), "--beam", "3")
    try:
        page = f"{url}/?q=the%20cat%20sat&q=a%20dog&show=0"
        # the virtual time budget lets the page's requests finish before the DOM is written
        dom, console, requests = browse(
            page, tmp_path / "browser", "--virtual-time-budget=30000", "--dump-dom"
        )
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    assert console == []
    assert all(request.startswith(url) for request in requests)  # offline: nothing from elsewhere
    best = s2s.load(tiny_run_dir, beam_size=3).nbest(["the cat sat", "a dog"], 5)
    assert dom.count('<li data-index="') == 2
    assert f'{best[0][0].text}<span class="source">the cat sat</span>' in dom
    attention = s2s.load(tiny_run_dir, beam_size=5).attention("the cat sat")
    assert dom.count('<table class="attention">') == 1
    assert dom.count("<td ") == attention.weights.size  # one cell per (target piece, source piece)
    assert dom.count('<span class="score">') == len(best[0])  # the n-best list


def test_the_server_module_keeps_torch_threads_and_env_alone() -> None:
    code = "import seq2seq_attn.cli.serve, sys; print('torch' in sys.modules, 'fastapi' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    )
    assert result.stdout.split() == ["False", "False"]  # `seq2seq --help` does not pay for the server
