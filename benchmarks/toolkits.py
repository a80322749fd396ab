"""Ours, JoeyNMT 2.3.0 and OpenNMT-py 3.5.1 behind one interface: set up, train, decode, read the output.

Same data for all: our prepared `<data>/{train,valid,test}.{src,tgt}` are cut into our sentencepiece pieces
once, and the peers get those pieces as whitespace-separated words (`<peer data>/{train,dev,test}.{src,tgt}`),
so all three learn and generate exactly the same tokens. The peers' output (pieces) is turned back into text
with our target sentencepiece model before BLEU, which is then computed by sacrebleu on detokenised text
against the same references for all three.

Each peer lives in its own virtual environment under the cache folder, installed once from PyPI with the
same torch version as ours (the recipes and pitfalls are in benchmarks/README.md); a peer that cannot be
installed is skipped with the reason. OpenNMT-py runs as two systems from that one install: `opennmt`,
matched to our model and training recipe (`Recipe`, from our config), and `opennmt-general`, its default
model (LSTM cells, `general` attention with input feeding) and its own default recipe, at our widths.

Training runs either to the wall-clock budget, or (`bench --curves`) with a checkpoint asked for at each
fixed point of training time (launcher/bench_snapshots.py hooks ours and OpenNMT-py; JoeyNMT has no hook).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

import seq2seq_attn
from seq2seq_attn.config import ModelConfig, TrainConfig, load_config
from seq2seq_attn.config.constants import TOKENIZED_SPLIT
from seq2seq_attn.io import read_lines, write_text
from seq2seq_attn.runs.checkpoint import load_checkpoint
from seq2seq_attn.vocab.pieces import Vocab

from . import logs
from .measure import SNAPSHOT_HOOK_ENV, Job, Measured, Snapshots, launched, package_version, run_job

HERE = Path(__file__).parent
TEMPLATES = HERE / "peers"
OURS_DECODE = HERE / "ours_decode.py"
OPENNMT_TRANSLATE = HERE / "launcher" / "opennmt_translate.py"  # onmt_translate + int8 + multiply-adds
# OpenNMT-py bounds an output by -max_length_ratio x source length + 5 (translator.py) and JoeyNMT by
# 1.5 x the batch's longest source (max_output_length: -1); ours takes the same bound as max_len_a, max_len_b.
OUTPUT_EXTRA = 5
JOEYNMT_RATIO = 1.5  # the only ratio JoeyNMT 2.3.0 offers
# Our attention score -> each peer's name for it: additive (Bahdanau) is OpenNMT-py's `mlp`, Luong's
# `general` is JoeyNMT's `luong`. A score a peer lacks skips that peer.
OPENNMT_ATTENTION = {"bahdanau": "mlp", "concat": "mlp", "general": "general", "dot": "dot", "none": "none"}
JOEYNMT_ATTENTION = {"bahdanau": "bahdanau", "concat": "bahdanau", "general": "luong"}
PEER_SEED = 1234  # the peers' seed when none is asked for
NEVER = 10**9  # a step count no run reaches: the budget (SIGINT) or --max-steps ends training
PEER_SPLITS = {"train": "train", "valid": "dev", "test": "test"}  # ours -> the peers' file names
# Our loss normalisation (train.loss_norm) -> OpenNMT-py's `normalization`; it has no plain sum ("batch").
OPENNMT_NORMALIZATION = {"tokens": "tokens", "sentences": "sents"}
# OpenNMT-py's data loading (num_workers, bucket_size): its defaults, or the benchmark's original tuning
# (one process; buckets of 20,000, since 262,144 makes the loader cycle a 20k corpus ~13x before step 1).
OPENNMT_LOADER = {"defaults": (2, 262144), "tuned": (0, 20000)}


class Skip(Exception):
    """A toolkit that cannot run here; the message says why and ends up in the report."""


@dataclass(frozen=True)
class Recipe:
    """How a model is trained, in the terms OpenNMT-py takes: the matched peer gets ours (`matched_recipe`),
    the `general` one its own defaults (`OPENNMT_DEFAULTS`). Both initialise uniformly in +-0.1, its
    default: it refuses PyTorch's own initialisation (`param_init: 0`), which our small configs use."""

    optimizer: str = "adam"
    learning_rate: float = 1e-3
    clip: float = 5.0  # gradient-norm clipping
    normalization: str = "tokens"  # what the summed loss is divided by: tokens | sents
    dropout: float = 0.1  # OpenNMT-py's one rate: embeddings, and the output before the output layer


