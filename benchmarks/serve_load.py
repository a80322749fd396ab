"""Serving under load: `seq2seq serve` beside OpenNMT-py 3.5.1's own server, on localhost.

Each system is started as its own server process, warmed up, then loaded by a bounded generator at each
concurrency level: C clients, each sending one test sentence per request through OpenNMT-py's
`POST /translator/translate` (the route both servers answer, so the clients are the same) until
`--requests` answers or `--seconds` have passed. Reported per level: requests/s, p50/p95/p99 latency,
errors, and per system the mean output length in words (equal beams write different lengths when the
models differ: throughput follows length) and the server's peak resident memory (VmHWM). With
`--references`, each server also answers the first `--bleu-sentences` sentences once each, and its answers
are scored with sacreBLEU against their references: the speed of a server says little without the quality
of what it answers. The load is measured `--repeats` times, each repeat a fresh start of every server in
turn (so that a slow minute of the machine falls on all of them); the table gives the medians, requests/s
with their [min, max]. What each server loaded (architecture, widths, vocabularies, parameters) is recorded
beside its figures, so the comparison says whether the models match. Both search by one rule, the peer's
(SAME_SEARCH): ours' default stopping rule (`bound`) runs more steps than OpenNMT-py's.

    python -m benchmarks.serve_load --ours runs/enfr --opennmt-model M.pt --opennmt-sp-src S.model \
        --opennmt-sp-tgt T.model --sentences test.en --references test.fr \
        --doc benchmarks/results/serve_load.md

The report says why the two differ under load (ONE_REQUEST_AT_A_TIME): checked in OpenNMT-py 3.5.1's
wheel, `ServerModel.run` is wrapped in `critical`, which holds a `threading.Semaphore(value=1)`.

`--mixed` measures ours alone under a mixed load instead: at each concurrency level the C clients send one
sentence per request, first by themselves, then beside one heavy client that sends, over and over, the
largest request the server's default limits accept (`--max-chars` characters per sentence up to
`--max-request-chars` in all, at n-best 1: test sentences joined and cut to length). Reported: the short
requests' p50/p99 in both runs and their ratio, the heavy requests answered; the short requests must keep
their p99 within 2x of theirs alone, or under 1 s (`passes`).

    python -m benchmarks.serve_load --ours RUN --sentences test.en --mixed --clients 1,8 \
        --doc benchmarks/results/serve_mixed.md

`--guards` measures what the server does with careless clients and a stop, with its default options: the
seconds until it closes a silent connection, answers a body that stops arriving, closes an idle one; then
SIGTERM while HEAVY_IN_FLIGHT of the largest requests are searched and a body stalls: when each request is
answered and how, when the process exits and with what status, and whether its log holds a traceback.

`--interleave N` measures one request at a time instead: every server started side by side, one client sends
the first N sentences one at a time to each server in turn (who goes first rotates), so that a slow moment
of the machine falls on all of them; per server the median latency over the sentences after the first
`--warmup`, once per `--repeats` start. A one-sentence latency varies from run to run far more than a
rate under load does, so this compares the servers one request at a time in one sitting; each server has
the machine to itself only while it answers, the others idle meanwhile.

    python -m benchmarks.serve_load --ours RUN --opennmt-model M.pt --opennmt-sp-src S.model \
        --opennmt-sp-tgt T.model --sentences test.en --interleave 90 \
        --doc benchmarks/results/serve_interleaved.md

`--int8-agreement N` also measures how often the int8 copy's answer for a sentence changes when it is
searched among others (int8 quantises each batch's activations together) instead of alone.
`--record FILE` writes what OpenNMT-py's server answered to a few requests (the fixture the server's
shape test compares with). Run it on a quiet machine: nothing else may train or load the CPU meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from seq2seq_attn.errors import UserError
from seq2seq_attn.evaluation.metrics.bleu import bleu_metric
from seq2seq_attn.io import read_lines, write_json, write_text
from seq2seq_attn.serving.limits import ConnectionLimits, Limits

from .machine import describe, load_warning, provenance_warnings, summary
from .report import OUT, map_strings, medians, ranges, shown_command

ROOT = Path(__file__).resolve().parent.parent
PROG = f"python -m {__spec__.name}"
ROUTE = "/translator/translate"
OPENNMT_LABEL = "OpenNMT-py 3.5.1"
MODEL_ID = 100  # the model every timed request names (OpenNMT-py's conf.json; ours answers any id)
NBEST_MODEL_ID = 101  # the same model at n-best 2, for the fixture `--record` writes
OPENNMT_ENV = {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}  # its checkpoints pickle an argparse.Namespace
FIXTURE_INPUTS = ["The cat sat on the mat.", "Where is the station?"]
ONE_REQUEST_AT_A_TIME = (
    "OpenNMT-py's server translates one request at a time (`ServerModel.run` holds a lock of one, "
    "onmt/translate/translation_server.py), whatever the load; `seq2seq serve` searches the sentences of "
    "requests that arrive together as one batch: its lead under load is that micro-batching."
)
PEERS_RULE = {"length_penalty": "gnmt", "stopping": "top"}  # OpenNMT-py's search: GNMT's penalty ("wu"),
# and a sentence ends once a step's best candidate is EOS (its only rule; ours stops by `bound` by default)
SAME_SEARCH = (
    "Both servers search by one rule: beam {beam}, GNMT length penalty with alpha {alpha}, and a sentence "
    "ends once a step's best candidate is EOS (OpenNMT-py's only rule; ours `--stopping top`)."
)
LEVEL_FIGURES = ["requests_per_s", "p50_ms", "p95_ms", "p99_ms", "mean_output_words"]  # medians over repeats
BLEU_CLIENTS = 8  # the clients that send the BLEU sentences (once each; not timed)
HEAVY_IN_FLIGHT = 8  # `--guards`: the largest requests being searched when SIGTERM comes
SEARCHING_SECONDS = 2.0  # `--guards`: how long they are searched before it comes
# the report is committed: a path outside the repository shows as its placeholder, not as this machine's path
PLACEHOLDERS = {
    "--ours": "RUN",
    "--opennmt-model": "OPENNMT_CHECKPOINT",
    "--opennmt-sp-src": "SRC_SPM",
    "--opennmt-sp-tgt": "TGT_SPM",
    "--sentences": "TEST_SOURCES",
    "--references": "TEST_REFERENCES",
    "--cache": "CACHE",
    "--out": OUT,
    "--record": "FIXTURE",
    "--doc": "DOC",
}


@dataclass
class Served:
    """One system of the comparison: how to start its server on a port, and what it loads."""

    label: str
    command: Callable[[int], list[str]]
    env: dict[str, str]
    model: dict[str, Any]


@dataclass
class Server:
    """A server process and where it answers."""

    label: str
    process: subprocess.Popen
    url: str
    log: Path

    def peak_rss_mib(self) -> float | None:
        """VmHWM of the process (and none of its children: both servers are one process)."""
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text()
        except OSError:
            return None
        line = next((line for line in status.splitlines() if line.startswith("VmHWM:")), None)
        return int(line.split()[1]) / 1024 if line else None

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(label: str, command: list[str], env: dict[str, str], log: Path, port: int) -> Server:
    log.parent.mkdir(parents=True, exist_ok=True)
    handle = open(log, "w", encoding="utf-8")  # noqa: SIM115 - the process writes it until stopped
    process = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"serve_load: {label} exited ({process.returncode}), see {log}")
        try:
            if httpx.get(f"{url}/translator/health", timeout=2).status_code == 200:
                return Server(label, process, url, log)
        except httpx.TransportError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit(f"serve_load: {label} did not answer within 300 s, see {log}")


def ours_search(args: argparse.Namespace) -> dict[str, Any]:
    """Our decode keys for the peer's search rule (SAME_SEARCH), beside the beam."""
    return {**PEERS_RULE, "alpha": args.alpha}


