"""The benchmark harness (benchmarks/): logs, statistics, reports, processes, machine and load, data.

The peers themselves are not run here (they need their own virtual environments and minutes); their log
formats are checked on excerpts of real log lines. Our side runs end to end on a tiny corpus (slow mark).
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch
import yaml
from helpers import TINY_MODEL, tiny_config, write_corpus, write_tiny_config

from benchmarks import (
    bench,
    bench_search_ops,
    bench_step,
    curves,
    logs,
    machine,
    ours_decode,
    report,
    serve_load,
)
from benchmarks.measure import (
    SNAPSHOT_HOOK_ENV,
    Job,
    Measured,
    Snapshots,
    launched,
    read_snapshots,
    run_job,
)
from benchmarks.toolkits import (
    OPENNMT_TRANSLATE,
    JoeyNMT,
    Levers,
    OpenNMT,
    OpenNMTGeneral,
    Ours,
    Pieces,
    Recipe,
    Settings,
    Skip,
    export_pieces,
    fill,
    matched_recipe,
)
from seq2seq_attn import provenance
from seq2seq_attn.config import load_config
from seq2seq_attn.evaluation.metrics.bleu import bleu_metric
from seq2seq_attn.serving.limits import Limits, Refusal, check_sentences, check_work
from seq2seq_attn.training.optim import build_optimizer
from seq2seq_attn.vocab.pieces import build_vocab

ROOT = Path(__file__).resolve().parent.parent

OPENNMT_LOG = """\
[2026-11-21 10:00:00,001 INFO] * number of parameters: 1151308
[2026-11-21 10:00:09,120 INFO] Step  25/  300; acc: 3.1; ppl: 812.3; xent: 6.7; lr: 0.00100; \
sents:    1600; bsz: 1234/1456/64; 2345/5432 tok/s;     16 sec;
[2026-11-21 10:00:18,410 INFO] Step 50/1000000000; acc: 5.0; ppl: 401.0; xent: 6.0; lr: 0.00100; \
sents:    1600; bsz: 1230/1450/64; 2400/ 5500.5 tok/s;     31 sec;
[2026-11-21 10:00:27,700 INFO] Saving checkpoint /x/model/model_step_50.pt
"""
JOEYNMT_LOG = """\
2026-11-21 10:00:00,001 - INFO - joeynmt.model - Total params: 1873412
2026-11-21 10:00:40,000 - INFO - joeynmt.training - Epoch   1, Step:       25, Batch Loss:   123.456789, \
Batch Acc: 0.012345, Tokens per Sec:     1603, Lr: 0.001000
2026-11-21 10:01:20,000 - INFO - joeynmt.training - Epoch   1, Step:       50, Batch Loss:   100.000000, \
Batch Acc: 0.020000, Tokens per Sec:     1650, Lr: 0.001000
"""
OURS_METRICS = "\n".join(
    json.dumps(record)
    for record in [
        {"step": 25, "time": 3.1, "loss": 6.1, "tokens_per_s": 9000.5, "padding": 0.1},
        {"step": 50, "time": 6.0, "loss": 5.2, "tokens_per_s": 9100.0, "padding": 0.1},
        {"step": 50, "time": 7.0, "valid_loss": 5.0},
    ]
)


@pytest.mark.parametrize(
    ("toolkit", "text", "points"),
    [
        (logs.OPENNMT, OPENNMT_LOG, [(25, 5432.0), (50, 5500.5)]),
        (logs.JOEYNMT, JOEYNMT_LOG, [(25, 1603.0), (50, 1650.0)]),
        (logs.OURS, OURS_METRICS, [(25, 9000.5), (50, 9100.0)]),
    ],
)
def test_training_throughput_points_come_from_each_toolkits_log(toolkit, text, points):
    assert logs.train_points(toolkit, text) == points


@pytest.mark.parametrize(
    ("toolkit", "text", "count"),
    [
        (logs.OPENNMT, OPENNMT_LOG, 1151308),
        (logs.JOEYNMT, JOEYNMT_LOG, 1873412),
        (logs.OURS, "training runs/x at step 0 on cpu (2,345,678 parameters, 313 batches/epoch)", 2345678),
        (logs.OURS, "no model was built", None),
    ],
)
def test_parameter_counts(toolkit, text, count):
    assert logs.parameters(toolkit, text) == count


def test_steady_rate_averages_the_window_after_the_warmup():
    points = [(25, 100.0), (50, 200.0), (75, 300.0), (100, 400.0), (125, 1000.0)]
    assert logs.steady_rate(points, (25, 100)) == 300.0
    assert logs.steady_rate(points, (125, 175)) is None  # never past the warm-up


def test_the_window_is_the_same_updates_for_every_run_cut_where_the_shortest_log_ends():
    full = [(step, 1.0) for step in range(25, 501, 25)]
    stopped = [(25, 1.0), (50, 1.0), (75, 1.0)]  # its budget ran out at update 75..99
    never = [(25, 1.0)]  # did not get past the warm-up: no figure, and it cuts no one's window
    assert logs.common_window([full, full], warmup=25, steps=100) == (25, 125)
    assert logs.common_window([full, stopped, never, []], warmup=25, steps=100) == (25, 75)


@pytest.mark.parametrize(
    ("toolkit", "text", "seconds"),
    [
        (  # its own report rounds; the launcher's line is read, in full
            logs.OPENNMT,
            "Total translation time (s): 2.5\nAverage translation time (ms): 2.5\n"
            "Tokens per second: 20.1\nDecoding took 2.5123 s for 1000 sentences",
            2.5123,
        ),
        (logs.OPENNMT, "Total translation time (s): 2.5\nAverage translation time (ms): 2.5", None),
        (logs.JOEYNMT, "2026-11-21 - INFO - joeynmt.prediction - Generation took 3.2500[sec].", 3.25),
        (logs.OURS, "Decoding took 1.5000 s for 1000 sentences and 21000 target tokens", 1.5),
        (logs.JOEYNMT, "Traceback (most recent call last):", None),
    ],
)
def test_decoding_time_from_each_toolkits_log(toolkit, text, seconds):
    found = logs.decode_seconds(toolkit, text)
    assert found == (None if seconds is None else pytest.approx(seconds))


# A stand-in for the three OpenNMT-py 3.5.1 modules launcher/opennmt_translate.py hooks, each with the
# names and call order it has there: main() builds the engine, whose translator's _translate does the work.
_FAKE_ONMT = {
    "onmt/__init__.py": "",
    "onmt/bin/__init__.py": "",
    "onmt/translate/__init__.py": "",
    "onmt/model_builder.py": (
        "import torch\n\ndef load_test_model(opt):\n    return None, torch.nn.Linear(4, 4), None\n"
    ),
    "onmt/translate/translator.py": (
        "import time\nimport torch\n\nclass Inference:\n    def __init__(self, model):\n"
        "        self.model, self.report_time, self.out_file = model, True, None\n"
        "    def _translate(self, lines):\n        time.sleep(0.05)\n"
        "        predictions = [[str(self.model(torch.ones(1, 4)).shape[1]) + ' x'] for _ in lines]\n"
        "        if self.report_time:\n            print('Total translation time (s): 0.1')\n"
        "        return [[0.0]] * len(lines), predictions\n"
    ),
    "onmt/inference_engine.py": (
        "import types\nimport onmt.model_builder\nfrom onmt.translate.translator import Inference\n\n"
        "class InferenceEnginePY:\n    def __init__(self, src):\n"
        "        self.opt = types.SimpleNamespace(src=src)\n"
        "        self.translator = Inference(onmt.model_builder.load_test_model(self.opt)[1])\n"
        "    def infer_file(self):\n"
        "        return self.infer_list(open(self.opt.src, encoding='utf-8').read().splitlines())\n"
        "    def infer_list(self, lines):\n        return self.translator._translate(lines)\n"
    ),
    "onmt/bin/translate.py": (
        "import sys\nfrom onmt.inference_engine import InferenceEnginePY\n\n"
        "def main():\n    InferenceEnginePY(sys.argv[1]).infer_file()\n"
    ),
}


def test_the_opennmt_launcher_times_its_translation_in_full_once_and_not_its_multiply_add_count(tmp_path):
    for name, text in _FAKE_ONMT.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    src = tmp_path / "test.src"
    src.write_text("a b\nc d e\nf\n", encoding="utf-8")
    launcher = ROOT / "benchmarks/launcher"
    argv = [str(launcher / "launch.py"), str(launcher / "opennmt_translate.py"), "--count-macs", str(src)]
    out = subprocess.run(
        [sys.executable, *argv],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert re.findall(r"Decoding took \d+\.\d{4} s for 3 sentences", out) == [out.split("\n")[1]]
    assert logs.decode_seconds(logs.OPENNMT, out) >= 0.05  # the 0.05 s the stand-in sleeps, not its 0.1
    assert logs.multiply_adds(out) == 16 * 3 / 6  # three 4x4 products over six output pieces


def test_our_decoded_tokens_and_vocabulary_timings():
    assert (
        logs.ours_decoded_tokens("Decoding took 1.5000 s for 1000 sentences and 21000 target tokens") == 21000
    )
    vocab_output = (
        "vocabulary  data/x/vocab  bpe, separate: src 4000 / tgt 4000 pieces  (12.5 s)\n"
        "cache       6 of 6 files encoded  (3.0 s)\nfile  sentences ...\n"
    )
    assert logs.vocab_seconds(vocab_output) == (12.5, 3.0)
    assert logs.vocab_seconds("") == (None, None)


# ----------------------------------------------------------------------------------------------------------
# statistics and reports


def _result(device: str = "cpu", corpus: str = "synthetic") -> dict:
    def runs(values: list[dict]) -> list[dict]:
        return [{"rep": rep, **value} for rep, value in enumerate(values)]

    return {
        "command": "python -m benchmarks.bench --reps 3",
        "machine": {
            "cpu": "AMD EPYC",
            "cpu_flags": ["avx", "avx2", "avx512_bf16", "avx512f", "fma"],
            "cpu_capability": "AVX512",
            "load_before": 0.1,
            "cores": 2,
            "torch": "2.13.0",
            "torch_threads": 2,
            "python": "3.11.7",
            "os": "Linux",
            "date": "2026-11-21T10:00:00+00:00",
            "device": device,
            **({"gpu": "NVIDIA H200", "cuda": "12.8"} if device == "cuda" else {}),
        },
        "settings": {
            "reps": 3,
            "budget_min": 5.0,
            "max_steps": 0,
            "warmup": 25,
            "steps": 100,
            "log_every": 25,
            "batch": 64,
            "beam": 5,
            "alpha": 0.6,
            "max_len": 100,
            "max_output_ratio": 1.5,
        },
        "corpus": {"id": corpus, "name": corpus, "pairs": {"train": 20000, "valid": 500, "test": 1000}},
        "warnings": ["other processes kept 1.20 cores busy during ours training, repetition 2"],
        "toolkits": {
            "ours": {
                "label": "ours",
                "version": {"version": "0.1.0"},
                "runs": runs(
                    [
                        {
                            "train_points": _flat(9000.0),
                            "beam_sentences_per_s": 100.0,
                            "bleu_beam": 30.0,
                            "greedy_tokens_per_s": 900.0,
                        },
                        {
                            "train_points": _flat(8000.0),
                            "beam_sentences_per_s": 120.0,
                            "bleu_beam": 32.0,
                            "greedy_tokens_per_s": 800.0,
                        },
                        {
                            "train_points": _flat(10000.0),
                            "beam_sentences_per_s": 90.0,
                            "bleu_beam": 31.0,
                            "greedy_tokens_per_s": 700.0,
                        },
                    ]
                ),
            },
            "joeynmt": {
                "label": "JoeyNMT 2.3.0",
                "version": {"version": "2.3.0"},
                "runs": runs(
                    [
                        {
                            "train_points": _flat(1500.0),
                            "beam_sentences_per_s": 60.0,
                            "bleu_beam": 20.0,
                            "greedy_tokens_per_s": 1000.0,
                        },
                        {"train_points": _flat(1700.0), "error": "beam decoding failed (exit 1), see x.log"},
                    ]
                ),
            },
            "opennmt": {"label": "OpenNMT-py 3.5.1", "skipped": "could not install", "runs": []},
        },
        "ours_extra": runs([{"prepare_s": 2.0, "noattn_points": _flat(20000.0)}, {"prepare_s": 4.0}]),
    }


def _flat(rate: float, last: int = 125) -> list[list[float]]:
    """A training log at a constant rate every 25 updates up to `last`, as the JSON keeps it."""
    return [[step, rate] for step in range(25, last + 1, 25)]


def test_medians_ratios_and_targets():
    result = report.summarise(_result())
    assert result["window"] == [25, 125]
    ours, joey = result["toolkits"]["ours"]["median"], result["toolkits"]["joeynmt"]["median"]
    assert ours["train_tokens_per_s"] == 9000.0 and ours["beam_sentences_per_s"] == 100.0
    assert joey["train_tokens_per_s"] == 1600.0  # median of two
    assert joey["beam_sentences_per_s"] == 60.0  # the failed run produced none
    assert joey["params"] is None
    assert result["ratios"]["joeynmt"]["train_tokens_per_s"] == pytest.approx(9000 / 1600)
    assert result["ratios"]["opennmt"]["train_tokens_per_s"] is None  # skipped peer
    assert result["ours_median"]["prepare_s"] == 3.0
    verdicts = {
        t["target"]: (pytest.approx(t["measured"]), t["required"], t["met"]) for t in result["targets"]
    }
    assert verdicts["training target tokens/s vs the faster peer"] == (9000 / 1600, 1.5, True)
    assert verdicts["beam-search sentences/s vs the faster peer"] == (100 / 60, 2.0, False)
    assert verdicts["greedy target tokens/s vs the faster peer"] == (800 / 1000, 1.0, False)
    assert verdicts["BLEU after the same budget vs the best peer"] == (31 / 20, 1.0, True)
    assert verdicts["attention / no-attention training tokens/s"] == (9000 / 20000, 0.5, False)


def test_gpu_targets_are_stricter_and_missing_figures_give_no_verdict():
    result = _result("cuda")
    result["toolkits"]["joeynmt"]["runs"] = []
    result["ours_extra"] = []
    targets = report.summarise(result)["targets"]
    assert [t["required"] for t in targets] == [2.0, 3.0, 1.0, 1.0, 0.5]
    assert [t["met"] for t in targets] == [None, None, None, None, None]


def test_every_toolkit_is_measured_over_the_same_updates_and_the_header_says_which():
    result = _result()
    rising = [[step, float(step)] for step in range(25, 201, 25)]  # ours: faster the longer it runs
    result["toolkits"]["ours"]["runs"] = [{"rep": 0, "train_points": rising, "train_steps": 210}]
    result["toolkits"]["joeynmt"]["runs"] = [{"rep": 0, "train_points": _flat(1500.0, last=75)}]
    result["ours_extra"] = [{"rep": 0, "noattn_points": rising}]
    report.summarise(result)
    assert result["window"] == [25, 75]
    assert result["toolkits"]["ours"]["median"]["train_tokens_per_s"] == 62.5  # updates 50 and 75 only
    assert result["toolkits"]["joeynmt"]["median"]["train_tokens_per_s"] == 1500.0
    assert result["ours_median"]["noattn_tokens_per_s"] == 62.5
    text = report.markdown({"cpu synthetic": result})
    assert (
        "steady state = mean over updates 25-75 for every toolkit, in intervals of 25 (asked for 25-125; "
        "the shortest run's log ends at update 75)" in text
    )
    assert "| training: updates in the budget (the decoded checkpoint's) | 210 |" in text


def test_the_report_names_the_cpu_its_flags_and_torch_and_warns_of_competing_load():
    text = report.markdown({"cpu synthetic": report.summarise(_result())})
    assert (
        "- machine: AMD EPYC, 2 cores; flags: avx avx2 avx512_bf16 avx512f fma; ATen kernels AVX512; "
        "torch 2.13.0 (2 threads per process)" in text
    )
    assert "- load: 1-minute load average 0.10 before the run, not measured during it" in text
    assert "- **warning**: other processes kept 1.20 cores busy during ours training, repetition 2" in text


def test_a_run_under_instruction_set_limits_says_so(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "SSE41")
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "SSE4_2")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    described = machine.describe("cpu", threads=0)
    assert described["isa_limits"] == {"ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}
    assert "; instruction sets limited by ONEDNN_MAX_CPU_ISA=SSE41 MKL_ENABLE_INSTRUCTIONS=SSE4_2" in (
        machine.summary(described)
    )


def test_the_peer_servers_conf_is_written_into_an_out_folder_not_yet_made(tmp_path: Path) -> None:
    """`onmt_server`'s conf.json: both model entries (1-best and n-best) on the checkpoint, beam as asked,
    sentencepiece through pyonmttok; --out is made when it does not exist yet."""
    args = serve_load.parse_args(
        ["--ours", "run", "--sentences", "s", "--opennmt-model", str(tmp_path / "m.pt"), "--beam", "4"]
        + ["--opennmt-sp-src", str(tmp_path / "src.model"), "--opennmt-sp-tgt", str(tmp_path / "tgt.model")]
    )
    conf = json.loads(serve_load.opennmt_conf(args, tmp_path / "out" / "logs").read_text(encoding="utf-8"))
    assert [entry["id"] for entry in conf["models"]] == [serve_load.MODEL_ID, serve_load.NBEST_MODEL_ID]
    assert [entry["opt"]["n_best"] for entry in conf["models"]] == [1, 2]
    assert {entry["model"] for entry in conf["models"]} == {str(tmp_path / "m.pt")}
    assert all(entry["opt"]["beam_size"] == 4 for entry in conf["models"])
    # the search rule ours is given too: GNMT's penalty ("wu" there) at one alpha, the peer's stopping
    assert all(
        entry["opt"] | {"length_penalty": "wu", "alpha": 0.6} == entry["opt"] for entry in conf["models"]
    )
    ours = " ".join(serve_load.ours_command(args, 1, []))
    assert "--beam 4 --length-penalty gnmt --stopping top --alpha 0.6" in ours
    tokenizer = conf["models"][0]["tokenizer"]["tgt"]
    assert tokenizer["params"]["sp_model_path"] == str(tmp_path / "tgt.model")


def test_serve_load_with_shortlist_stops_in_one_line_before_any_server_when_the_table_is_missing(
    tiny_run_dir: Path, tmp_path: Path
) -> None:
    sentences = tmp_path / "test.en"
    sentences.write_text("the cat sat\n", encoding="utf-8")
    argv = ["--ours", str(tiny_run_dir), "--shortlist", "--sentences", str(sentences), "--repeats", "1"]
    with pytest.raises(SystemExit) as stopped:
        serve_load.main([*argv, "--out", str(tmp_path / "out"), "--doc", str(tmp_path / "r.md")])
    assert str(stopped.value).startswith("serve_load: ") and "no lexical shortlist" in str(stopped.value)
    assert "\n" not in str(stopped.value)
    assert not (tmp_path / "out").exists() and not (tmp_path / "r.md").exists()


def test_the_serving_report_shows_no_machines_paths() -> None:
    argv = ["--ours", "/somewhere/run", "--sentences", "/data/test.en", "--requests", "3"]
    argv += ["--doc", str(ROOT / "benchmarks/results/x.md"), "--cache", str(ROOT / ".bench")]
    assert serve_load.shown_command(serve_load.PROG, argv, serve_load.PLACEHOLDERS) == (
        "python -m benchmarks.serve_load --ours RUN --sentences TEST_SOURCES --requests 3 "
        "--doc benchmarks/results/x.md --cache .bench"
    )
    recorded = {"models": ["/tmp/m/gru_step_5.pt"], "opt": {"sp_model_path": "/tmp/m/src.model", "beam": 5}}
    assert serve_load.file_names(recorded) == {
        "models": ["gru_step_5.pt"],
        "opt": {"sp_model_path": "src.model", "beam": 5},
    }


def test_the_serving_table_gives_each_levels_median_over_the_repeats_and_the_rates_range() -> None:
    def repeat(rate: float, p99: float, rss: float) -> dict:
        level = {"clients": 8, "requests_per_s": rate, "p50_ms": 10.0, "p95_ms": 20.0, "p99_ms": p99}
        return {"levels": [{**level, "mean_output_words": 5.0, "errors": 1}], "peak_rss_mib": rss}

    model = {"architecture": "rnnsearch, bahdanau attention, GRU cells", "embeddings": [8, 8]}
    model |= {"encoder_hidden": 16, "decoder_hidden": 16, "vocabulary": "sentencepiece bpe 40 a side"}
    served = serve_load.Served("ours", lambda port: [], {}, {**model, "parameters": 12345})
    bleu = {"sentences": 3, "bleu": 12.5, "signature": "nrefs:1|case:mixed"}
    system = serve_load.summarise(
        served, [repeat(9.0, 300, 400), repeat(12.0, 100, 410), repeat(10.0, 200, 390)], bleu
    )
    (level,) = system["levels"]
    assert (level["requests_per_s"], level["p99_ms"], level["errors"]) == (10.0, 200, 3)
    assert level["requests_per_s_range"] == [9.0, 12.0] and system["peak_rss_mib"] == 410
    described = machine.describe("cpu", 2)
    result = {"command": "c", "machine": described, "warnings": [], "settings": {"threads": 2, "repeats": 3}}
    text = serve_load.markdown({**result, "systems": [system]})
    assert "| ours | 8 | 10.0 [9.0, 12.0] | 10.0 | 20.0 | 200 | 3 | 5.0 | 410 |" in text
    widths = "embeddings 8/8, encoder 16 per direction, decoder 16"
    assert f"{widths}; vocabulary sentencepiece bpe 40 a side; 12,345 parameters" in text
    assert "| 12.50 (3) |" in text and "median over 3 repeats" in text
    assert serve_load.ONE_REQUEST_AT_A_TIME not in text  # no OpenNMT-py server among the systems
    unknown = serve_load.opennmt_model(Path("/nonexistent"), Path("m.pt"))
    assert (
        serve_load._model(unknown)
        == "unknown (no OpenNMT-py install at /nonexistent/venvs/opennmt/bin/python)"
    )


@pytest.mark.e2e
@pytest.mark.slow(seconds=20)
def test_each_served_answer_is_scored_against_its_own_reference(tiny_run_dir: Path, tmp_path: Path) -> None:
    """The BLEU sentences' answers come back in order, each the model's own translation under the peer's
    search rule, and are scored."""
    import seq2seq_attn as s2s

    sources = (tiny_run_dir.parent / "data" / "test.src").read_text().splitlines()[:12]
    rule = serve_load.ours_search(
        serve_load.parse_args(["--ours", "r", "--sentences", "s", "--alpha", "1.5"])
    )
    own = s2s.load(tiny_run_dir, device="cpu", beam_size=2, **rule).translate(sources)
    assert all(own), own
    (tmp_path / "src").write_text("".join(f"{line}\n" for line in sources))
    (tmp_path / "ref").write_text("".join(f"{line}\n" for line in own))
    doc = tmp_path / "load.md"
    argv = [
        "--ours",
        str(tiny_run_dir),
        "--sentences",
        str(tmp_path / "src"),
        "--references",
        str(tmp_path / "ref"),
    ]
    argv += ["--beam", "2", "--alpha", "1.5", "--clients", "1,2", "--requests", "4", "--repeats", "2"]
    serve_load.main(
        [*argv, "--warmup", "1", "--threads", "1", "--out", str(tmp_path / "out"), "--doc", str(doc)]
    )
    result = json.loads(doc.with_suffix(".json").read_text())
    assert result["settings"] | {"beam": 2, "alpha": 1.5, "stopping": "top"} == result["settings"]
    assert serve_load.SAME_SEARCH.format(beam=2, alpha=1.5) in doc.read_text()
    (system,) = result["systems"]
    assert system["bleu"]["answers"] == own and system["bleu"]["sentences"] == len(sources)
    assert system["bleu"]["bleu"] == round(bleu_metric(own).corpus_score(own, None).score, 2)
    assert len(system["repeats"]) == 2 and [level["clients"] for level in system["levels"]] == [1, 2]
    assert all(level["errors"] == 0 and level["requests_per_s"] > 0 for level in system["levels"])
    assert system["model"]["parameters"] == s2s.load(tiny_run_dir, device="cpu").parameters


@pytest.mark.e2e
@pytest.mark.slow(seconds=15)
def test_interleave_sends_one_sentence_at_a_time_to_each_server_and_reports_each_starts_median(
    tiny_run_dir: Path, tmp_path: Path
) -> None:
    sources = (tiny_run_dir.parent / "data" / "test.src").read_text().splitlines()[:6]
    (tmp_path / "src").write_text("".join(f"{line}\n" for line in sources))
    argv = ["--ours", str(tiny_run_dir), "--sentences", str(tmp_path / "src"), "--interleave", "4"]
    with pytest.raises(SystemExit) as few:  # nothing would be counted after the warm-up
        serve_load.parse_args([*argv, "--warmup", "4"])
    assert few.value.code == 2
    argv += ["--warmup", "1", "--beam", "2"]
    assert serve_load.parse_args(argv).doc.name == "serve_interleaved.md"
    doc = tmp_path / "interleaved.md"
    argv += ["--repeats", "2", "--threads", "1", "--out", str(tmp_path / "out")]
    serve_load.main([*argv, "--doc", str(doc)])
    interleaved = json.loads(doc.with_suffix(".json").read_text())["interleaved"]
    assert (interleaved["sentences"], interleaved["counted"]) == (4, 3)
    ((label, medians),) = interleaved["p50_ms"].items()
    assert label == "seq2seq-attn fp32" and len(medians) == 2 and all(value > 0 for value in medians)
    text = doc.read_text()
    assert text.startswith("# One request at a time") and f"| {label} | " in text
    assert serve_load.SAME_SEARCH.format(beam=2, alpha=0.6) in text


def test_the_mixed_loads_heavy_request_is_the_largest_the_default_limits_accept() -> None:
    limits = Limits()
    heavy = serve_load.heavy_request(["The cat sat on the mat.", "Where is the station?"])
    check_sentences(limits, heavy)
    check_work(limits, heavy)  # accepted, at n-best 1
    assert len(heavy) * limits.max_chars == limits.max_request_chars
    assert {len(sentence) for sentence in heavy} == {limits.max_chars}
    with pytest.raises(Refusal):  # and one character more is not
        check_work(limits, [*heavy[:-1], heavy[-1] + "x"])


def test_a_report_names_its_commit_and_warns_of_changes_before_or_during_the_run(tmp_path: Path) -> None:
    git = lambda *args: subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    clean = machine.provenance(tmp_path)
    assert clean is not None and len(clean["commit"]) == 40 and not clean["dirty"]

    def warnings_after(change) -> list[str]:
        described = {"provenance": machine.provenance(tmp_path)}
        change()
        return machine.provenance_warnings(described, tmp_path)

    assert warnings_after(lambda: None) == []
    assert warnings_after(lambda: (tmp_path / "a.py").write_text("x = 2\n")) == [
        "files of the checkout changed while it ran"
    ]
    assert warnings_after(lambda: None)[0].startswith("started on a checkout with uncommitted changes")
    commit = lambda: git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "two")  # noqa: E731
    assert any(w.startswith("the commit changed while it ran") for w in warnings_after(commit))
    assert machine.provenance(tmp_path / "nowhere") is None


def test_cpu_model_and_flags_come_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum\n"
        "flags\t\t: fpu sse4_2 avx2 fma avx512f avx512_bf16 amx_tile avx_vnni f16c\n"
        "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum\nflags\t\t: fpu\n",
        encoding="utf-8",
    )
    found = provenance.cpu(cpuinfo)
    assert (found.name, found.speed_flags) == (
        "Intel(R) Xeon(R) Platinum",
        ["amx_tile", "avx2", "avx512_bf16", "avx512f", "avx_vnni", "f16c", "fma"],
    )
    described = machine.describe("cpu", threads=0)
    assert described["torch"] == torch.__version__ and described["torch_threads"] == torch.get_num_threads()
    assert described["load_before"] >= 0 and described["cpu_capability"]


def test_load_warnings_before_and_during_a_run(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  300 100 200 5000 400 50 50 0 0 0\ncpu0 1 2 3\n", encoding="utf-8")
    assert machine.busy_cpu_seconds(stat) == pytest.approx(700 / os.sysconf("SC_CLK_TCK"))
    assert machine.load_warning(0.2) is None
    assert "load average was 1.70 before the run" in machine.load_warning(1.7)
    assert machine.span_warning("training", None) is None and machine.span_warning("training", 0.3) is None
    assert machine.span_warning("training", 0.9) == "other processes kept 0.90 cores busy during training"


@pytest.mark.slow
def test_run_job_counts_the_cores_other_processes_keep_busy(tmp_path):
    """A competitor spinning on one core while the measured job runs is another process's load."""
    spin = "import time\nend = time.perf_counter() + {}\nwhile time.perf_counter() < end: pass\n"
    competitor = subprocess.Popen([sys.executable, "-c", spin.format(4)])
    try:
        time.sleep(0.3)
        measured = run_job(Job([sys.executable, "-c", spin.format(1.5)], tmp_path / "job.log"))
    finally:
        competitor.kill()
        competitor.wait()
    assert measured.others_cores is not None and measured.others_cores > 0.6
    assert measured.peak_load is not None and measured.peak_load >= 0