# OpenNMT-py 3.5.1's defaults (`opts.py`), the recommended ones for SGD in its help (learning_rate: "sgd = 1")
OPENNMT_DEFAULTS = Recipe(optimizer="sgd", learning_rate=1.0, clip=5.0, normalization="sents", dropout=0.3)
# ... and its default cell (`rnn_type`), the one that recipe is tuned for: on GRU cells SGD at 1 diverges
# (benchmarks/results/opennmt_recipe_check/)
OPENNMT_DEFAULT_CELL = "lstm"
# its checkpoints' name (`save_model`): it writes them as `<name>_step_<updates>.pt`
OPENNMT_SAVE_NAME = "model"
OPENNMT_CHECKPOINTS = f"{OPENNMT_SAVE_NAME}_step_*.pt"


def matched_recipe(model: ModelConfig, train: TrainConfig) -> Recipe:
    """Our config's recipe for the matched peer: optimiser, rate, clipping and normalisation as ours;
    dropout our rate before the output layer (`dropout_output`), the one place both toolkits drop alike
    (OpenNMT-py's rate also drops its embeddings; ours drops where `dropout_embed`/`dropout_hidden` say).
    A normalisation the peer lacks is left empty, and the matched peer is then skipped."""
    return Recipe(
        optimizer=train.optimizer,
        learning_rate=train.learning_rate,
        clip=train.clip_norm,
        normalization=OPENNMT_NORMALIZATION.get(train.loss_norm, ""),
        dropout=model.dropout_output,
    )


@dataclass(frozen=True)
class Settings:
    """What every toolkit gets the same value of."""

    device: str  # cpu | cuda
    batch: int  # sentences per training batch; per decoding batch for the peers
    beam: int
    max_len: int  # training pairs with more pieces than this on either side are skipped
    output_ratio: float  # generated pieces at most: output_ratio x source pieces + OUTPUT_EXTRA
    alpha: float  # GNMT length-penalty exponent: score = log p / ((5 + length) / 6) ** alpha
    log_every: int  # updates per throughput interval
    max_steps: int  # 0: only the wall-clock budget ends training
    budget_s: float  # wall-clock training budget from process start, enforced by SIGINT
    attention: str  # our model's `model.attention`; each peer gets its own name for that score
    opennmt_hidden: int = 256  # OpenNMT-py's hidden_size: its decoder's, split in two for its brnn encoder
    decode_steps: int = 0  # 0: outputs end at EOS; N: every output is exactly N pieces (EOS not before)
    cell: str = "gru"  # our model.cell: the matched OpenNMT-py's recurrent cell
    embed: int = 128  # our model.src_embed_dim: OpenNMT-py's embeddings
    recipe: Recipe = Recipe()  # our training recipe (matched_recipe), for the matched OpenNMT-py
    seed: int | None = None  # every toolkit's seed (--seeds); None: ours its config's, peers PEER_SEED
    int8: bool = False  # search with int8 products: ours by decode.precision, OpenNMT-py by quantize_dynamic
    default_loading: bool = False  # every toolkit loads its data its default way inside its training clock


@dataclass(frozen=True)
class Levers:
    """Our search's speed levers, ours alone: `decode.precision`, and a lexical shortlist learnt from the
    trained run (`seq2seq lexical-shortlist`: candidates per source piece, most frequent target pieces)."""

    precision: str = "auto"
    lexical: tuple[int, int] | None = None  # (top_k, frequent); None: the full output layer


@dataclass
class Output:
    """A decoded test set: detokenised lines and the number of target pieces generated (EOS excluded)."""

    texts: list[str]
    tokens: int
    seconds: float | None  # decoding time from the toolkit's own log
    macs_per_piece: float | None = None  # matrix products' multiply-adds per generated piece (first batch)


# ----------------------------------------------------------------------------------------------------------
# the shared data