def ours_command(args: argparse.Namespace, port: int, extra: list[str]) -> list[str]:
    rule = [
        text
        for key, value in ours_search(args).items()
        for text in (f"--{key.replace('_', '-')}", str(value))
    ]
    return [
        sys.executable, "-m", "seq2seq_attn", "--quiet", "serve", "--model", str(args.ours),
        "--port", str(port), "--beam", str(args.beam), *rule, "--nbest", "1", "--device", "cpu",
        "--threads", str(args.threads), "--max-sentences", "1000", *extra,
    ]  # fmt: skip


def mixed_command(args: argparse.Namespace, port: int) -> list[str]:
    """Ours with the default limits (the heavy request is the largest they accept)."""
    return [
        sys.executable, "-m", "seq2seq_attn", "--quiet", "serve", "--model", str(args.ours),
        "--port", str(port), "--beam", str(args.beam), "--nbest", "1", "--device", "cpu",
        "--threads", str(args.threads),
    ]  # fmt: skip


def opennmt_conf(args: argparse.Namespace, folder: Path) -> Path:
    """conf.json for `onmt_server`: the model, beam and batch, and its sentencepiece models through
    pyonmttok (the tokenizer its server ships with; `mode: none` keeps sentencepiece's pieces)."""
    tokenizers = {
        side: _pyonmttok(model)
        for side, model in [("src", args.opennmt_sp_src), ("tgt", args.opennmt_sp_tgt)]
    }

    def entry(model_id: int, n_best: int) -> dict[str, Any]:
        opt = {"beam_size": args.beam, "n_best": n_best, "batch_size": 64, "max_length": 250}
        opt |= {"length_penalty": "wu", "alpha": args.alpha}  # GNMT's penalty: SAME_SEARCH
        model = str(args.opennmt_model.resolve())
        return {
            "id": model_id,
            "model": model,
            "timeout": -1,
            "load": True,
            "opt": opt,
            "tokenizer": tokenizers,
        }

    conf = {"models_root": str(folder), "models": [entry(MODEL_ID, 1), entry(NBEST_MODEL_ID, 2)]}
    path = folder / "conf.json"
    folder.mkdir(parents=True, exist_ok=True)  # --out, made by its first write
    write_text(path, json.dumps(conf, indent=1))
    return path


def _pyonmttok(model: Path) -> dict[str, Any]:
    return {"type": "pyonmttok", "mode": "none", "params": {"sp_model_path": str(model.resolve())}}


def opennmt_command(cache: Path, conf: Path, port: int) -> list[str]:
    python = cache / "venvs" / "opennmt" / "bin" / "python"  # the side-by-side benchmark's peer install
    return [
        str(python), "-m", "onmt.bin.server", "--ip", "127.0.0.1", "--port", str(port),
        "--url_root", "/translator", "--model_config", str(conf),
    ]  # fmt: skip