def test_markdown_and_json_keep_one_section_per_device_and_corpus(tmp_path):
    doc = tmp_path / "results" / "side_by_side.md"
    doc.parent.mkdir()
    report.save(report.summarise(_result("cuda")), doc, tmp_path)
    report.save(report.summarise(_result("cpu", "en-fr")), doc, tmp_path)
    json_path = report.save(report.summarise(_result("cpu")), doc, tmp_path)  # replaces nothing: a new key
    report.save(report.summarise(_result("cpu")), doc, tmp_path)  # the same device and corpus: replaced
    assert json_path == doc.with_suffix(".json")
    saved = json.loads(json_path.read_text(encoding="utf-8"))
    assert sorted(saved) == ["cpu en-fr", "cpu synthetic", "cuda synthetic"]
    assert saved["cpu synthetic"]["ratios"]["joeynmt"]["train_tokens_per_s"] == pytest.approx(9000 / 1600)

    text = doc.read_text(encoding="utf-8")
    titles = ["## CPU: AMD EPYC, 2 cores; corpus en-fr", "## CPU: AMD EPYC, 2 cores; corpus synthetic"]
    titles.append("## GPU: NVIDIA H200; corpus synthetic")
    assert [text.index(title) for title in titles] == sorted(text.index(title) for title in titles)
    header = "|  | ours | JoeyNMT 2.3.0 | OpenNMT-py 3.5.1 | ours / JoeyNMT 2.3.0 | ours / OpenNMT-py 3.5.1 |"
    assert text.count(header) == 3
    # medians, [min, max] where several repetitions gave the figure
    assert (
        "| training: target tokens/s (steady state) | 9,000 [8,000, 10,000] | 1,600 [1,500, 1,700] | – "
        "| 5.62× | – |" in text
    )
    assert "| beam search: sentences/s | 100.0 [90.0, 120.0] | 60.0 | – | 1.67× | – |" in text
    assert "| beam-search sentences/s vs the faster peer | 1.67× | 2× | **no** |" in text
    assert "| beam-search sentences/s vs the faster peer | 1.67× | 3× | **no** |" in text  # the GPU section
    assert "peak GPU memory" not in text  # no run measured it: no row
    assert "- OpenNMT-py 3.5.1 skipped: could not install" in text
    assert "- JoeyNMT 2.3.0, repetition 2: beam decoding failed (exit 1), see x.log" in text
    assert "| data prepare (s) | 3.0 |" in text
    assert "    python -m benchmarks.bench --reps 3" in text