class Pieces:
    """Our sentencepiece models, used to hand the peers our tokens and to detokenise what they generate."""

    def __init__(self, vocab_dir: Path) -> None:
        self.vocab = Vocab.load(vocab_dir, threads=1)
        self.src = spm.SentencePieceProcessor(model_file=str(self.vocab.model_files[0]))
        self.tgt = spm.SentencePieceProcessor(model_file=str(self.vocab.model_files[-1]))

    def encode(self, side: str, lines: list[str], tokenized: bool = False) -> list[str]:
        """Each line as the pieces our model is trained on, joined by spaces; `tokenized`: the lines are
        prepared training text, Moses-tokenised already where the data is."""
        encode = self.vocab.encode_src if side == "src" else self.vocab.encode_tgt
        ids = encode(lines, tokenized=tokenized)
        processor = self.src if side == "src" else self.tgt
        return [" ".join(processor.id_to_piece(seq)) if seq else "" for seq in ids]

    def decode(self, line: str) -> str:
        """A line of generated target pieces back to text, as our own translate would write it."""
        return self.vocab.decode_tgt([self.tgt.piece_to_id(piece) for piece in line.split()])


def export_pieces(data_dir: Path, pieces: Pieces, peer_dir: Path) -> None:
    """Write `<peer_dir>/{train,dev,test}.{src,tgt}`: our prepared splits as space-separated pieces."""
    peer_dir.mkdir(parents=True, exist_ok=True)
    for split, name in PEER_SPLITS.items():
        for side in ("src", "tgt"):
            lines = list(read_lines(data_dir / f"{split}.{side}"))
            encoded = pieces.encode(side, lines, tokenized=split == TOKENIZED_SPLIT)
            write_text(peer_dir / f"{name}.{side}", "".join(f"{line}\n" for line in encoded))


# ----------------------------------------------------------------------------------------------------------
# the toolkits


class Toolkit:
    """One toolkit; a run lives in `folder` (logs, outputs) with the toolkit's model files in folder/model."""

    key = ""
    label = ""
    log_format = ""  # whose log lines logs.py reads (its key unless another system shares the toolkit)
    snapshot_hook = ""  # launcher/bench_snapshots.py's hook ('': no checkpoints on request, no curves)
    settle = 30.0  # seconds between the interrupt and SIGTERM

    def setup(self, install: bool) -> None:
        """One-off work before the first run (install, vocabulary); raises Skip when it cannot run."""

    def version(self) -> dict[str, str]:
        return {}

    def recipe_text(self) -> dict[str, str]:
        """How it trains, in words, for the report: network, attention, optimiser, clipping, loss
        normalisation, dropout, initialisation, data loading ({}: not described)."""
        return {}

    def seeded(self, seed: int) -> Toolkit:
        """This toolkit, training from `seed` (its own seed option)."""
        twin = copy.copy(self)
        twin.settings = dataclasses.replace(self.settings, seed=seed)
        return twin

    def prepare_training(self, folder: Path) -> None:
        """Before each training: an emptied folder (a run directory left by an earlier benchmark would be
        resumed)."""
        shutil.rmtree(folder, ignore_errors=True)

    def train_job(self, folder: Path, points: tuple[float, ...] = ()) -> Job:
        """Training in `folder`: to the budget or, with `points` (seconds of training), a checkpoint
        asked for at each point and the process stopped after the last (`training`)."""
        raise NotImplementedError

    def training(self, argv: list[str], folder: Path, points: tuple[float, ...], env: dict[str, str]) -> Job:
        """The training job of `argv`: SIGINT at the budget, or checkpoints on request at `points`."""
        log = folder / "train.log"
        if not points:
            return Job(argv, log, env=env, interrupt_after=self.settings.budget_s, settle=self.settle)
        snapshots = Snapshots(points, folder / "snapshots.jsonl")
        hooked = {**env, SNAPSHOT_HOOK_ENV: self.snapshot_hook}
        return Job(argv, log, env=hooked, snapshots=snapshots, settle=self.settle)

    def train_points(self, folder: Path, measured: Measured) -> list[tuple[int, float]]:
        return logs.train_points(self.log_format or self.key, measured.text())

    def parameters(self, measured: Measured) -> int | None:
        return logs.parameters(self.log_format or self.key, measured.text())

    def checkpoint(self, folder: Path) -> Path | None:
        """The model to decode with after training (the last one written), or None."""
        raise NotImplementedError

    def trained_steps(self, folder: Path) -> int | None:
        """Where training stopped: the updates behind the checkpoint that is decoded (None: no checkpoint)."""
        raise NotImplementedError

    def discard_late(self, folder: Path, measured: Measured) -> None:
        """Remove what training wrote after the budget ran out (only a toolkit that saves periodically
        instead of on the interrupt can have such files)."""

    def decoding_setup(self, folder: Path) -> Job | None:
        """Work between training and decoding that decoding needs and is not timed with it, or None."""
        return None

    def decode_job(self, checkpoint: Path, beam: int, hyp: Path) -> Job:
        """Decode the test set with `checkpoint` into `hyp`, timed by the toolkit itself; ours and
        OpenNMT-py then count the multiply-adds of the first batch again, untimed (`Output`)."""
        raise NotImplementedError

    def output(self, hyp: Path, measured: Measured) -> Output:
        raise NotImplementedError