def body(sentences: list[str], model_id: int = MODEL_ID) -> list[dict[str, Any]]:
    """OpenNMT-py's request body: one entry per sentence, each naming the model."""
    return [{"src": sentence, "id": model_id} for sentence in sentences]


def best(answer: httpx.Response) -> str:
    """The best translation of a one-sentence request's answer."""
    return answer.json()[0][0]["tgt"]


async def load(
    url: str,
    sentences: list[str],
    clients: int,
    requests: int,
    seconds: float,
    heavy: list[str] | None = None,
) -> dict[str, Any]:
    """C clients, each sending one sentence per request until `requests` answers or `seconds` passed;
    with `heavy`, one more client sending those sentences as one request, over and over, meanwhile."""
    latencies: list[float] = []
    lengths: list[int] = []
    heavy_latencies: list[float] = []
    errors = 0
    next_sentence = 0
    deadline = time.monotonic() + seconds

    def running() -> bool:
        return len(latencies) + errors < requests and time.monotonic() < deadline

    async def heavy_client(http: httpx.AsyncClient) -> None:
        heavy_body = body(heavy or [])
        while running():
            started = time.perf_counter()
            answer = await http.post(f"{url}{ROUTE}", json=heavy_body)
            if answer.status_code != 200:
                raise SystemExit(
                    f"serve_load: the heavy request got {answer.status_code}: {answer.text[:200]}"
                )
            heavy_latencies.append(time.perf_counter() - started)

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal next_sentence, errors
        while running():
            sentence = sentences[next_sentence % len(sentences)]
            next_sentence += 1
            started = time.perf_counter()
            try:
                answer = await http.post(f"{url}{ROUTE}", json=body([sentence]))
                ok = answer.status_code == 200 and isinstance(answer.json(), list)
            except httpx.HTTPError:
                ok = False
            if not ok:
                errors += 1
                continue
            latencies.append(time.perf_counter() - started)
            lengths.append(len(best(answer).split()))

    connections = clients + (heavy is not None)
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)

    async def short_clients(http: httpx.AsyncClient) -> float:
        """Run the clients; when the last of them finished (the heavy one's last request may go on)."""
        await asyncio.gather(*(client(http) for _ in range(clients)))
        return time.perf_counter()

    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:
        heavy_run = [heavy_client(http)] if heavy is not None else []
        finished, *_ = await asyncio.gather(short_clients(http), *heavy_run)
    elapsed = finished - started  # the rate of the clients' own requests
    level = {
        "clients": clients,
        "answered": len(latencies),
        "errors": errors,
        "seconds": round(elapsed, 2),
        "requests_per_s": round(len(latencies) / elapsed, 2),
        **{f"p{q}_ms": percentile(latencies, q) for q in (50, 95, 99)},
        "mean_output_words": round(statistics.fmean(lengths), 2) if lengths else None,
    }
    if heavy is not None:
        level["heavy"] = {"answered": len(heavy_latencies), "p50_ms": percentile(heavy_latencies, 50)}
    return level


async def answer_each(url: str, sentences: list[str], clients: int = BLEU_CLIENTS) -> list[str]:
    """Each sentence sent once, one per request, by `clients` clients: the best translation of each, in
    order (not timed: these answers are scored, not clocked)."""
    answers = [""] * len(sentences)
    indices = iter(range(len(sentences)))  # shared: each sentence taken by one client

    async def client(http: httpx.AsyncClient) -> None:
        for index in indices:
            answer = await http.post(f"{url}{ROUTE}", json=body([sentences[index]]))
            answer.raise_for_status()
            answers[index] = best(answer)

    async with httpx.AsyncClient(timeout=600) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return answers


def answers_bleu(server: Server, sentences: list[str], references: list[str]) -> dict[str, Any]:
    """sacreBLEU of the server's answers to `sentences` against `references` (the package's BLEU), with
    the answers, so that anyone can score them again."""
    metric = bleu_metric(references)
    answers = asyncio.run(answer_each(server.url, sentences))
    return {
        "sentences": len(sentences),
        "bleu": round(metric.corpus_score(answers, None).score, 2),
        "signature": str(metric.get_signature()),
        "answers": answers,
    }


def percentile(latencies: list[float], q: int) -> float | None:
    """The q-th percentile of latencies in seconds, in milliseconds (the sample at that rank)."""
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, q * len(ordered) // 100)] * 1000 if ordered else None