# ----------------------------------------------------------------------------------------------------------
# processes


@pytest.mark.slow
def test_run_job_measures_the_child_and_feeds_it_files(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(
        "import sys\nblock = b'x' * (64 * 2**20)\nsys.stdout.write(sys.stdin.read().upper() + sys.argv[1])\n",
        encoding="utf-8",
    )
    (tmp_path / "in.txt").write_text("hello ", encoding="utf-8")
    job = Job(
        launched(sys.executable, [str(script), "world"]),
        tmp_path / "child.log",
        stdin=tmp_path / "in.txt",
        stdout=tmp_path / "out.txt",
    )
    harness = b"h" * (512 * 2**20)  # the harness's own memory, which the child holds at the fork
    measured = run_job(job)
    del harness
    assert measured.returncode == 0 and not measured.interrupted
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == "HELLO world"
    assert 64 <= measured.peak_rss_mb < 256  # the child's 64 MiB and Python, not the harness's
    assert measured.cuda_peak_mb is None  # written by the launcher: torch never used CUDA
    assert measured.text().startswith("+ ")


@pytest.mark.slow
def test_run_job_interrupts_at_the_budget_even_when_started_with_sigint_ignored(tmp_path):
    """A benchmark started in the background (`nohup make bench &`) hands SIGINT ignored to its children;
    launch.py, through which every toolkit runs, restores KeyboardInterrupt so the budget still stops it."""
    child = tmp_path / "child.py"
    child.write_text("import time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    print('saved')\n")
    argv = launched(sys.executable, [str(child)])
    job = Job(argv, tmp_path / "train.log", interrupt_after=2.0)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a background shell gives its jobs
    try:
        measured = run_job(job)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert measured.interrupted and measured.returncode == 0
    assert measured.seconds < 30
    assert "saved" in measured.text()
    assert measured.deadline is not None and measured.deadline < time.time()


@pytest.mark.slow
def test_a_process_that_ignores_the_interrupt_is_terminated(tmp_path):
    code = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)\n"
    # 3 s: time for the child to start and ignore SIGINT even on a loaded machine
    job = Job([sys.executable, "-c", code], tmp_path / "train.log", interrupt_after=3.0, settle=0.5)
    started = time.time()
    measured = run_job(job)
    assert measured.interrupted and measured.returncode == -signal.SIGTERM
    assert measured.seconds < 30
    assert started + 2.9 < measured.deadline < started + 8


def test_a_launched_process_ended_by_sigterm_still_records_its_peak_memory(tmp_path):
    """The launcher turns SIGTERM into SystemExit: its record is written at the exit the budget forces
    on a toolkit that trains through SIGINT."""
    script = tmp_path / "stubborn.py"
    script.write_text(
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)\n",
        encoding="utf-8",
    )
    job = Job(
        launched(sys.executable, [str(script)]), tmp_path / "train.log", interrupt_after=3.0, settle=0.5
    )
    measured = run_job(job)
    assert measured.interrupted and measured.returncode == 128 + signal.SIGTERM
    assert measured.peak_rss_mb is not None and measured.peak_rss_mb > 1


def test_opennmt_updates_and_checkpoints_after_the_budget_do_not_count(tmp_path):
    budget_end = datetime.datetime(2026, 11, 21, 10, 0, 10).timestamp()  # between the two Step lines
    assert logs.train_points(logs.OPENNMT, OPENNMT_LOG, until=budget_end) == [(25, 5432.0)]
    assert logs.train_points(logs.OPENNMT, OPENNMT_LOG, until=None) == [(25, 5432.0), (50, 5500.5)]
    folder = tmp_path / "run"
    (folder / "model").mkdir(parents=True)
    for step, written in ((25, budget_end - 5), (50, budget_end + 5)):
        path = folder / "model" / f"model_step_{step}.pt"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("data", "weights")
        os.utime(path, (written, written))
    peer = OpenNMT(tmp_path / "cache", tmp_path / "peer", None, SETTINGS, "2.13.0")
    measured = Measured(0, 12.0, 100.0, None, True, tmp_path / "train.log", deadline=budget_end)
    peer.discard_late(folder, measured)
    assert peer.checkpoint(folder) == folder / "model" / "model_step_25.pt"
    assert peer.trained_steps(folder) == 25  # where its training stopped, as far as the decoded model goes
    assert not (folder / "model" / "model_step_50.pt").exists()