class Ours(Toolkit):
    """`seq2seq train` on a config with the benchmark's overrides; decoding by ours_decode.py."""

    key, label, snapshot_hook = logs.OURS, "ours", "ours"

    def __init__(
        self,
        config: Path,
        overrides: list[str],
        settings: Settings,
        data_dir: Path,
        levers: Levers = Levers(),
    ):
        self.config, self.overrides, self.settings, self.levers = config, overrides, settings, levers
        self.test_src = data_dir / "test.src"
        self.cache = data_dir / "vocab" / "cache"

    def prepare_training(self, folder: Path) -> None:
        """With default loading, the token cache goes too: `seq2seq train` then encodes the corpus inside
        its clock, as the peers read and numericalise their text inside theirs."""
        super().prepare_training(folder)
        if self.settings.default_loading:
            shutil.rmtree(self.cache, ignore_errors=True)

    def recipe_text(self) -> dict[str, str]:
        config = load_config(self.config, self.overrides, "--set")
        m, t = config.model, config.train
        return {
            "recipe": "its config",
            "network": f"{m.cell.upper()}, encoder {m.hidden_size} per direction"
            f"{'' if m.bidirectional else ' (one)'}, decoder {m.decoder_hidden_size}, embeddings "
            f"{m.src_embed_dim}",
            "attention": f"{m.attention} ({m.decoder})",
            "optimiser": f"{t.optimizer}, rate {t.learning_rate:g}",
            "gradient clipping": f"{t.clip_norm:g}",
            "loss normalisation": t.loss_norm,
            "dropout": f"embeddings {m.dropout_embed:g}, annotations {m.dropout_hidden:g}, before the "
            f"output layer {m.dropout_output:g}",
            "initialisation": m.init,
            "data loading": "its token cache, encoded inside the clock"
            if self.settings.default_loading
            else "its token cache, built before the clock",
        }

    def train_job(self, folder: Path, points: tuple[float, ...] = ()) -> Job:
        seed = [] if self.settings.seed is None else [f"seed={self.settings.seed}"]
        sets = _sets([*self.overrides, *seed, f"train.run_dir={folder / 'model'}"])
        argv = launched(sys.executable, ["-m", "seq2seq_attn", "train", str(self.config), *sets])
        return self.training(argv, folder, points, {})

    def version(self) -> dict[str, str]:
        import torch

        return {"version": seq2seq_attn.__version__, "torch": torch.__version__}

    def train_points(self, folder: Path, measured: Measured) -> list[tuple[int, float]]:
        metrics = folder / "model" / "metrics.jsonl"
        return logs.train_points(self.key, metrics.read_text(encoding="utf-8")) if metrics.is_file() else []

    def checkpoint(self, folder: Path) -> Path | None:
        latest = folder / "model" / "checkpoints" / "latest.pt"
        return latest if latest.is_file() else None

    def trained_steps(self, folder: Path) -> int | None:
        checkpoint = self.checkpoint(folder)
        return None if checkpoint is None else int(load_checkpoint(checkpoint)["step"])

    def decoding_setup(self, folder: Path) -> Job | None:
        """With a lexical shortlist: `seq2seq lexical-shortlist` learns the trained run's table."""
        if self.levers.lexical is None:
            return None
        top_k, frequent = self.levers.lexical
        options = {"--top-k": top_k, "--frequent": frequent, "--device": self.settings.device}
        command = ["-m", "seq2seq_attn", "lexical-shortlist", str(self.checkpoint(folder)), *_flat(options)]
        return Job(launched(sys.executable, command), folder / "lexical-shortlist.log")

    def decode_job(self, checkpoint: Path, beam: int, hyp: Path) -> Job:
        s = self.settings
        options = {"--checkpoint": checkpoint, "--input": self.test_src, "--output": hyp}
        options |= {"--beam": beam, "--batch-sentences": s.batch, "--alpha": s.alpha, "--device": s.device}
        options |= {"--precision": self.levers.precision}
        # --decode-steps N: EOS forbidden before N pieces and forced after them (one more step, to score it)
        if s.decode_steps:
            options |= {"--min-len": s.decode_steps, "--max-len-a": 0, "--max-len-b": s.decode_steps}
        else:
            options |= {"--max-len-a": s.output_ratio, "--max-len-b": OUTPUT_EXTRA}
        shortlist = ["--lexical-shortlist"] if self.levers.lexical else []
        argv = launched(sys.executable, [str(OURS_DECODE), *_flat(options), "--count-macs", *shortlist])
        return Job(argv, hyp.with_suffix(".log"))

    def output(self, hyp: Path, measured: Measured) -> Output:
        text = measured.text()
        tokens, seconds = logs.ours_decoded_tokens(text), logs.decode_seconds(self.key, text)
        return Output(list(read_lines(hyp)), tokens or 0, seconds, logs.multiply_adds(text))