def measure(server: Server, sentences: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """One repeat: every concurrency level, after a warm-up."""
    asyncio.run(load(server.url, sentences[: args.warmup], 1, args.warmup, args.seconds))  # warm caches
    levels = [asyncio.run(load(server.url, sentences, c, args.requests, args.seconds)) for c in args.clients]
    return {"levels": levels, "peak_rss_mib": server.peak_rss_mib()}


def summarise(served: Served, repeats: list[dict[str, Any]], bleu: dict[str, Any] | None) -> dict[str, Any]:
    """A system's figures over its repeats: per level the medians, requests/s with its [min, max]."""
    levels = []
    for index, clients in enumerate(level["clients"] for level in repeats[0]["levels"]):
        runs = [repeat["levels"][index] for repeat in repeats]
        level = {
            "clients": clients,
            **medians(runs, LEVEL_FIGURES),
            "errors": sum(run["errors"] for run in runs),
        }
        level["requests_per_s_range"] = ranges(runs, ["requests_per_s"]).get("requests_per_s")
        levels.append(level)
    words = [level["mean_output_words"] for level in levels if level["mean_output_words"] is not None]
    peaks = [repeat["peak_rss_mib"] for repeat in repeats if repeat["peak_rss_mib"] is not None]
    return {
        "label": served.label,
        "model": served.model,
        "levels": levels,
        "repeats": repeats,
        "mean_output_words": round(statistics.fmean(words), 2) if words else None,
        "peak_rss_mib": max(peaks, default=None),
        "errors": sum(level["errors"] for level in levels),
        "bleu": bleu,
    }


def ours_model(path: Path, lexical_shortlist: bool = False) -> dict[str, Any]:
    """What `seq2seq serve --model path` loads: its architecture, widths, vocabulary and parameters (with
    its lexical shortlist's table, which must then exist)."""
    import seq2seq_attn as s2s

    loaded = s2s.load(path, device="cpu", lexical_shortlist=lexical_shortlist)
    model, vocab = loaded.config.model, loaded.config.vocab
    return {
        "architecture": f"{model.decoder}, {model.attention} attention, {model.cell.upper()} cells",
        "embeddings": [model.src_embed_dim, model.tgt_embed_dim],
        "encoder_hidden": model.hidden_size,
        "decoder_hidden": model.decoder_hidden_size,
        "vocabulary": f"sentencepiece {vocab.type} {vocab.size:,}" + (" joint" if vocab.joint else " a side"),
        "parameters": loaded.parameters,
    }


# run by the peer's own Python: its checkpoint pickles OpenNMT-py's objects; the encoder's width is per
# direction, as ours counts it (`brnn` splits enc_hid_size across its two directions)
OPENNMT_DESCRIBE = """
import json, sys, torch
checkpoint = torch.load(sys.argv[1], map_location="cpu", weights_only=False)
opt = vars(checkpoint["opt"])
vocab = checkpoint.get("vocab") or {}
weights = [t for part in ("model", "generator") for t in (checkpoint.get(part) or {}).values()]
print(json.dumps({
    "architecture": f"{opt.get('encoder_type')} encoder, {opt.get('decoder_type')} decoder, "
    f"{opt.get('global_attention')} attention, {opt.get('rnn_type')} cells",
    "embeddings": [opt.get("src_word_vec_size"), opt.get("tgt_word_vec_size")],
    "encoder_hidden": opt.get("enc_hid_size") // (2 if opt.get("encoder_type") == "brnn" else 1),
    "decoder_hidden": opt.get("dec_hid_size"),
    "vocabulary": {side: len(vocab[side]) for side in ("src", "tgt") if side in vocab},
    "parameters": sum(t.numel() for t in weights if hasattr(t, "numel")),
}))
"""


def opennmt_model(cache: Path, checkpoint: Path) -> dict[str, Any]:
    """What `onmt_server` loads, read from the checkpoint by the peer's install; the error when it cannot."""
    python = cache / "venvs" / "opennmt" / "bin" / "python"
    if not python.exists():
        return {"unknown": f"no OpenNMT-py install at {python}"}
    done = subprocess.run(
        [str(python), "-c", OPENNMT_DESCRIBE, str(checkpoint)],
        capture_output=True,
        text=True,
        env={**os.environ, **OPENNMT_ENV},
    )
    if done.returncode != 0:
        return {"unknown": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(done.stdout)


def heavy_request(sentences: list[str], limits: Limits = Limits()) -> list[str]:
    """The largest request `limits` accept at n-best 1: sentences of `max_chars` characters (test sentences
    joined and cut), as many as `max_request_chars` allows."""
    text = " ".join(sentences)
    count = min(limits.max_sentences, limits.max_request_chars // limits.max_chars)
    width = limits.max_chars
    return [(text * (1 + width * count // len(text)))[n * width : (n + 1) * width] for n in range(count)]


def measure_mixed(server: Server, sentences: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """Each level's short requests alone and beside the heavy client (module docstring)."""
    asyncio.run(load(server.url, sentences[: args.warmup], 1, args.warmup, args.seconds))  # warm caches
    heavy = heavy_request(sentences)
    levels = []
    for clients in args.clients:
        alone = asyncio.run(load(server.url, sentences, clients, args.requests, args.seconds))
        mixed = asyncio.run(load(server.url, sentences, clients, args.requests, args.seconds, heavy))
        ratio = mixed["p99_ms"] / alone["p99_ms"] if alone["p99_ms"] and mixed["p99_ms"] else None
        bound = max(2 * (alone["p99_ms"] or 0), 1000)
        passes = mixed["p99_ms"] is not None and mixed["p99_ms"] <= bound
        levels.append(
            {"clients": clients, "alone": alone, "mixed": mixed, "p99_ratio": ratio, "passes": passes}
        )
    return {
        "label": server.label,
        "heavy_request": {
            "sentences": len(heavy),
            "longest": max(map(len, heavy)),
            "characters": sum(map(len, heavy)),
        },
        "levels": levels,
        "peak_rss_mib": server.peak_rss_mib(),
    }


def connect(server: Server) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=300)


def closed_after(sock: socket.socket, send: bytes = b"", reply: bool = False) -> dict[str, Any]:
    """Send `send` (with `reply`, wait for the first answer), then the seconds until the server closes
    the connection and the status line of what it sent meanwhile."""
    with sock:
        sock.sendall(send)
        received = sock.recv(65536) if reply else b""
        started = time.monotonic()
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
        closed = time.monotonic()
    answers = [line.decode() for line in received.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]
    return {"seconds": round(closed - started, 2), "answered": answers[-1] if answers else None, "at": closed}


def _without_time(probe: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in probe.items() if key != "at"}


def measure_guards(server: Server, sentences: list[str]) -> dict[str, Any]:
    """The careless clients' and the stop's figures (module docstring)."""
    request = b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99\r\n\r\n{"
    health = b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    probes = {
        "silent": lambda: closed_after(connect(server)),
        "body_stalls": lambda: closed_after(connect(server), request),
        "idle": lambda: closed_after(connect(server), health, True),
    }
    with ThreadPoolExecutor(len(probes)) as pool:
        futures = {name: pool.submit(probe) for name, probe in probes.items()}
        timeouts = {name: _without_time(future.result()) for name, future in futures.items()}
    heavy = body(heavy_request(sentences))
    answers: list[dict[str, Any]] = []

    def send() -> None:
        answer = httpx.post(f"{server.url}{ROUTE}", json=heavy, timeout=300)
        error = answer.json().get("error") if answer.status_code != 200 else None
        answers.append({"status": answer.status_code, "error": error, "at": time.monotonic()})

    with ThreadPoolExecutor(HEAVY_IN_FLIGHT + 1) as pool:
        sent = [pool.submit(send) for _ in range(HEAVY_IN_FLIGHT)]
        stalled = pool.submit(closed_after, connect(server), request)
        time.sleep(SEARCHING_SECONDS)
        stopped = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        status = server.process.wait(300)
        exited = time.monotonic() - stopped
        for future in sent:
            future.result()
        stalled_body = stalled.result()
    log = server.log.read_text(encoding="utf-8", errors="replace")
    return {
        "timeouts": timeouts,
        "stop": {
            "heavy_in_flight": HEAVY_IN_FLIGHT,
            "exit_status": status,
            "exit_seconds": round(exited, 2),
            "answers": sorted(  # each with the seconds after SIGTERM it came (negative: before)
                ({**_without_time(answer), "after": round(answer["at"] - stopped, 2)} for answer in answers),
                key=lambda answer: answer["after"],
            ),
            "stalled_body": {  # its seconds counted from SIGTERM
                **_without_time(stalled_body),
                "seconds": round(stalled_body["at"] - stopped, 2),
            },
            "traceback": "Traceback" in log,
        },
    }


def file_names(value: Any) -> Any:
    """`value` with every absolute path replaced by its file name (a recording holds no machine's paths)."""
    return map_strings(value, lambda text: Path(text).name if text.startswith("/") else text)


def record(server: Server, path: Path) -> None:
    """What OpenNMT-py's server answers, as the shape test reads it."""
    http = httpx.Client(timeout=300)
    answers = {
        "command": "onmt_server (OpenNMT-py 3.5.1), recorded by " + PROG + " --record",
        "models": file_names(http.get(f"{server.url}/translator/models").json()),
        "health": http.get(f"{server.url}/translator/health").json(),
        "translate": {
            "request": FIXTURE_INPUTS,
            "response": http.post(f"{server.url}{ROUTE}", json=body(FIXTURE_INPUTS, NBEST_MODEL_ID)).json(),
        },
    }
    unknown = http.post(f"{server.url}{ROUTE}", json=[{"src": "x", "id": 7}])  # its answer to an unknown id
    answers["unknown_model"] = {"status": unknown.status_code, "body": unknown.text[:300]}
    write_json(path, answers)


def measure_interleaved(
    compared: list[Served], sentences: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    """`--interleave`: every server started side by side, one client sending the sentences one at a time
    to each in turn (module docstring); per server one median latency per start."""
    chosen = sentences[: args.interleave]
    medians: dict[str, list[float]] = {served.label: [] for served in compared}
    for repeat in range(1, args.repeats + 1):
        servers: list[Server] = []
        try:
            for served in compared:
                port, log = free_port(), args.out / f"{served.label}.interleaved.{repeat}.log"
                servers.append(start(served.label, served.command(port), served.env, log, port))
            seconds: dict[str, list[float]] = {server.label: [] for server in servers}
            with httpx.Client(timeout=300) as http:
                for i, sentence in enumerate(chosen):
                    for server in servers[i % len(servers) :] + servers[: i % len(servers)]:
                        began = time.perf_counter()
                        http.post(f"{server.url}{ROUTE}", json=body([sentence])).raise_for_status()
                        if i >= args.warmup:
                            seconds[server.label].append(time.perf_counter() - began)
            for label, values in seconds.items():
                medians[label].append(round(1000 * statistics.median(values), 1))
        finally:
            for server in servers:
                server.stop()
    return {"sentences": len(chosen), "counted": len(chosen) - args.warmup, "p50_ms": medians}


def int8_agreement(args: argparse.Namespace, sentences: list[str]) -> dict[str, Any]:
    """How often the int8 copy's best translation of a sentence differs between searching it alone and
    among 31 others (the batches the server would make if it mixed int8 requests)."""
    import torch

    import seq2seq_attn as s2s

    torch.set_num_threads(args.threads)
    chosen = sentences[: args.int8_agreement]
    model = s2s.load(
        args.ours,
        beam_size=args.beam,
        precision="int8",
        lexical_shortlist=args.shortlist,
        **ours_search(args),
    )
    alone = [model.translate_one(line) for line in chosen]
    batched = [
        text for start in range(0, len(chosen), 32) for text in model.translate(chosen[start : start + 32])
    ]
    differ = sum(a != b for a, b in zip(alone, batched, strict=True))
    return {"sentences": len(chosen), "batch": 32, "differ": differ, "share": round(differ / len(chosen), 4)}


def header(result: dict[str, Any], title: str) -> list[str]:
    return [
        f"# {title}",
        "",
        f"Command: `{result['command']}`",
        "",
        f"Machine: {summary(result['machine'])}; each server {result['settings']['threads']} threads.",
        *(f"\n**Warning**: {warning}" for warning in result["warnings"]),
        "",
    ]


def interleaved_markdown(result: dict[str, Any]) -> str:
    interleaved, settings = result["interleaved"], result["settings"]
    lines = [
        *header(result, "One request at a time"),
        SAME_SEARCH.format(**settings),
        "",
        f"Every server started side by side, {settings['repeats']} times; one client sends the first "
        f"{interleaved['sentences']} test sentences one at a time to each server in turn (who goes first "
        f"rotates). Each cell: one start's median latency over the last {interleaved['counted']}.",
        "",
        "| system | p50 ms per start | median |",
        "|---|---|---:|",
    ]
    for label, values in interleaved["p50_ms"].items():
        each = ", ".join(map(_number, values))
        lines.append(f"| {label} | {each} | {_number(statistics.median(values))} |")
    return "\n".join(lines) + "\n"


def mixed_markdown(result: dict[str, Any]) -> str:
    mixed = result["mixed"]
    heavy = mixed["heavy_request"]
    lines = [
        *header(result, "Serving a mixed load"),
        f"The heavy client sends {heavy['sentences']} sentences of {heavy['longest']:,} characters "
        f"({heavy['characters']:,} in all) per request, the largest request the default limits "
        "accept, over and over; the other clients send one test sentence per request. Passes: the short "
        "requests' p99 beside the heavy client within 2x of theirs alone, or under 1 s.",
        "",
        "| short clients | alone p50 ms | alone p99 ms | mixed p50 ms | mixed p99 ms | p99 ratio | passes "
        "| short requests/s alone / mixed | heavy requests answered (p50 s) | errors |",
        "|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for level in mixed["levels"]:
        alone, loaded = level["alone"], level["mixed"]
        heavy_p50 = loaded["heavy"]["p50_ms"]
        cells = [
            level["clients"],
            *(_number(run[key]) for run in (alone, loaded) for key in ("p50_ms", "p99_ms")),
            f"{level['p99_ratio']:.2f}x" if level["p99_ratio"] else "",
            "yes" if level["passes"] else "**no**",
            f"{_number(alone['requests_per_s'])} / {_number(loaded['requests_per_s'])}",
            f"{loaded['heavy']['answered']} ({heavy_p50 / 1000:.1f})" if heavy_p50 else "0",
            alone["errors"] + loaded["errors"],
        ]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines) + "\n"


def guards_markdown(result: dict[str, Any]) -> str:
    guards, limits = result["guards"], ConnectionLimits()
    timeouts, stop = guards["timeouts"], guards["stop"]
    answered = [answer for answer in stop["answers"] if answer["status"] == 200]
    refused = [answer for answer in stop["answers"] if answer["status"] != 200]
    last = max((answer["after"] for answer in stop["answers"]), default=0)
    rows = [
        (
            "a silent connection closed",
            f"{limits.header_timeout:g} s",
            _closed(timeouts["silent"], "it opened"),
        ),
        (
            "a body that stops arriving answered",
            f"{limits.body_timeout:g} s",
            _closed(timeouts["body_stalls"], "its headers"),
        ),
        (
            "an idle connection closed after an answer",
            f"{limits.keep_alive:g} s",
            _closed(timeouts["idle"], "the answer"),
        ),
        (
            f"SIGTERM, {stop['heavy_in_flight']} of the largest requests in flight",
            f"all answered within {limits.grace:g} s",
            f"{len(answered)} translated, {len(refused)} answered "
            + ", ".join(sorted({f"{a['status']} {a['error']!r}" for a in refused}) or ["-"])
            + f"; the last {last:.1f} s after SIGTERM",
        ),
        ("SIGTERM, a body that stalls", "answered at once", _closed(stop["stalled_body"], "SIGTERM")),
        (
            "SIGTERM, the process",
            f"exits 0 within {limits.grace:g} s",
            f"exit {stop['exit_status']} after {stop['exit_seconds']:.1f} s",
        ),
        ("a traceback in its log", "none", "yes" if stop["traceback"] else "none"),
    ]
    lines = [
        *header(result, "Serving careless clients and a stop"),
        "| what | default | measured |",
        "|---|---|---|",
    ]
    lines += [f"| {what} | {default} | {measured} |" for what, default, measured in rows]
    return "\n".join(lines) + "\n"


def _closed(probe: dict[str, Any], since: str) -> str:
    answered = f"{probe['answered']}, then " if probe["answered"] else ""
    return f"{answered}closed {probe['seconds']:.1f} s after {since}"


def markdown(result: dict[str, Any]) -> str:
    settings = result["settings"]
    repeats = settings.get("repeats", 1)
    labels = [system["label"] for system in result["systems"]]
    lines = [
        *header(result, "Serving under load"),
        *([ONE_REQUEST_AT_A_TIME, ""] if OPENNMT_LABEL in labels else []),
        *([SAME_SEARCH.format(**settings), ""] if "alpha" in settings else []),
        f"Each cell: the median over {repeats} repeats (each a fresh start of every server in turn), "
        "requests/s with [min, max] when there were several. BLEU: sacreBLEU of each server's answers to "
        "the first sentences, each sent once.",
        "",
        "| system | clients | requests/s | p50 ms | p95 ms | p99 ms | errors | mean output words "
        "| peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for system in result["systems"]:
        for level in system["levels"]:
            spread = level.get("requests_per_s_range")
            rate = _number(level["requests_per_s"]) + (
                f" [{_number(spread[0])}, {_number(spread[1])}]" if spread else ""
            )
            latencies = [_number(level[key]) for key in ("p50_ms", "p95_ms", "p99_ms")]
            cells = [system["label"], level["clients"], rate, *latencies, level["errors"]]
            cells += [_number(level["mean_output_words"]), _number(system["peak_rss_mib"])]
            lines.append("| " + " | ".join(map(str, cells)) + " |")
    lines += ["", "| system | model | BLEU (sentences) |", "|---|---|---:|"]
    for system in result["systems"]:
        bleu = system.get("bleu")
        score = f"{bleu['bleu']:.2f} ({bleu['sentences']:,})" if bleu else "not measured"
        lines.append(f"| {system['label']} | {_model(system.get('model') or {})} | {score} |")
    signatures = {system["bleu"]["signature"] for system in result["systems"] if system.get("bleu")}
    lines += [f"\nBLEU signature: {signature}" for signature in sorted(signatures)]
    agreement = result.get("int8_agreement")
    if agreement:
        lines += [
            "",
            f"int8 answers alone against in batches of {agreement['batch']}: {agreement['differ']} of "
            f"{agreement['sentences']} sentences differ ({100 * agreement['share']:.1f}%).",
        ]
    return "\n".join(lines) + "\n"


def _model(model: dict[str, Any]) -> str:
    """A served model in one cell: architecture, widths, vocabulary, parameters."""
    if "unknown" in model or not model:
        return f"unknown ({model.get('unknown', 'not recorded')})"
    vocabulary = model["vocabulary"]
    if isinstance(vocabulary, dict):
        vocabulary = " / ".join(f"{side} {size:,}" for side, size in vocabulary.items())
    widths = f"embeddings {'/'.join(map(str, model['embeddings']))}, encoder {model['encoder_hidden']} per "
    widths += f"direction, decoder {model['decoder_hidden']}"
    return f"{model['architecture']}; {widths}; vocabulary {vocabulary}; {model['parameters']:,} parameters"


def _number(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--ours", type=Path, required=True, help="our run folder or exported model folder")
    add("--shortlist", action="store_true", help="also serve ours in int8 with its lexical shortlist")
    add("--opennmt-model", type=Path, help="an OpenNMT-py checkpoint (omit to serve ours alone)")
    add("--opennmt-sp-src", type=Path, help="the sentencepiece model its source was cut with")
    add("--opennmt-sp-tgt", type=Path, help="the sentencepiece model its target was cut with")
    add("--sentences", type=Path, required=True, help="source sentences to send, one per request")
    add("--references", type=Path, help="their references, line by line: each server's answers get a BLEU")
    add("--bleu-sentences", type=int, default=500, help="the first sentences answered once for the BLEU")
    add("--repeats", type=int, default=3, help="measurements of each server (the table gives medians)")
    add("--clients", type=lambda s: [int(c) for c in s.split(",")], default=[1, 8, 32])
    add("--requests", type=int, default=400, help="answers per concurrency level at most")
    add("--seconds", type=float, default=120, help="seconds per concurrency level at most")
    add("--warmup", type=int, default=10, help="requests sent first and not counted")
    add("--beam", type=int, default=5)
    add("--alpha", type=float, default=0.6, help="GNMT length-penalty exponent of both servers' search")
    add("--threads", type=int, default=2, help="CPU threads of each server")
    add("--int8-agreement", type=int, default=0, help="sentences for the int8 batching agreement (0: skip)")
    add("--interleave", type=int, default=0, help="one request at a time to servers side by side (docstring)")
    add("--mixed", action="store_true", help="ours alone, short requests beside a heavy client (docstring)")
    add("--guards", action="store_true", help="ours alone: careless clients' timeouts and a stop (docstring)")
    add(
        "--cache", type=Path, default=ROOT / ".bench", help="where bench installed OpenNMT-py (venvs/opennmt)"
    )
    add("--record", type=Path, help="write OpenNMT-py's answers to a few requests to this JSON file")
    add("--out", type=Path, default=ROOT / "runs/serve_load", help="server logs")
    add(
        "--doc", type=Path, help="markdown (JSON next to it); default results/serve_load.md or serve_mixed.md"
    )
    args = parser.parse_args(argv)
    if args.interleave and args.interleave <= args.warmup:
        parser.error(f"--interleave {args.interleave} leaves no sentence after --warmup {args.warmup}")
    modes = {
        "serve_mixed.md": args.mixed,
        "serve_guards.md": args.guards,
        "serve_interleaved.md": args.interleave,
    }
    name = next((name for name, chosen in modes.items() if chosen), "serve_load.md")
    args.doc = args.doc or ROOT / "benchmarks/results" / name
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.doc.parent.mkdir(parents=True, exist_ok=True)
    sentences = list(read_lines(args.sentences))
    references = list(read_lines(args.references)) if args.references else []
    if references and len(references) != len(sentences):
        raise SystemExit(
            f"serve_load: {args.references} has {len(references)} lines, {args.sentences} {len(sentences)}"
        )
    kept = [index for index, line in enumerate(sentences) if line.strip()]
    sentences, references = [sentences[i] for i in kept], [references[i] for i in kept] if references else []
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    result: dict[str, Any] = {
        "command": shown_command(PROG, sys.argv[1:] if argv is None else argv, PLACEHOLDERS),
        "machine": describe("cpu", args.threads),
        "settings": {"beam": args.beam, "threads": args.threads, "requests": args.requests,
                     "seconds": args.seconds, "clients": args.clients, "route": ROUTE,
                     "repeats": args.repeats, "bleu_sentences": args.bleu_sentences if references else 0},
        "systems": [],
    }  # fmt: skip
    if args.mixed or args.guards:
        port = free_port()
        mode = "mixed" if args.mixed else "guards"
        server = start("seq2seq-attn fp32", mixed_command(args, port), env, args.out / f"{mode}.log", port)
        try:
            measured = (
                measure_mixed(server, sentences, args) if args.mixed else measure_guards(server, sentences)
            )
            result[mode] = measured
        finally:
            server.stop()
        finish(args, result, mixed_markdown if args.mixed else guards_markdown)
        return
    result["settings"] |= {"alpha": args.alpha, "stopping": PEERS_RULE["stopping"]}
    try:
        compared = systems(args, env)
    except UserError as error:  # e.g. --shortlist without the run's table: one line, nothing measured
        raise SystemExit(f"serve_load: {error}") from None
    if args.interleave:
        result["interleaved"] = measure_interleaved(compared, sentences, args)
        finish(args, result, interleaved_markdown)
        return
    result["systems"] = compare(compared, sentences, references, args, result)
    if args.int8_agreement:
        result["int8_agreement"] = int8_agreement(args, sentences)
    finish(args, result, markdown)


def compare(
    compared: list[Served],
    sentences: list[str],
    references: list[str],
    args: argparse.Namespace,
    result: dict[str, Any],
) -> list[dict[str, Any]]:
    """Every server measured `--repeats` times, in turn within each repeat; the first start of each also
    answers the BLEU sentences (and OpenNMT-py's, with `--record`, the fixture's requests)."""
    bleu_sources = sentences[: args.bleu_sentences] if references else []
    runs: dict[str, list[dict[str, Any]]] = {served.label: [] for served in compared}
    scores: dict[str, dict[str, Any]] = {}
    for repeat in range(1, args.repeats + 1):
        for served in compared:
            port = free_port()
            log = args.out / f"{served.label}.{repeat}.log"
            server = start(served.label, served.command(port), served.env, log, port)
            try:
                if repeat == 1 and args.record and served.label == OPENNMT_LABEL:
                    record(server, args.record)
                if repeat == 1 and bleu_sources:
                    scores[served.label] = answers_bleu(server, bleu_sources, references[: len(bleu_sources)])
                runs[served.label].append(measure(server, sentences, args))
                write_json(args.out / "partial.json", {**result, "runs": runs, "bleu": scores})  # so far
            finally:
                server.stop()
    return [summarise(served, runs[served.label], scores.get(served.label)) for served in compared]


def systems(args: argparse.Namespace, env: dict[str, str]) -> list[Served]:
    """The servers compared: OpenNMT-py's when a checkpoint is given, ours in fp32, and its int8 copy with
    the lexical shortlist with `--shortlist`."""
    compared = []
    if args.opennmt_model:
        conf = opennmt_conf(args, args.out)
        compared.append(
            Served(
                OPENNMT_LABEL,
                lambda port: opennmt_command(args.cache, conf, port),
                {**env, **OPENNMT_ENV},
                opennmt_model(args.cache, args.opennmt_model),
            )
        )
    variants = [("seq2seq-attn fp32", [])]
    if args.shortlist:
        variants.append(("seq2seq-attn int8 + shortlist", ["--precision", "int8", "--lexical-shortlist"]))
    ours = ours_model(args.ours, args.shortlist)  # a missing table stops here, before any server starts
    for label, extra in variants:
        compared.append(Served(label, lambda port, extra=extra: ours_command(args, port, extra), env, ours))
    return compared


def finish(args: argparse.Namespace, result: dict[str, Any], render: Callable[[dict[str, Any]], str]) -> None:
    """The report's warnings, then its JSON and markdown written and the markdown printed."""
    warnings = [load_warning(result["machine"]["load_before"]), *provenance_warnings(result["machine"])]
    result["warnings"] = [warning for warning in warnings if warning]
    write_json(args.doc.with_suffix(".json"), result)
    write_text(args.doc, render(result))
    print(render(result))


if __name__ == "__main__":
    main()