def test_updates_in_the_budget_are_those_of_the_decoded_checkpoint(tmp_path):
    folder = tmp_path / "run"
    (folder / "model" / "checkpoints").mkdir(parents=True)
    ours = Ours(ROOT / "configs/small_rnnsearch.yaml", [], SETTINGS, tmp_path / "data")
    assert ours.trained_steps(folder) is None
    payload = {"model": {"w": torch.zeros(1)}, "config": {}, "step": 137}
    torch.save(payload, folder / "model" / "checkpoints" / "latest.pt")
    assert ours.trained_steps(folder) == 137  # logged every 25 updates, stopped at 137 by the budget

    joeynmt = JoeyNMT(tmp_path / "cache", tmp_path / "peer-data", None, SETTINGS, "2.13.0")
    (folder / "model" / "150.ckpt").write_bytes(b"weights")
    (folder / "model" / "latest.ckpt").symlink_to("150.ckpt")  # what JoeyNMT writes on the interrupt
    assert joeynmt.trained_steps(folder) == 150


def _peer_dir(tmp_path: Path) -> Path:
    peer_dir = tmp_path / "peer-data"
    peer_dir.mkdir(exist_ok=True)
    (peer_dir / "test.src").write_text("a b c\nd e f g h\n", encoding="utf-8")
    return peer_dir


# ----------------------------------------------------------------------------------------------------------
# the peers' inputs


SETTINGS = Settings(
    device="cpu",
    batch=64,
    beam=5,
    max_len=100,
    output_ratio=1.5,
    alpha=0.6,
    log_every=25,
    max_steps=0,
    budget_s=60,
    attention="bahdanau",
)


def test_fill_replaces_every_placeholder_or_names_the_missing(tmp_path):
    template = tmp_path / "t.yaml"
    template.write_text("a: @A@\nb: [@B@, @A@]\nc: @C_D@\n", encoding="utf-8")
    assert fill(template, {"A": 1, "B": "x", "C_D": True}) == "a: 1\nb: [x, 1]\nc: True\n"
    with pytest.raises(ValueError, match="no value for B, C_D"):
        fill(template, {"A": 1})


@pytest.mark.parametrize("peer", [JoeyNMT, OpenNMT])
def test_peer_configs_are_complete_and_matched(peer, tmp_path):
    toolkit = peer(tmp_path / "cache", tmp_path / "peer-data", None, SETTINGS, "2.13.0")
    folder = tmp_path / "rep1" / peer.key
    if peer is JoeyNMT:
        config = yaml.safe_load(toolkit.config(folder, "beam1", 1).read_text(encoding="utf-8"))
        train, test, model = config["training"], config["testing"], config["model"]
        assert (train["batch_size"], train["logging_freq"], test["beam_size"]) == (64, 25, 1)
        assert (test["max_output_length"], test["beam_alpha"], config["data"]["src"]["max_length"]) == (
            -1,
            0.6,
            100,
        )
        assert train["validation_freq"] % train["logging_freq"] == 0 and train["validation_freq"] > 10**6
        assert config["data"]["train"] == f"{tmp_path / 'peer-data'}/train"
        assert test["load_model"] == f"{folder / 'model'}/latest.ckpt"
        assert model["decoder"]["attention"] == "bahdanau"
        assert (model["encoder"]["hidden_size"], model["decoder"]["embeddings"]["embedding_dim"]) == (
            256,
            128,
        )
        assert config["use_cuda"] is False
    else:
        config = yaml.safe_load(toolkit.config(folder, "train").read_text(encoding="utf-8"))
        assert (config["batch_size"], config["report_every"], config["save_checkpoint_steps"]) == (64, 25, 25)
        assert (config["src_seq_length"], config["tgt_seq_length"]) == (100, 102)  # it counts BOS and EOS
        assert config["data"]["corpus_1"]["path_tgt"] == f"{tmp_path / 'peer-data'}/train.tgt"
        assert config["save_model"] == f"{folder / 'model'}/model"
        assert (config["hidden_size"], config["word_vec_size"], config["gpu_ranks"]) == (256, 128, [])
        assert config["global_attention"] == "mlp"  # additive, as our bahdanau


def test_decoders_bound_outputs_by_the_same_ratio_to_the_source(tmp_path):
    """OpenNMT-py's -max_length_ratio R allows R x source + 5 pieces (its translator adds 5), and its
    absolute -max_length (250 by default) must not cut in first; ours gets a = R, b = 5."""
    peer_dir = _peer_dir(tmp_path)
    folder = tmp_path / "rep1"
    opennmt = OpenNMT(tmp_path / "cache", peer_dir, None, SETTINGS, "2.13.0")
    argv = opennmt.decode_job(folder / "opennmt" / "model" / "model_step_50.pt", 5, tmp_path / "o.txt").argv
    options = dict(zip(argv, argv[1:], strict=False))  # each argument -> the next
    assert float(options["-max_length_ratio"]) == 1.5 and int(options["-max_length"]) > 10**6
    ours = Ours(ROOT / "configs/small_rnnsearch.yaml", [], SETTINGS, tmp_path / "data")
    argv = ours.decode_job(folder / "ours" / "model" / "latest.pt", 5, tmp_path / "h.txt").argv
    options = dict(zip(argv, argv[1:], strict=False))  # each argument -> the next
    assert (float(options["--max-len-a"]), int(options["--max-len-b"])) == (1.5, 5)
    assert options["--batch-sentences"] == "64"  # as the peers' batches

    other = dataclasses.replace(SETTINGS, output_ratio=1.25)
    with pytest.raises(Skip, match="only at 1.5"):
        JoeyNMT(tmp_path / "cache", peer_dir, None, other, "2.13.0").setup(install=False)