class Peer(Toolkit):
    """A toolkit installed from PyPI into `<cache>/venvs/<key>`, fed our pieces from `peer_dir`."""

    template = ""
    module = ""  # the distribution whose version is reported
    requirements: list[list[str]] = []  # pip install steps, in order

    def __init__(self, cache: Path, peer_dir: Path, pieces: Pieces, settings: Settings, torch: str) -> None:
        self.venv = cache / "venvs" / (self.log_format or self.key)  # one install per toolkit
        self.python = self.venv / "bin" / "python"
        self.peer_dir, self.pieces, self.settings, self.torch = peer_dir, pieces, settings, torch

    def setup(self, install: bool) -> None:
        steps = [[f"torch=={self.torch}"], *self.requirements]
        stamp = self.venv / ".bench-installed"
        if stamp.is_file() and json.loads(stamp.read_text(encoding="utf-8")) == steps:
            return
        if not install:
            raise Skip(f"not installed in {self.venv}: run without --no-install to pip-install it there")
        cache = self.venv.parent.parent
        cache.mkdir(parents=True, exist_ok=True)
        write_text(cache / ".gitignore", "*\n")  # a cache folder inside a checkout ignores itself
        log = self.venv.with_suffix(".install.log")
        commands = [[sys.executable, "-m", "venv", "--clear", str(self.venv)]]
        commands += [[str(self.python), "-m", "pip", "install", *step] for step in steps]
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w", encoding="utf-8") as handle:
            for command in commands:
                handle.write("+ " + " ".join(command) + "\n")
                handle.flush()
                if subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, check=False).returncode:
                    raise Skip(f"could not install {self.label} (no package access?), see {log}")
        write_text(stamp, json.dumps(steps))

    def version(self) -> dict[str, str]:
        return {
            "version": package_version(self.python, self.module),
            "torch": package_version(self.python, "torch"),
        }

    def render(self, path: Path, values: dict[str, object]) -> Path:
        """The peer's config template with every @KEY@ replaced (and none left), written to `path`."""
        s = self.settings
        common = {
            "DATA": self.peer_dir,
            "BATCH": s.batch,
            "MAX_LEN": s.max_len,
            "LOG_EVERY": s.log_every,
            "STEPS": s.max_steps or NEVER,
            "VALIDATE_EVERY": s.log_every * NEVER,  # no validation inside the budget
            "SEED": PEER_SEED if s.seed is None else s.seed,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, fill(TEMPLATES / self.template, {**common, **values}))
        return path

    def output(self, hyp: Path, measured: Measured) -> Output:
        lines, text = list(read_lines(hyp)), measured.text()
        tokens = sum(len(line.split()) for line in lines)
        seconds = logs.decode_seconds(self.log_format or self.key, text)
        return Output([self.pieces.decode(line) for line in lines], tokens, seconds, logs.multiply_adds(text))