def test_decode_steps_hold_every_toolkit_to_the_same_output_length(tmp_path):
    """--decode-steps N: OpenNMT-py forbids EOS up to the Nth piece (-min_length N) and ends there
    (-max_length N, no ratio); ours gets min_len N and a maximum of 0 x source + N; JoeyNMT cannot, and is
    skipped with the reason; the report's header says what the figures then mean."""
    settings = dataclasses.replace(SETTINGS, decode_steps=30)
    folder = tmp_path / "rep1"
    opennmt = OpenNMT(tmp_path / "cache", _peer_dir(tmp_path), None, settings, "2.13.0")
    argv = opennmt.decode_job(folder / "opennmt" / "model" / "model_step_50.pt", 5, tmp_path / "o.txt").argv
    options = dict(zip(argv, argv[1:], strict=False))
    assert (options["-min_length"], options["-max_length"], float(options["-max_length_ratio"])) == (
        "30",
        "30",
        0,
    )
    ours = Ours(ROOT / "configs/small_rnnsearch.yaml", [], settings, tmp_path / "data")
    argv = ours.decode_job(folder / "ours" / "model" / "latest.pt", 5, tmp_path / "h.txt").argv
    options = dict(zip(argv, argv[1:], strict=False))
    assert (options["--min-len"], float(options["--max-len-a"]), options["--max-len-b"]) == ("30", 0, "30")
    with pytest.raises(Skip, match="no minimum output length"):
        JoeyNMT(tmp_path / "cache", tmp_path / "peer-data", None, settings, "2.13.0").setup(install=False)
    result = _result()
    result["settings"]["decode_steps"] = 30
    text = report.markdown({"cpu synthetic": report.summarise(result)})
    assert "every output exactly 30 pieces (`--decode-steps`" in text
    assert "outputs up to" not in text


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["auto", "int8"])
def test_ours_decode_writes_exactly_the_asked_pieces(precision, tiny_run_dir, tmp_path, monkeypatch, capsys):
    """`python -m benchmarks.ours_decode ...` (its main, in this process), in fp32 and int8."""
    source = tmp_path / "test.src"
    source.write_text("the cat sat\non the mat\na dog\n", encoding="utf-8")
    argv = ["ours_decode", "--checkpoint", str(tiny_run_dir)]
    argv += ["--input", str(source), "--output", str(tmp_path / "out.txt"), "--beam", "3"]
    argv += [
        "--batch-sentences",
        "2",
        "--alpha",
        "0.6",
        "--min-len",
        "7",
        "--max-len-a",
        "0",
        "--max-len-b",
        "7",
        "--precision",
        precision,
        "--count-macs",
    ]
    monkeypatch.setattr(sys, "argv", argv)
    ours_decode.main()
    printed = capsys.readouterr().out
    assert logs.ours_decoded_tokens(printed) == 3 * 7
    assert "per output piece over 3 sentences" in printed and logs.multiply_adds(printed) > 0
    assert len((tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()) == 3


def test_our_speed_levers_reach_the_search_and_the_report(tmp_path):
    """--precision and --lexical-shortlist: the table is learnt from the trained run before decoding (not
    timed with it), the decoder is told to use both, and the report says which search ran."""
    args = bench.parse_args(["--precision", "int8", "--lexical-shortlist", "20", "500"])
    assert (args.precision, args.lexical_shortlist) == ("int8", [20, 500])
    folder = tmp_path / "rep1" / "ours"
    (folder / "model" / "checkpoints").mkdir(parents=True)
    (folder / "model" / "checkpoints" / "latest.pt").write_bytes(b"")
    plain = Ours(ROOT / "configs/small_rnnsearch.yaml", [], SETTINGS, tmp_path / "data")
    assert plain.decoding_setup(folder) is None
    checkpoint = plain.checkpoint(folder)
    assert "--lexical-shortlist" not in plain.decode_job(checkpoint, 5, tmp_path / "h.txt").argv
    levers = Levers("int8", (20, 500))
    ours = Ours(ROOT / "configs/small_rnnsearch.yaml", [], SETTINGS, tmp_path / "data", levers)
    setup = ours.decoding_setup(folder).argv
    options = dict(zip(setup, setup[1:], strict=False))
    assert "lexical-shortlist" in setup and setup[setup.index("lexical-shortlist") + 1].endswith("latest.pt")
    assert (options["--top-k"], options["--frequent"]) == ("20", "500")
    argv = ours.decode_job(checkpoint, 5, tmp_path / "h.txt").argv
    assert dict(zip(argv, argv[1:], strict=False))["--precision"] == "int8" and "--lexical-shortlist" in argv
    assert ours_decode.parse_args([*argv[argv.index("--checkpoint") :]]).lexical_shortlist
    assert logs.lexical_coverage("lexical shortlist: x\ndev reference pieces covered: 97.22%\n") == 97.22
    assert logs.lexical_coverage("no table") is None

    result = _result()
    result["settings"] |= {"precision": "int8", "lexical_shortlist": [20, 500], "device": "cpu"}
    result["toolkits"]["ours"]["runs"][0]["lexical_coverage"] = 96.5
    text = report.markdown({"cpu synthetic": report.summarise(result)})
    assert "- our search: int8, lexical shortlist of 20 candidates per source piece and the 500 most" in text
    assert "| lexical shortlist: dev reference pieces covered (%) | 96.50 |" in text
    result["settings"] |= {"precision": "auto", "lexical_shortlist": None}
    assert "- our search: fp32, full output layer" in report.markdown(
        {"cpu synthetic": report.summarise(result)}
    )


@pytest.mark.parametrize(
    ("ours", "opennmt", "joeynmt"), [("concat", "mlp", "bahdanau"), ("general", "general", "luong")]
)
def test_peers_get_our_kind_of_attention(ours, opennmt, joeynmt, tmp_path):
    settings = dataclasses.replace(SETTINGS, attention=ours)
    folder = tmp_path / "rep1"
    peer = OpenNMT(tmp_path / "cache", tmp_path / "peer-data", None, settings, "2.13.0")
    assert (
        yaml.safe_load(peer.config(folder, "train").read_text(encoding="utf-8"))["global_attention"]
        == opennmt
    )
    peer = JoeyNMT(tmp_path / "cache", tmp_path / "peer-data", None, settings, "2.13.0")
    config = yaml.safe_load(peer.config(folder, "beam5", 5).read_text(encoding="utf-8"))
    assert config["model"]["decoder"]["attention"] == joeynmt


def test_opennmt_gets_the_asked_width_and_the_report_says_so(tmp_path):
    """--opennmt-hidden 512 gives OpenNMT-py an encoder of our width (256 per direction)."""
    settings = dataclasses.replace(SETTINGS, opennmt_hidden=512)
    peer = OpenNMT(tmp_path / "cache", tmp_path / "peer-data", None, settings, "2.13.0")
    config = yaml.safe_load(peer.config(tmp_path / "rep1", "train").read_text(encoding="utf-8"))
    assert config["hidden_size"] == 512
    result = report.summarise(_result())
    result["toolkits"]["opennmt"] = {"label": "OpenNMT-py 3.5.1", "runs": []}
    result["settings"]["opennmt_hidden"] = 512
    text = report.markdown({"cpu synthetic": result})
    assert "- OpenNMT-py sizes: hidden_size 512: encoder 256 + 256, decoder 512" in text


def test_joeynmt_without_our_attention_is_skipped(tmp_path):
    settings = dataclasses.replace(SETTINGS, attention="dot")
    with pytest.raises(Skip, match="no 'dot' attention"):
        JoeyNMT(tmp_path / "cache", tmp_path / "peer-data", None, settings, "2.13.0").setup(install=False)


def test_peers_get_our_pieces_and_their_output_detokenises_like_ours(tmp_path):
    config = tiny_config(tmp_path)
    write_corpus(config.data_dir, n=60)
    vocab = build_vocab(config)
    pieces = Pieces(config.data_dir / "vocab")
    export_pieces(config.data_dir, pieces, tmp_path / "peer-data")

    for ours, theirs in (("train", "train"), ("valid", "dev"), ("test", "test")):
        for side in ("src", "tgt"):
            original = (config.data_dir / f"{ours}.{side}").read_text(encoding="utf-8").splitlines()
            exported = (tmp_path / "peer-data" / f"{theirs}.{side}").read_text(encoding="utf-8").splitlines()
            assert len(exported) == len(original) == 60
            ids = (vocab.encode_src if side == "src" else vocab.encode_tgt)(original)
            assert [len(line.split()) for line in exported] == [len(seq) for seq in ids]
    targets = (config.data_dir / "test.tgt").read_text(encoding="utf-8").splitlines()
    generated = (tmp_path / "peer-data" / "test.tgt").read_text(encoding="utf-8").splitlines()
    assert [pieces.decode(line) for line in generated] == [
        vocab.decode_tgt(s) for s in vocab.encode_tgt(targets)
    ]
    assert [pieces.decode(line) for line in generated] == targets  # the words are all in the vocabulary


def test_bad_toolkit_names_are_refused():
    with pytest.raises(SystemExit) as stop:
        bench.parse_args(["--toolkits", "ours,marian"])
    assert stop.value.code == 2
    assert bench.parse_args(["--toolkits", "ours", "--reps", "2"]).reps == 2


def test_corpus_name_replaces_the_local_folder_in_the_command_settings_and_heading(tmp_path):
    """A committed report names its corpus by --corpus-name (the docs' placeholder), not by this machine's
    path; without it the folder's name is the id and the path stays as given."""
    data = tmp_path / "data"
    data.mkdir()
    for split, n in (("train", 3), ("valid", 2), ("test", 1)):
        (data / f"{split}.src").write_text("a\n" * n, encoding="utf-8")
    corpus = tmp_path / "en_fr_1k"
    argv = ["--corpus", str(corpus), "--corpus-name", "EN_FR_1K", "--reps", "1"]
    named = bench.parse_args(argv)

    assert (
        bench._command(named, argv)
        == "python -m benchmarks.bench --corpus EN_FR_1K --corpus-name EN_FR_1K --reps 1"
    )
    assert bench._command(named, [f"--corpus={corpus}"]).endswith(" --corpus=EN_FR_1K")
    folders = ["--out", str(tmp_path / "out"), f"--cache={tmp_path}", "--doc", str(ROOT / "benchmarks/x.md")]
    assert bench._command(named, folders).endswith(" --out OUT --cache=CACHE --doc benchmarks/x.md")
    assert bench._corpus(named, data) == {
        "id": "EN_FR_1K",
        "name": "EN_FR_1K (en-fr)",
        "pairs": {"train": 3, "valid": 2, "test": 1},
    }
    plain = bench.parse_args(argv[:2])
    assert str(corpus) in bench._command(plain, argv[:2])
    assert bench._corpus(plain, data)["id"] == "en_fr_1k"
    assert bench._corpus(plain, data)["name"] == f"{corpus} (en-fr)"
    with pytest.raises(SystemExit) as stop:
        bench.parse_args(["--corpus-name", "EN_FR_1K"])
    assert stop.value.code == 2


def test_a_peer_not_installed_with_no_install_says_how_to_install_it(tmp_path):
    peer = OpenNMT(tmp_path / "cache", tmp_path / "peer-data", None, SETTINGS, "2.13.0")
    with pytest.raises(Skip, match="run without --no-install to pip-install it there"):
        peer.setup(install=False)


# ----------------------------------------------------------------------------------------------------------
# ours, end to end


@pytest.mark.e2e
@pytest.mark.slow(seconds=25)
def test_our_side_end_to_end_on_a_tiny_corpus(tmp_path):
    corpus = tmp_path / "corpus"
    write_corpus(corpus, n=120)
    model = [f"--set=model.{key}={value}" for key, value in TINY_MODEL.items()]
    command = [sys.executable, "-m", "benchmarks.bench", "--toolkits", "ours", "--reps", "1"]
    command += ["--corpus", str(corpus), "--src-lang", "src", "--tgt-lang", "tgt", "--budget", "2"]
    command += ["--max-steps", "6", "--warmup", "2", "--steps", "4", "--log-every", "2", "--threads", "1"]
    command += ["--set=vocab.size=40", "--set=vocab.threads=1", *model]
    command += ["--out", str(tmp_path / "out"), "--doc", str(tmp_path / "report.md")]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]

    result = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))["cpu corpus"]
    assert result["window"] == [2, 6]
    assert "avx2" in result["machine"]["cpu_flags"] or not Path("/proc/cpuinfo").exists()
    (run,) = result["toolkits"]["ours"]["runs"]
    assert "error" not in run, run
    assert run["params"] > 0 and run["train_steps"] == 6 and run["train_tokens_per_s"] > 0
    assert set(run["others_cores"]) == {"training", "beam decoding", "greedy decoding"}
    for name in ("beam", "greedy"):
        assert run[f"{name}_sentences_per_s"] > 0 and run[f"{name}_tokens_per_s"] > 0
        assert 0 <= run[f"bleu_{name}"] <= 100
        assert len((tmp_path / "out" / "rep1" / "ours" / f"test.{name}.hyp").read_text().splitlines()) == 120
    assert run["train_peak_rss_mb"] > 50 and run["decode_peak_rss_mb"] > 50
    (extra,) = result["ours_extra"]
    assert extra["prepare_s"] > 0 and extra["vocab_s"] is not None and extra["noattn_tokens_per_s"] > 0
    assert not (
        tmp_path / "out" / "rep1" / "prep-timing" / "data"
    ).exists()  # scratch data removed, logs kept
    assert (tmp_path / "out" / "rep1" / "prep-timing" / "vocab.log").is_file()
    assert list(result["toolkits"]) == ["ours"]
    text = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "| training: target tokens/s (steady state) |" in text and "|  | ours |" in text


def test_bench_step_updates_with_the_configs_optimiser(monkeypatch):
    """The timed update steps the optimiser training would build (Adadelta here, not a fixed Adam)."""
    built = []

    def recording(params, cfg, capturable):
        optimizer = build_optimizer(params, cfg, capturable)
        built.append(type(optimizer).__name__)
        return optimizer

    monkeypatch.setattr(bench_step, "build_optimizer", recording)
    config = tiny_config(train={"optimizer": "adadelta", "learning_rate": 1.0})
    args = bench_step.parse_args(["x.yaml", "--reps", "1", "--warmup", "0", "--beam", "0"])
    row = bench_step.measure(config, bench_step.Shapes(2, 4, 3, 20), "fp32", False, torch.device("cpu"), args)
    assert built == ["Adadelta"] and row["train_ms"] > 0


@pytest.mark.slow
def test_bench_step_times_every_variant_and_writes_its_report(tmp_path, capsys, monkeypatch):
    """`python -m benchmarks.bench_step ...` (its main, in this process)."""
    monkeypatch.setattr(bench_step, "PEAK_SIZE", 128)  # the peak's products small enough for a test
    config = write_tiny_config(tmp_path / "tiny.yaml")
    out = tmp_path / "step"
    command = [str(config), "--precision", "fp32,bf16"]
    options = [
        "--batch",
        "3",
        "--src-len",
        "5",
        "--tgt-len",
        "4",
        "--vocab",
        "20",
        "--reps",
        "3",
        "--beam",
        "2",
        "--peak",
    ]
    bench_step.main([*command, *options, "--out", str(out)])
    result = json.loads(out.with_suffix(".json").read_text())
    assert [(r["precision"], r["compile"]) for r in result["rows"]] == [("fp32", False), ("bf16", False)]
    for row in result["rows"]:
        assert row["parameters"] > 0 and row["train_ms"] > 0 and row["beam_ms_per_step"] > 0
        tokens_per_s = 3 * 4 / (row["train_ms"] / 1000)
        assert abs(row["train_tokens_per_s"] - tokens_per_s) <= max(0.5, 0.01 * tokens_per_s)  # (rounded)
        assert row["beam_sentences_per_s"] > 0 and row["beam_matmul_gflop_per_s"] > 0
        assert row["beam_macs_per_step"] > 0
        sentences_per_s = 3 / (row["train_ms"] / 1000)
        assert abs(row["train_sentences_per_s"] - sentences_per_s) <= max(0.05, 0.01 * sentences_per_s)
        assert row["train_peak_mib"] is None and row["beam_peak_mib"] is None  # counted on CUDA only
    assert result["machine"]["torch"] == torch.__version__ and result["machine"]["load_before"] >= 0
    assert set(result["machine"]["matmul_peak_gflop_per_s"]) == {"1", "2"}
    assert all(gflops > 0 for gflops in result["machine"]["matmul_peak_gflop_per_s"].values())
    text = out.with_suffix(".md").read_text()
    assert "fp32 matrix-product peak (`torch.mm`, 128 x 128): " in text
    assert text.count("| tiny |") == 2 and "- machine: " in text and "cores busy meanwhile" in text
    assert capsys.readouterr().out == text + "\n"  # the report is printed too
    with pytest.raises(SystemExit) as bad:
        bench_step.main([command[0], "--precision", "fp16"])
    assert bad.value.code == 2 and "--precision" in capsys.readouterr().err


def test_no_committed_reports_command_shows_a_machines_path() -> None:
    """The commands the committed reports show name folders outside the repository by placeholders."""
    reports = [*(ROOT / "benchmarks/results").rglob("*.md"), *(ROOT / "docs/results").rglob("*.md")]
    lines = [line for report in reports for line in report.read_text().splitlines()]
    commands = [line for line in lines if "-m benchmarks." in line]
    assert len(commands) > 10
    for command in commands:
        assert not re.search(r"[ =]/", command), command