class JoeyNMT(Peer):
    key, label, module, template = logs.JOEYNMT, "JoeyNMT 2.3.0", "joeynmt", "joeynmt.yaml"
    requirements = [["joeynmt==2.3.0", "importlib_metadata"]]  # the latter is an undeclared dependency

    def setup(self, install: bool) -> None:
        if self.settings.decode_steps:
            raise Skip("its search has no minimum output length, so it cannot be held to --decode-steps")
        if self.settings.int8:
            raise Skip("it has no int8 search here (OpenNMT-py's is torch's quantize_dynamic)")
        if self.settings.output_ratio != JOEYNMT_RATIO:
            raise Skip(f"it bounds outputs relative to the source only at {JOEYNMT_RATIO} x the source")
        if self.settings.attention not in JOEYNMT_ATTENTION:
            raise Skip(f"it has no {self.settings.attention!r} attention")
        super().setup(install)

    def config(self, folder: Path, name: str, beam: int, checkpoint: Path | None = None) -> Path:
        """Its config, to train (testing latest.ckpt, its last) or to decode `checkpoint`."""
        s = self.settings
        model = checkpoint or folder / "model" / "latest.ckpt"
        values = {"RUN": folder / "model", "CUDA": s.device == "cuda", "BEAM": beam, "CHECKPOINT": model}
        values |= {"ALPHA": s.alpha, "MAX_OUTPUT": -1}  # JOEYNMT_RATIO x the batch's longest source
        values |= {"ATTENTION": JOEYNMT_ATTENTION[s.attention]}
        return self.render(folder / f"joeynmt.{name}.yaml", values)

    def train_job(self, folder: Path, points: tuple[float, ...] = ()) -> Job:
        config = self.config(folder, "train", self.settings.beam)
        argv = launched(self.python, ["-m", "joeynmt", "train", str(config), "--skip-test"])
        return self.training(argv, folder, points, {})

    def checkpoint(self, folder: Path) -> Path | None:
        latest = folder / "model" / "latest.ckpt"  # a link to the checkpoint saved at the end or interrupt
        return latest if latest.is_file() else None

    def trained_steps(self, folder: Path) -> int | None:
        """From the name of the file latest.ckpt links to: `<updates>.ckpt`."""
        checkpoint = self.checkpoint(folder)
        return None if checkpoint is None else int(checkpoint.resolve().stem)

    def decode_job(self, checkpoint: Path, beam: int, hyp: Path) -> Job:
        # `translate -o` crashes in 2.3.0: it reads stdin and prints the translations
        config = self.config(hyp.parent, f"{hyp.stem}.beam{beam}", beam, checkpoint)
        argv = launched(self.python, ["-m", "joeynmt", "translate", str(config)])
        return Job(argv, hyp.with_suffix(".log"), stdin=self.peer_dir / "test.src", stdout=hyp)


class OpenNMT(Peer):
    """OpenNMT-py matched to ours: our kind of attention (`mlp` for additive) and our training recipe."""

    key, label, module, template = logs.OPENNMT, "OpenNMT-py 3.5.1", "OpenNMT-py", "opennmt.yaml"
    snapshot_hook, settle = "opennmt", 1.0  # it saves nothing on SIGINT: terminated right after it
    recipe_label = "ours, matched"
    requirements = [
        ["--no-deps", "OpenNMT-py==3.5.1"],  # its metadata pins torch<2.3
        ["configargparse", "pyyaml", "sacrebleu", "rapidfuzz", "six", "numpy", "pyonmttok>=1.37,<2"],
        ["pyahocorasick", "fasttext-wheel", "spacy", "ctranslate2>=4,<5", "tensorboard", "flask", "waitress"],
    ]
    env = {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}  # its checkpoints pickle an argparse.Namespace

    @property
    def attention(self) -> str:
        return OPENNMT_ATTENTION[self.settings.attention]

    @property
    def recipe(self) -> Recipe:
        return self.settings.recipe

    @property
    def cell(self) -> str:
        return self.settings.cell

    def recipe_text(self) -> dict[str, str]:
        s, r = self.settings, self.recipe
        workers, bucket = OPENNMT_LOADER["defaults" if s.default_loading else "tuned"]
        return {
            "recipe": self.recipe_label,
            "network": f"{self.cell.upper()}, encoder {s.opennmt_hidden // 2} per direction, decoder "
            f"{s.opennmt_hidden}, embeddings {s.embed}",
            "attention": f"{self.attention}, input feeding",
            "optimiser": f"{r.optimizer}, rate {r.learning_rate:g}",
            "gradient clipping": f"{r.clip:g}",
            "loss normalisation": r.normalization,
            "dropout": f"embeddings and before the output layer {r.dropout:g}",
            "initialisation": "uniform +-0.1",
            "data loading": f"text numericalised inside the clock, {workers or 'no'} worker processes, "
            f"buckets of {bucket:,}" + (" (its defaults)" if s.default_loading else ""),
        }

    def setup(self, install: bool) -> None:
        if not self.recipe.normalization:
            raise Skip("it has no loss normalisation like our train.loss_norm (tokens or sentences only)")
        super().setup(install)
        vocab = self.vocab_dir
        config = self.config(vocab, "vocab")
        argv = launched(
            self.python, ["-m", "onmt.bin.build_vocab", "-config", str(config), "-n_sample", "-1"]
        )
        measured = run_job(Job(argv, vocab / "build_vocab.log", env=self.env))
        if measured.returncode:
            raise Skip(f"onmt_build_vocab failed (exit {measured.returncode}), see {measured.log}")

    @property
    def vocab_dir(self) -> Path:
        return self.peer_dir.parent / "opennmt-vocab"

    def config(self, folder: Path, name: str, snapshots: bool = False) -> Path:
        """Its config. To the budget it saves every logging interval, keeping the newest two (it writes
        nothing when interrupted); with `snapshots` only the checkpoints asked for, every one kept."""
        s, recipe = self.settings, self.recipe
        cuda = s.device == "cuda"
        workers, bucket = OPENNMT_LOADER["defaults" if s.default_loading else "tuned"]
        save_model = folder / "model" / OPENNMT_SAVE_NAME
        values = {"SAVE_MODEL": save_model, "VOCAB": self.vocab_dir, "TGT_SEQ_LENGTH": s.max_len + 2}
        values |= {"SAVE_EVERY": 0 if snapshots else s.log_every, "KEEP": -1 if snapshots else 2}
        values |= {"GPU_RANKS": [0] if cuda else [], "DTYPE": "fp16" if cuda else "fp32"}
        values |= {"ATTENTION": self.attention, "HIDDEN": s.opennmt_hidden, "CELL": self.cell.upper()}
        values |= {"EMBED": s.embed}
        values |= {"OPTIM": recipe.optimizer, "LEARNING_RATE": recipe.learning_rate, "CLIP": recipe.clip}
        values |= {"NORMALIZATION": recipe.normalization, "DROPOUT": recipe.dropout}
        values |= {"NUM_WORKERS": workers, "BUCKET_SIZE": bucket}
        return self.render(folder / f"opennmt.{name}.yaml", values)

    def train_job(self, folder: Path, points: tuple[float, ...] = ()) -> Job:
        config = self.config(folder, "train", snapshots=bool(points))
        argv = launched(self.python, ["-m", "onmt.bin.train", "-config", str(config)])
        # To the budget: it saves nothing on SIGINT (and may train on through it), so it is terminated
        # right away; its last periodic checkpoint is what it had learnt within the budget.
        return self.training(argv, folder, points, self.env)

    def train_points(self, folder: Path, measured: Measured) -> list[tuple[int, float]]:
        return logs.train_points(logs.OPENNMT, measured.text(), until=measured.deadline)

    def discard_late(self, folder: Path, measured: Measured) -> None:
        """Checkpoints finished after the budget do not count: it saves none on the interrupt, so the
        last one written within the budget is what it had learnt by then."""
        if measured.deadline is None:
            return
        for path in self._saved(folder):
            if path.stat().st_mtime > measured.deadline:
                path.unlink()

    def checkpoint(self, folder: Path) -> Path | None:
        """The newest complete `model_step_N.pt` (an interrupt can cut the one being written)."""
        complete = [path for path in self._saved(folder) if zipfile.is_zipfile(path)]
        return complete[-1] if complete else None

    @staticmethod
    def _saved(folder: Path) -> list[Path]:
        """The checkpoints it wrote in `folder`, oldest first."""
        return sorted((folder / "model").glob(OPENNMT_CHECKPOINTS), key=_step_of)

    def trained_steps(self, folder: Path) -> int | None:
        """From the checkpoint's name, `model_step_<updates>.pt`: it saves nothing on the interrupt, so the
        updates it made after its last checkpoint within the budget are lost to it."""
        checkpoint = self.checkpoint(folder)
        return None if checkpoint is None else _step_of(checkpoint)

    def decode_job(self, checkpoint: Path, beam: int, hyp: Path) -> Job:
        """Its own onmt_translate (launcher/opennmt_translate.py), int8 by `quantize_dynamic` when asked."""
        s = self.settings
        options = {"-model": checkpoint, "-src": self.peer_dir / "test.src", "-output": hyp}
        options |= {"-beam_size": beam, "-batch_size": s.batch, "-batch_type": "sents"}
        if s.decode_steps:  # N pieces: EOS forbidden up to the Nth, the search ended after it
            options |= {"-max_length": s.decode_steps, "-max_length_ratio": 0, "-min_length": s.decode_steps}
        else:
            options |= {"-max_length": NEVER, "-max_length_ratio": s.output_ratio, "-min_length": 0}
        options |= {"-length_penalty": "wu", "-alpha": s.alpha}
        options |= {"-gpu": 0} if s.device == "cuda" else {}
        added = ["--int8"] if s.int8 else []
        added += ["--count-macs"]
        target = [str(OPENNMT_TRANSLATE), *added, *_flat(options), "-report_time"]
        return Job(launched(self.python, target), hyp.with_suffix(".log"), env=self.env)