def test_the_committed_report_holds_no_absolute_paths_into_the_repository(tmp_path):
    root = tmp_path / "repo"
    result = {"runs": [{"train_log": f"{root}/runs/x/train.log", "other": "/elsewhere/log", "n": 3}]}
    assert report.portable(result, root) == {
        "runs": [{"train_log": "runs/x/train.log", "other": "/elsewhere/log", "n": 3}]
    }
    # an output folder outside the repository is written from its placeholder
    assert report.portable(result, root, Path("/elsewhere"))["runs"][0]["other"] == "OUT/log"


PLACEHOLDERS = {"EN_FR": "DIR", "CONFIG...": "configs/small_rnnsearch.yaml"}  # what the docs leave to fill in


def _documented_commands() -> list[tuple[str, list[str]]]:
    """Every `python -m benchmarks.X ...` in the docs: (module, arguments), continuation lines joined."""
    commands = []
    for doc in ("README.md", "docs/performance.md", "benchmarks/README.md"):
        text = (ROOT / doc).read_text(encoding="utf-8").replace("\\\n", " ")
        for match in re.finditer(r"python -m benchmarks\.(\w+)([^`|\n#]*)", text):
            commands.append((match.group(1), shlex.split(match.group(2))))
    return commands


def test_documented_benchmark_commands_parse_and_their_configs_load():
    """What the docs tell a user to run: valid options, existing configs, overrides the schema accepts."""
    commands = _documented_commands()
    modules = {"bench", "bench_step", "bench_search_ops", "ours_decode", "serve_load"}
    assert {module for module, _ in commands} == modules and len(commands) >= 10
    for module, arguments in commands:
        if arguments == ["--help"] or "..." in arguments:  # (an abbreviation in a table's cell)
            continue
        arguments = [PLACEHOLDERS.get(argument, argument) for argument in arguments]
        configless = {
            "bench_search_ops": bench_search_ops,
            "ours_decode": ours_decode,
            "serve_load": serve_load,
        }
        if module in configless:  # no config to load
            configless[module].parse_args(arguments)
            continue
        if module == "bench":
            args = bench.parse_args(arguments)
            configs = [args.config, args.baseline]
        else:
            args = bench_step.parse_args(arguments)
            configs = args.configs
        for config in configs:
            load_config(ROOT / config, args.overrides)


RESULT_FOLDERS = ("benchmarks/results", "docs/results")
SUPERSEDED = re.compile(r"^> Superseded by \[[^]]+\]\(([^)]+)\)")


def _linked_targets(markdown: list[Path]) -> set[Path]:
    """Every file or folder a relative markdown link in `markdown` points at."""
    targets = set()
    for doc in markdown:
        for match in re.finditer(r"\]\(([^)\s#]+)", doc.read_text(encoding="utf-8")):
            if "://" not in match.group(1):
                targets.add((doc.parent / match.group(1)).resolve())
    return targets


def _reaches(targets: set[Path], path: Path) -> bool:
    """Whether a link in `targets` points at `path` or into it (a folder)."""
    return any(target == path or target.is_relative_to(path) for target in targets)


def test_every_committed_result_is_cited_as_current_or_names_its_successor():
    """A report or results folder is linked from the docs (or from a report, for the outputs behind it),
    or begins with "> Superseded by [its successor](...)", an existing file: none stands unexplained, and
    none is both cited and superseded."""
    docs = [ROOT / "README.md", ROOT / "benchmarks/README.md", *sorted((ROOT / "docs").glob("*.md"))]
    reports = sorted((ROOT / "benchmarks/results").glob("*.md"))
    cited, linked = _linked_targets(docs), _linked_targets(docs + reports)
    results = [path for folder in RESULT_FOLDERS for path in sorted((ROOT / folder).iterdir())]
    for path in (path for path in results if path.suffix in ("", ".md")):
        superseded = SUPERSEDED.match(path.read_text(encoding="utf-8")) if path.is_file() else None
        if superseded:
            assert not _reaches(cited, path), f"{path.relative_to(ROOT)} is superseded but the docs cite it"
            assert (path.parent / superseded.group(1)).is_file(), f"{path.name}: its successor is missing"
        else:
            unexplained = f"{path.relative_to(ROOT)}: linked nowhere, and no '> Superseded by' line"
            assert _reaches(linked, path), unexplained


def test_search_ops_benchmark_times_each_operation_and_its_alternative(tmp_path, capsys):
    out = tmp_path / "ops"
    bench_search_ops.main(
        ["--vocab", "50,70", "--sentences", "3", "--beam", "2,1", "--reps", "2", "--out", str(out)]
    )
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert [(r["vocab"], r["beam"], r["rows"]) for r in rows[::3]] == [
        (50, 2, 6),
        (50, 1, 3),
        (70, 2, 6),
        (70, 1, 3),
    ]
    assert {r["operation"] for r in rows} == {"k best continuations", "normaliser", "input gates W E y + b"}
    assert all(r["a_ms"] > 0 and r["b_ms"] > 0 for r in rows)
    table = out.with_suffix(".md").read_text()
    assert table.count("| top_candidates |") == 4 and table in capsys.readouterr().out