class OpenNMTGeneral(OpenNMT):
    """OpenNMT-py's default model (LSTM cells, Luong's `general` attention with input feeding, as in every
    OpenNMT-py RNN config) trained by its default recipe (`OPENNMT_DEFAULTS`), at our network's layers,
    embeddings and widths. The arithmetic is ours' when ours runs the same model (`configs/small_luong.yaml`
    with `model.cell=lstm`). Same install and vocabulary."""

    key, label, log_format = "opennmt-general", "OpenNMT-py 3.5.1 (general, its defaults)", logs.OPENNMT
    recipe_label = "its defaults"

    @property
    def attention(self) -> str:
        return "general"

    @property
    def recipe(self) -> Recipe:
        return OPENNMT_DEFAULTS

    @property
    def cell(self) -> str:
        return OPENNMT_DEFAULT_CELL


PEERS: dict[str, type[Peer]] = {
    JoeyNMT.key: JoeyNMT,
    OpenNMT.key: OpenNMT,
    OpenNMTGeneral.key: OpenNMTGeneral,
}


def fill(template: Path, values: dict[str, object]) -> str:
    """`template` with each @KEY@ replaced by str(values[KEY]); a placeholder without a value is an error."""
    text = template.read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace(f"@{key}@", str(value))
    left = sorted(set(re.findall(r"@([A-Z_]+)@", text)))
    if left:
        raise ValueError(f"{template}: no value for {', '.join(left)}")
    return text


def _step_of(checkpoint: Path) -> int:
    """OpenNMT-py's checkpoint `<name>_step_<updates>.pt` -> updates."""
    return int(checkpoint.stem.rsplit("_", 1)[1])


def _flat(options: dict[str, object]) -> list[str]:
    """{"--beam": 5, ...} -> ["--beam", "5", ...]"""
    return [str(part) for pair in options.items() for part in pair]


def _sets(overrides: list[str]) -> list[str]:
    return [part for item in overrides for part in ("--set", item)]