@pytest.mark.parametrize("corpus_name", [None, "EN_FR"])
def test_by_length_scores_every_toolkits_output_against_ours_and_the_report_shows_it(tmp_path, corpus_name):
    """--by-length: each beam output copied next to the report, scored by `seq2seq eval --by-length` with
    ours as the baseline of the paired test; the report gets the eval table and the re-scoring command,
    which names the corpus folder CORPUS or its --corpus-name."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    sources = [" ".join(["word"] * n) + " ." for n in range(1, 41)]
    references = [f"le chat {n} est sur le tapis ." for n in range(1, 41)]
    (corpus / "test.en").write_text("".join(f"{s}\n" for s in sources), encoding="utf-8")
    (corpus / "test.fr").write_text("".join(f"{r}\n" for r in references), encoding="utf-8")
    outputs = {"ours": references, "opennmt": ["le chien est ."] * 40}  # ours perfect, the peer poor
    result: dict = {"toolkits": {}}
    for key, lines in outputs.items():
        text = tmp_path / key / "test.beam.txt"
        text.parent.mkdir()
        text.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        label = "ours" if key == "ours" else "OpenNMT-py 3.5.1"
        result["toolkits"][key] = {"label": label, "runs": [{"rep": 0, "beam_text": str(text)}]}
    named = ["--corpus-name", corpus_name] if corpus_name else []
    args = bench.parse_args(
        ["--corpus", str(corpus), *named, "--reps", "1", "--by-length", "--toolkits", "ours"]
    )
    args.doc, args.out = tmp_path / "results" / "quality.md", tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    scored = bench.score_by_length(result, tmp_path / "data-unused", args, env)

    assert "error" not in scored, scored
    folder = tmp_path / "results" / "quality"
    assert (folder / "ours.test.beam.txt").read_text(encoding="utf-8").splitlines() == references
    assert (folder / "by_length.png").stat().st_size > 1000
    overall = {s["label"]: s["rows"][0] for s in scored["report"]["systems"]}
    assert overall["ours"]["bleu"] == pytest.approx(100.0) and overall["OpenNMT-py 3.5.1"]["bleu"] < 20
    (versus,) = scored["report"]["comparisons"]
    assert versus["baseline"] == "ours" and len(versus["rows"]) == 1 + 7  # overall + 0-10 ... 60+
    filled = [row for row in versus["rows"] if row["count"]]  # 50-60 and 60+ are empty here
    assert len(filled) == 6 and all(row["delta"] < -50 and row["significant"] for row in filled)
    placeholder = corpus_name or "CORPUS"
    assert scored["report"]["references"] == f"{placeholder}/test.fr"
    assert scored["command"].startswith("seq2seq eval --hyp ")
    assert f"--ref {placeholder}/test.fr" in scored["command"]
    assert "--baseline ours" in scored["command"] and str(tmp_path) not in scored["command"].replace(
        str(folder), ""
    )
    lines = report._by_length(scored)
    assert "### Quality after the same budget, by source length" in lines
    assert sum(line.startswith("| OpenNMT-py 3.5.1 |") for line in lines) >= 2  # scores and comparison
    assert "![BLEU by source length](quality/by_length.png)" in lines

    result["toolkits"]["opennmt"]["runs"][0].pop("beam_text")
    assert "no beam-search output" in bench.score_by_length(result, tmp_path, args, env)["error"]
    with pytest.raises(SystemExit):
        bench.parse_args(["--by-length", "--reps", "2"])


# ----------------------------------------------------------------------------------------------------------
# the peers as two OpenNMT-py systems, int8 and arithmetic


def _opennmt_config(peer: OpenNMT, folder: Path, snapshots: bool = False) -> dict:
    return yaml.safe_load(peer.config(folder, "train", snapshots).read_text(encoding="utf-8"))


def test_the_matched_peer_trains_with_our_recipe_and_the_general_one_with_its_defaults(tmp_path):
    config = load_config(ROOT / "configs/small_rnnsearch.yaml")
    recipe = matched_recipe(config.model, config.train)
    assert recipe == Recipe(
        optimizer="adam", learning_rate=1e-3, clip=5.0, normalization="tokens", dropout=0.1
    )
    settings = dataclasses.replace(SETTINGS, recipe=recipe, cell="gru", embed=64, opennmt_hidden=512)
    matched = OpenNMT(tmp_path / "cache", tmp_path / "peer-data", None, settings, "2.13.0")
    general = OpenNMTGeneral(tmp_path / "cache", tmp_path / "peer-data", None, settings, "2.13.0")
    assert general.venv == matched.venv and general.vocab_dir == matched.vocab_dir  # one install
    ours, defaults = _opennmt_config(matched, tmp_path / "m"), _opennmt_config(general, tmp_path / "g")
    # the matched peer takes our cell; the general one keeps its own (LSTM), which its recipe is tuned for
    for config_, attention, cell in ((ours, "mlp", "GRU"), (defaults, "general", "LSTM")):
        assert config_["global_attention"] == attention and config_["input_feed"] == 1
        assert (config_["rnn_type"], config_["word_vec_size"], config_["hidden_size"]) == (cell, 64, 512)
        assert config_["seed"] == 1234  # no seed asked for: the one the benchmark always gave
    assert (ours["optim"], ours["learning_rate"], ours["max_grad_norm"]) == ("adam", 0.001, 5.0)
    assert (ours["normalization"], ours["dropout"]) == ("tokens", [0.1])
    assert (defaults["optim"], defaults["learning_rate"], defaults["normalization"]) == ("sgd", 1.0, "sents")
    assert (defaults["max_grad_norm"], defaults["dropout"]) == (5.0, [0.3])
    assert (
        matched.recipe_text()["recipe"] == "ours, matched"
        and general.recipe_text()["recipe"] == "its defaults"
    )
    assert general.recipe_text()["network"] == "LSTM, encoder 256 per direction, decoder 512, embeddings 64"
    assert matched.recipe_text()["network"] == "GRU, encoder 256 per direction, decoder 512, embeddings 64"

    summed = load_config(ROOT / "configs/small_rnnsearch.yaml", ["train.loss_norm=batch"])
    plain_sum = dataclasses.replace(SETTINGS, recipe=matched_recipe(summed.model, summed.train))
    with pytest.raises(Skip, match="no loss normalisation like our train.loss_norm"):
        OpenNMT(tmp_path / "cache", tmp_path / "peer-data", None, plain_sum, "2.13.0").setup(install=False)


def test_to_a_budget_opennmt_saves_periodically_for_a_curve_only_when_asked(tmp_path):
    """To a budget: every logging interval, the newest two kept, SIGINT at the budget. For a curve: no
    periodic checkpoint, every one asked for kept, its own loader's defaults, checkpoints asked for by the
    hooked training loop at the points."""
    budget = OpenNMT(tmp_path / "cache", tmp_path / "peer-data", None, SETTINGS, "2.13.0")
    config = _opennmt_config(budget, tmp_path / "b")
    assert (config["save_checkpoint_steps"], config["keep_checkpoint"]) == (25, 2)
    assert (config["num_workers"], config["bucket_size"]) == (0, 20000)
    job = budget.train_job(tmp_path / "b")
    assert job.interrupt_after == 60 and job.snapshots is None and SNAPSHOT_HOOK_ENV not in job.env

    curve = dataclasses.replace(SETTINGS, default_loading=True)
    peer = OpenNMT(tmp_path / "cache", tmp_path / "peer-data", None, curve, "2.13.0").seeded(7)
    job = peer.train_job(tmp_path / "c", points=(600.0, 1200.0))
    config = yaml.safe_load((tmp_path / "c" / "opennmt.train.yaml").read_text(encoding="utf-8"))
    assert (config["save_checkpoint_steps"], config["keep_checkpoint"], config["seed"]) == (0, -1, 7)
    assert (config["num_workers"], config["bucket_size"]) == (2, 262144)  # its defaults
    assert job.interrupt_after is None and job.snapshots.at == (600.0, 1200.0)
    assert job.env[SNAPSHOT_HOOK_ENV] == "opennmt" and job.snapshots.log == tmp_path / "c" / "snapshots.jsonl"


def test_ours_for_a_curve_is_seeded_hooked_and_encodes_its_cache_inside_its_clock(tmp_path):
    settings = dataclasses.replace(SETTINGS, default_loading=True)
    cache = tmp_path / "data" / "vocab" / "cache"
    cache.mkdir(parents=True)
    (cache / "train.src.tokens.npy").write_bytes(b"")
    ours = Ours(ROOT / "configs/small_rnnsearch.yaml", ["vocab.size=40"], settings, tmp_path / "data")
    seeded = ours.seeded(2)
    seeded.prepare_training(tmp_path / "run")
    assert not cache.exists()  # encoded again by `seq2seq train`, inside its clock
    job = seeded.train_job(tmp_path / "run", points=(60.0,))
    assert "seed=2" in job.argv and job.env[SNAPSHOT_HOOK_ENV] == "ours" and job.snapshots.at == (60.0,)
    assert ours.settings.seed is None  # the original is untouched
    assert "seed=2" not in ours.train_job(tmp_path / "run").argv
    assert ours.recipe_text()["data loading"] == "its token cache, encoded inside the clock"
    (cache / "x").parent.mkdir(parents=True)
    Ours(ROOT / "configs/small_rnnsearch.yaml", [], SETTINGS, tmp_path / "data").prepare_training(
        tmp_path / "r"
    )
    assert cache.exists()  # side by side, the cache is built before the clock and kept


def test_opennmt_decodes_through_its_own_translate_with_int8_and_counted_arithmetic(tmp_path):
    settings = dataclasses.replace(SETTINGS, int8=True)
    peer = OpenNMT(tmp_path / "cache", _peer_dir(tmp_path), None, settings, "2.13.0")
    argv = peer.decode_job(tmp_path / "model_step_9.pt", 5, tmp_path / "o.hyp").argv
    script = argv.index(str(OPENNMT_TRANSLATE))
    assert argv[script + 1 : script + 3] == ["--int8", "--count-macs"] and "-report_time" in argv
    assert argv[argv.index("-model") + 1] == str(tmp_path / "model_step_9.pt")
    fp32 = OpenNMT(tmp_path / "cache", _peer_dir(tmp_path), None, SETTINGS, "2.13.0")
    assert "--int8" not in fp32.decode_job(tmp_path / "m.pt", 5, tmp_path / "o.hyp").argv
    with pytest.raises(Skip, match="no int8 search"):
        JoeyNMT(tmp_path / "cache", tmp_path / "peer-data", None, settings, "2.13.0").setup(install=False)


@pytest.mark.parametrize(
    "text",
    [
        "Decoding took 1.5000 s for 3 sentences and 21 target tokens\n"
        "Multiply-adds: 123457 per output piece over 2 sentences\n",
        "[2026-11-27 12:39:46,747 INFO] Average translation time (ms): 2.0\n"
        "Multiply-adds: 123457 per output piece over 8 sentences\n"
        "Time w/o python interpreter load/terminate:  3.1\n",
    ],
)
def test_multiply_adds_per_piece_come_from_both_decoders_logs(text):
    assert logs.multiply_adds(text) == 123457.0
    assert logs.multiply_adds("Decoding took 1.5 s for 3 sentences and 21 target tokens") is None


def test_multiply_adds_count_the_matrix_products():
    a, b = torch.ones(3, 4), torch.ones(4, 5)
    product, macs = ours_decode.multiply_adds(lambda: a @ b)
    assert macs == 3 * 4 * 5 and product.shape == (3, 5)


def test_decoding_at_equal_steps_reports_the_arithmetic_and_whether_it_matches():
    result = _result()
    result["settings"]["decode_steps"] = 30
    result["toolkits"]["ours"]["runs"][0] |= {"beam_macs_per_piece": 2.0e6, "beam_gflop_per_s": 3.0}
    result["toolkits"]["ours"]["runs"][1] |= {"beam_macs_per_piece": 2.2e6, "greedy_macs_per_piece": 1.0e6}
    result["toolkits"]["joeynmt"]["runs"][0] |= {"beam_macs_per_piece": 2.0e6, "greedy_macs_per_piece": 2.0e6}
    text = report.markdown({"cpu synthetic": report.summarise(result)})
    assert (
        "| beam search: multiply-adds per output piece | 2,100,000 [2,000,000, 2,200,000] | 2,000,000 | – "
        "| 1.05× | – |" in text
    )
    assert "| beam search: matrix-product GFLOP/s | 3.00 | – | – | – | – |" in text
    assert "- beam, ours / JoeyNMT 2.3.0: 1.05x the multiply-adds per piece: equal arithmetic" in text
    assert (
        "- greedy, ours / JoeyNMT 2.3.0: 0.50x the multiply-adds per piece: **not** equal arithmetic" in text
    )
    assert "compares the searches at equal steps" in text and "equal work" not in text


# ----------------------------------------------------------------------------------------------------------
# checkpoints on request and quality curves


def _snapshots_module():
    """launcher/bench_snapshots.py, imported as launch.py imports it (it runs in any toolkit's python)."""
    spec = importlib.util.spec_from_file_location(
        "bench_snapshots", ROOT / "benchmarks/launcher/bench_snapshots.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cpu_seconds_of_a_process_tree_count_its_descendants_and_their_ended_children(tmp_path):
    """/proc/PID/stat, fields after the name: utime stime cutime cstime at 14-17 (1-based)."""
    snapshots = _snapshots_module()
    tick = os.sysconf("SC_CLK_TCK")

    def stat(pid: int, name: str, ppid: int, utime: int, stime: int, cutime: int, cstime: int) -> None:
        fields = ["S", ppid, *([0] * 9), utime, stime, cutime, cstime, *([0] * 10)]
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) " + " ".join(map(str, fields)) + "\n")

    stat(10, "python -m (train)", 1, 100, 20, 5, 5)  # the training process: a name with spaces and ()
    stat(11, "pt_data_worker", 10, 40, 10, 0, 0)  # its data-loader worker
    stat(12, "x", 11, 7, 3, 0, 0)  # the worker's child
    stat(20, "other", 1, 999, 999, 0, 0)  # another process
    (tmp_path / "self").mkdir()  # not a process id
    assert snapshots.tree_cpu_seconds(10, tmp_path) == pytest.approx((130 + 50 + 10) / tick)
    assert snapshots.tree_cpu_seconds(11, tmp_path) == pytest.approx(60 / tick)
    assert snapshots.tree_cpu_seconds(99, tmp_path) == 0
    assert snapshots.tree_cpu_seconds(os.getpid()) > 0  # the real /proc


def test_a_checkpoint_asked_for_is_written_between_updates_and_recorded(tmp_path, monkeypatch):
    snapshots = _snapshots_module()
    log, started = tmp_path / "snapshots.jsonl", time.time() - 5
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        requests = snapshots.Requests()

        class Loop:
            step = 0

            def after_update(self) -> None:
                self.step += 1

        def save(loop: Loop) -> tuple[int, Path]:
            (tmp_path / f"step_{loop.step}.pt").write_bytes(b"weights")
            return loop.step, tmp_path / f"step_{loop.step}.pt"

        snapshots._before(Loop, "after_update", requests, log, started, save)
        loop = Loop()
        loop.after_update()
        os.kill(os.getpid(), signal.SIGUSR1)  # the harness's request, served at the next call
        loop.after_update()
        loop.after_update()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    (record,) = read_snapshots(log)
    assert record["step"] == 1 and record["checkpoint"] == str(tmp_path / "step_1.pt") and loop.step == 3
    assert 4.5 < record["age_s"] < 60 and record["cpu_s"] > 0
    assert record["save_s"] >= 0 and record["save_cpu_s"] >= 0
    with pytest.raises(SystemExit, match="no hook for 'joeynmt'"):
        monkeypatch.setenv(snapshots.SNAPSHOTS_ENV, str(log))
        monkeypatch.setenv(snapshots.STARTED_ENV, "0")
        snapshots.install("joeynmt")
    signal.signal(signal.SIGUSR1, previous)


CHILD_WITH_CHECKPOINTS = """\
import json, os, signal, sys, time
log, started = os.environ["BENCH_SNAPSHOTS"], float(os.environ["BENCH_STARTED"])
asked = []
signal.signal(signal.SIGINT, signal.default_int_handler)  # as launch.py does: SIGINT may come in ignored
signal.signal(signal.SIGUSR1, lambda *_: asked.append(time.time() - started))
try:
    while True:
        time.sleep(0.05)
        if asked:
            age = asked.pop()
            with open(log, "a") as handle:
                handle.write(json.dumps({"step": 1, "checkpoint": "c", "age_s": age, "cpu_s": 0.1,
                                         "save_s": 0.5, "save_cpu_s": 0.25}) + "\\n")
except KeyboardInterrupt:
    print("stopped")
"""


@pytest.mark.slow(seconds=5)
def test_run_job_asks_for_checkpoints_at_the_points_each_pushed_back_by_the_writes_before(tmp_path):
    """Points at 1 and 2 s of training; the first write takes 0.5 s, so the second request comes at 2.5 s
    of wall clock; after the last checkpoint the process is interrupted."""
    script = tmp_path / "child.py"
    script.write_text(CHILD_WITH_CHECKPOINTS, encoding="utf-8")
    snapshots = Snapshots((1.0, 2.0), tmp_path / "snapshots.jsonl")
    started = time.time()
    measured = run_job(Job([sys.executable, str(script)], tmp_path / "train.log", snapshots=snapshots))
    first, second = read_snapshots(snapshots.log)
    assert 1.0 <= first["age_s"] < 1.8 and 2.5 <= second["age_s"] < 3.3
    assert measured.interrupted and measured.returncode == 0 and "stopped" in measured.text()
    assert started + 2.5 < measured.deadline < started + 10
    points = curves.points([first, second], [1 / 60, 2 / 60])
    assert [p["wall_s"] for p in points] == pytest.approx([first["age_s"], second["age_s"] - 0.5])
    assert [p["cpu_s"] for p in points] == pytest.approx([0.1, -0.15])


def test_curve_points_leave_every_earlier_write_out_of_both_clocks_and_late_ones_warn():
    records = [
        {
            "step": 900,
            "checkpoint": "a.pt",
            "age_s": 601.0,
            "cpu_s": 1180.0,
            "save_s": 2.0,
            "save_cpu_s": 1.5,
        },
        {
            "step": 1800,
            "checkpoint": "b.pt",
            "age_s": 1203.0,
            "cpu_s": 2370.0,
            "save_s": 3.0,
            "save_cpu_s": 2.5,
        },
        {
            "step": 2700,
            "checkpoint": "c.pt",
            "age_s": 1906.0,
            "cpu_s": 3560.0,
            "save_s": 2.0,
            "save_cpu_s": 2.0,
        },
    ]
    points = curves.points(records, [10, 20, 30])
    assert [(p["minutes"], p["updates"], p["checkpoint"]) for p in points] == [
        (10, 900, "a.pt"),
        (20, 1800, "b.pt"),
        (30, 2700, "c.pt"),
    ]
    assert [p["wall_s"] for p in points] == [601.0, 1201.0, 1901.0]
    assert [p["cpu_s"] for p in points] == [1180.0, 2368.5, 3556.0]
    assert curves.points(records[:1], [10, 20]) == points[:1]  # training ended early: the points it made
    assert curves.late_warning("x", points[0]) is None
    assert curves.late_warning("x", points[2]) == "x: the checkpoint of 30 min came at 1901 s of training"


def _eval_report(bleus: dict[str, tuple[float, float]]) -> dict:
    """A `seq2seq eval --by-length` report's systems: per label, BLEU overall and in bucket 0-10."""
    return {
        "systems": [
            {
                "label": label,
                "rows": [
                    {"subset": "all", "bucket": "all", "bleu": overall},
                    {"subset": "all", "bucket": "0-10", "bleu": short},
                    {"subset": "all", "bucket": "10+", "bleu": None},
                    {"subset": "no UNK", "bucket": "all", "bleu": 99.0},
                ],
            }
            for label, (overall, short) in bleus.items()
        ]
    }


def _curve_result() -> dict:
    """Two systems x two seeds x three points, as bench --curves leaves them before curves.summarise."""
    result = _result()
    result["command"] = "python -m benchmarks.bench --curves 10,20,30 --seeds 1,2"
    result["settings"] |= {"curves": [10, 20, 30], "seeds": [1, 2]}
    result["warnings"] = []

    def run(seed: int, rate: float, bleu: float) -> dict:
        report_ = _eval_report({f"{m} min": (bleu * m / 10, bleu * m / 12) for m in (10, 20, 30)})
        points = [
            {"minutes": m, "updates": int(rate * m), "wall_s": 60.0 * m, "cpu_s": 110.0 * m}
            | curves.bleu_of(report_, f"{m} min")
            for m in (10, 20, 30)
        ]
        return {"seed": seed, "points": points, "others_cores": {}}

    recipe = {"recipe": "its config", "optimiser": "adam, rate 0.001"}
    result["toolkits"] = {
        "ours": {"label": "ours", "recipe": recipe, "runs": [run(1, 100, 10.0), run(2, 120, 12.0)]},
        "opennmt": {
            "label": "OpenNMT-py 3.5.1",
            "recipe": {"recipe": "ours, matched", "optimiser": "adam, rate 0.001"},
            "runs": [run(1, 50, 6.0), {"seed": 2, "points": [], "error": "0 of 3 checkpoints written"}],
        },
        "opennmt-general": {"label": "OpenNMT-py 3.5.1 (general, its defaults)", "skipped": "x", "runs": []},
    }
    return result


def test_eval_reports_give_each_point_its_bleu_overall_and_by_bucket():
    report_ = _eval_report({"10 min": (12.5, 14.0), "20 min": (20.0, 21.0)})
    assert curves.bleu_of(report_, "20 min") == {"bleu": 20.0, "buckets": {"0-10": 21.0, "10+": None}}


def test_curves_report_medians_and_ranges_per_point_and_draw_one_plot(tmp_path):
    result = curves.summarise(_curve_result())
    first = result["toolkits"]["ours"]["summary"][0]
    assert first["minutes"] == 10 and first["updates"] == {"median": 1100.0, "min": 1000, "max": 1200, "n": 2}
    assert first["bleu"] == {"median": 11.0, "min": 10.0, "max": 12.0, "n": 2}
    assert first["buckets"]["10+"] is None and first["buckets"]["0-10"]["median"] == pytest.approx(
        11 * 10 / 12
    )
    assert result["toolkits"]["opennmt"]["summary"][2]["bleu"]["n"] == 1  # the seed that wrote no checkpoint

    doc = tmp_path / "results" / "quality_curves.md"
    doc.parent.mkdir()
    json_path = curves.save(result, doc, tmp_path)
    assert json.loads(json_path.read_text(encoding="utf-8"))["settings"]["seeds"] == [1, 2]
    assert doc.with_suffix(".png").stat().st_size > 10_000
    text = doc.read_text(encoding="utf-8")
    assert (
        "| ours | 10 | 1,100 [1,000, 1,200] | 600 [600, 600] | 1,100 [1,100, 1,100] | 11.00 [10.00, 12.00] |"
        in text
    )
    assert "| OpenNMT-py 3.5.1 | 30 | 1,500 | 1,800 | 3,300 | 18.00 |" in text
    assert "| system | point (min) | 0-10 | 10+ |" in text and "| ours | 30 | 27.50 | – |" in text
    assert "| optimiser | adam, rate 0.001 | adam, rate 0.001 |" in text
    assert "| recipe | its config | ours, matched |" in text
    assert "- OpenNMT-py 3.5.1, seed 2: 0 of 3 checkpoints written" in text
    assert "- OpenNMT-py 3.5.1 (general, its defaults) skipped: x" in text
    assert "![BLEU against training CPU-hours and wall clock](quality_curves.png)" in text
    assert "    python -m benchmarks.bench --curves 10,20,30 --seeds 1,2" in text


def _split_by_seed(result: dict, seeds: list[int], cpu: str) -> dict:
    """`result` as a sitting that ran only `seeds` on a machine with `cpu` would have left it."""
    part = json.loads(json.dumps(result))
    part["settings"]["seeds"] = seeds
    part["machine"] |= {"cpu": cpu, "cpu_capability": "AVX2", "date": f"2026-11-2{seeds[0]}"}
    part["command"] = f"python -m benchmarks.bench --curves 10,20,30 --seeds {seeds[0]}"
    for toolkit in part["toolkits"].values():
        toolkit["runs"] = [run for run in toolkit["runs"] if run["seed"] in seeds]
    return part


def test_seeds_of_two_sittings_make_one_curve_with_both_machines_named(tmp_path):
    whole = curves.summarise(_curve_result())
    first, second = (_split_by_seed(_curve_result(), [seed], f"CPU {seed}") for seed in (1, 2))
    doc = tmp_path / "quality_curves.md"
    curves.save(curves.summarise(first), doc, tmp_path)

    merged = curves.summarise(curves.add_seeds(second, curves.earlier(doc.with_suffix(".json"), second)))
    assert merged["settings"]["seeds"] == [1, 2]
    assert merged["toolkits"]["ours"]["summary"] == whole["toolkits"]["ours"]["summary"]
    assert [s["seeds"] for s in merged["sessions"]] == [[1], [2]]
    assert "different machines" in merged["warnings"][-1]
    curves.save(merged, doc, tmp_path)
    text = doc.read_text(encoding="utf-8")
    assert "- seed 1: CPU 1, 2 cores" in text
    assert "`python -m benchmarks.bench --curves 10,20,30 --seeds 2`" in text
    assert "| ours | 10 | 1,100 [1,000, 1,200] |" in text

    third = _split_by_seed(_curve_result(), [1], "CPU 1")  # a seed already there
    with pytest.raises(ValueError, match="seed 1 already measured"):
        curves.earlier(doc.with_suffix(".json"), third)
    third["settings"] |= {"seeds": [3], "beam": 12}
    with pytest.raises(ValueError, match="settings differ: beam 5 there, 12 now"):
        curves.earlier(doc.with_suffix(".json"), third)
    third["settings"]["beam"] = 5
    third["toolkits"]["ours"]["recipe"] = {"recipe": "another"}
    with pytest.raises(ValueError, match="ours: its recipe differs"):
        curves.earlier(doc.with_suffix(".json"), third)
    with pytest.raises(ValueError, match="no earlier result"):
        curves.earlier(tmp_path / "none.json", third)


def test_curves_arguments_are_checked(capsys):
    matched = ["--curves", "10,20,30", "--set", "model.hidden_size=128"]
    args = bench.parse_args(matched)
    assert (args.curves, args.seeds, args.toolkits) == (
        [10.0, 20.0, 30.0],
        [1, 2],
        "ours,opennmt,opennmt-general",
    )
    assert args.doc == bench.CURVE_RESULTS and bench.parse_args([]).doc == bench.RESULTS
    assert bench.parse_args([]).toolkits == "ours,joeynmt,opennmt" and bench.parse_args([]).reps == 3
    assert bench.parse_args(["--curves", "5", "--opennmt-hidden", "512"]).seeds == [1, 2]
    assert bench.parse_args(["--curves", "5", "--toolkits", "ours", "--seeds", "3"]).seeds == [3]
    refused = {
        "encoder widths differ: ours 256 per direction, OpenNMT-py 128": ["--curves", "10"],
        "increasing positive minutes": [*matched[:1], "20,10", *matched[2:]],
        "each seed once": [*matched, "--seeds", "1,1"],
        "not with --reps, --by-length": [*matched, "--reps", "2", "--by-length"],
        "not with --budget": [*matched, "--budget", "30"],
        "JoeyNMT cannot be asked for a checkpoint": [*matched, "--toolkits", "ours,joeynmt"],
        "--seeds, --add-seeds: only with --curves": ["--seeds", "1,2"],
        "expected comma-separated numbers": ["--curves", "ten"],
    }
    for message, argv in refused.items():
        with pytest.raises(SystemExit) as stop:
            bench.parse_args(argv)
        assert stop.value.code == 2 and message in capsys.readouterr().err, message


@pytest.mark.e2e
@pytest.mark.slow(seconds=40)
def test_our_curve_end_to_end_on_a_tiny_corpus(tmp_path):
    """`bench --curves`, ours alone: hooked training writes a checkpoint at each point (its token cache
    encoded inside its clock), each is decoded and scored by length, and the report, JSON and plot appear."""
    corpus = tmp_path / "corpus"
    write_corpus(corpus, n=60)
    model = [f"--set=model.{key}={value}" for key, value in TINY_MODEL.items()]
    command = [sys.executable, "-m", "benchmarks.bench", "--toolkits", "ours", "--curves", "0.1,0.2"]
    command += ["--seeds", "3", "--corpus", str(corpus), "--src-lang", "src", "--tgt-lang", "tgt"]
    command += ["--threads", "1", "--set=vocab.size=40", "--set=vocab.threads=1", *model]
    command += ["--out", str(tmp_path / "out"), "--doc", str(tmp_path / "curves.md")]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]

    result = json.loads((tmp_path / "curves.json").read_text(encoding="utf-8"))
    (run,) = result["toolkits"]["ours"]["runs"]
    assert run["seed"] == 3 and "error" not in run, run
    first, second = run["points"]
    assert (first["minutes"], second["minutes"]) == (0.1, 0.2) and 0 < first["updates"] < second["updates"]
    assert 6 <= first["wall_s"] < second["wall_s"] and 0 < first["cpu_s"] < second["cpu_s"]
    for point in run["points"]:
        assert Path(point["checkpoint"]).parent.name == "snapshots" and 0 <= point["bleu"] <= 100
        assert "0-10" in point["buckets"]
    config = yaml.safe_load((tmp_path / "out/seed3/ours/model/config.yaml").read_text(encoding="utf-8"))
    assert config["seed"] == 3
    assert "encoding" in (tmp_path / "out/seed3/ours/train.log").read_text(encoding="utf-8")
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    assert "| ours | 0.2 |" in (tmp_path / "curves.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_the_mixed_loads_rate_is_the_short_clients_own():
    """A heavy request still running when the short clients are done is not in their requests/s: the
    level's seconds end with the last short answer."""
    import asyncio
    import threading

    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def translate(request):
        entries = await request.json()
        await asyncio.sleep(2.0 if len(entries) > 1 else 0.01)  # the heavy request: 2 s
        return JSONResponse([[{"tgt": "x", "src": entry["src"]}] for entry in entries])

    app = Starlette(routes=[Route(serve_load.ROUTE, translate, methods=["POST"])])
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        level = asyncio.run(
            serve_load.load(f"http://127.0.0.1:{port}", ["a b"], 2, 20, 60.0, heavy=["c d", "e f"])
        )
    finally:
        server.should_exit = True
        thread.join(10)
    assert level["answered"] >= 20 and level["heavy"]["answered"] >= 1
    assert level["seconds"] < 1.5  # 20 answers of 10 ms by 2 clients, not the heavy request's 2 s
