"""The config schema: one tree of dataclasses with sections data, vocab, model, train, decode and eval.

Every key carries its documentation and its allowed range in the field metadata, so the loader's
validation messages (`loader.py`), `seq2seq config --keys` and `docs/config.md` (`reference.py`) all come
from this one place. Output folders left empty default to `data/<name>` and `runs/<name>` under the
current working directory.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from ..errors import UserError
from .constants import SPLITS

SEED_MAX = 2**32 - 1  # numpy's legacy seeding takes seeds below 2**32


def option(default: Any, doc: str, *, short: str = "", **rules: Any) -> Any:
    """A documented config key. `doc` is its full meaning (docs/config.md); `short`, one line for a
    command-line option's `--help` where the key is one (default: `doc`). `rules`: choices=[...], ge=,
    gt=, le=, path=True (resolved vs. config)."""
    metadata = {"doc": doc, "short": short or doc, **rules}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def section(cls: type, doc: str) -> Any:
    return dataclasses.field(default_factory=cls, metadata={"doc": doc})


def field_types(cls: type) -> dict[str, Any]:
    """The type of each key of section `cls` (a section's type is its dataclass)."""
    return typing.get_type_hints(cls)


# ----------------------------------------------------------------------------------------------------------
# data


@dataclass
class SyntheticConfig:
    """A generated language pair that makes the long-sentence problem real (see `data/synthetic.py`)."""

    train_size: int = option(20000, "Training sentence pairs to generate.", ge=1)
    valid_size: int = option(500, "Validation sentence pairs to generate.", ge=1)
    test_size: int = option(1000, "Test sentence pairs to generate.", ge=1)
    vocab_size: int = option(
        2500,
        "Content words (nouns, verbs, adjectives, adverbs) per language; 33 function words come on top.",
        ge=100,
    )
    irregular_words: int = option(
        300,
        "Most frequent content words given arbitrary translations; rarer ones are cognates "
        "(syllable-by-syllable sound correspondences), learnable from a few examples.",
        ge=0,
    )
    min_words: int = option(
        3, "Shortest source sentence in words, punctuation included (3: 'he sleeps .').", ge=3
    )
    max_words: int = option(
        80, "Longest source sentence in words; lengths are spread evenly in between.", ge=5
    )
    zipf_exponent: float = option(
        1.0, "Exponent s of the Zipf law p(rank) ~ rank^-s for word choice.", gt=0, le=3
    )
    seed: int = option(
        1234, "Seed of the generator: same seed, same bytes; each split derives its own.", ge=0, le=SEED_MAX
    )


@dataclass
class SplitFiles:
    """One split of a local corpus: a source and a target file (line-aligned, `.gz` allowed) or one TSV."""

    src: str = option("", "Source-language text file, one segment per line (.gz read directly).", path=True)
    tgt: str = option(
        "", "Target-language text file, line-aligned with `src` (.gz read directly).", path=True
    )
    tsv: str = option("", "Alternative to src/tgt: one TSV file, source<TAB>target per line.", path=True)


@dataclass
class HoldOutConfig:
    """Dev and test sets drawn out of the training files, for a corpus that comes as one file pair."""

    valid: int = option(
        0, "Pairs held out of the training files as the dev set when `valid` names no files (0: none).", ge=0
    )
    test: int = option(
        0, "Pairs held out of the training files as the test set when `test` names no files (0: none).", ge=0
    )
    seed: int = option(
        1, "Seed of the draw: the same files, sizes and seed give the same split.", ge=0, le=SEED_MAX
    )


@dataclass
class LocalConfig:
    """Line-aligned plain-text corpus files on disk."""

    train: SplitFiles = section(SplitFiles, "Training split.")
    valid: SplitFiles = section(SplitFiles, "Validation (dev) split; or drawn from train, see hold_out.")
    test: SplitFiles = section(SplitFiles, "Test split; or drawn from train, see hold_out.")
    hold_out: HoldOutConfig = section(
        HoldOutConfig,
        "For a split whose files are not given: how many training pairs to hold out for it. Training "
        "pairs whose source sentence is also a held-out source, as the model reads it (tokenised as "
        "data.tokenize says, NFKC, white space normalised), are removed (counted in the manifest).",
    )


@dataclass
class HuggingFaceConfig:
    """A corpus read through `datasets.load_dataset` (e.g. the paper's WMT'14 En-Fr)."""

    name: str = option(
        "wmt14",
        "Dataset name on the hub, or a local dataset folder / loader script (a folder written by "
        "`save_to_disk` is read with `load_from_disk`; relative to the working directory).",
    )
    config: str = option("fr-en", "Dataset configuration name ('' for none).")
    train_split: str = option("train", "Split used for training.")
    valid_split: str = option(
        "validation", "Split used for validation (wmt14's is newstest2013; the paper used newstest2012+2013)."
    )
    test_split: str = option("test", "Split used for testing (the paper: newstest2014).")
    translation_field: str = option(
        "translation", "Column holding {lang: text} dicts; '' to use src_field/tgt_field instead."
    )
    src_field: str = option("", "Source text column when translation_field is ''.")
    tgt_field: str = option("", "Target text column when translation_field is ''.")
    max_examples: int = option(0, "Keep at most this many training pairs (0: all).", ge=0)
    streaming: bool = option(
        True, "Stream the splits from the hub (no full download; nothing held in memory)."
    )
    revision: str = option("", "Dataset revision (git tag or commit) for reproducibility ('' latest).")


@dataclass
class Multi30kConfig:
    """Multi30k task 1, image captions in English, German and French: the official files, each checked
    against its sha256 (data/multi30k.py). train trains, val picks the checkpoint, test_2016_flickr is
    the test split; test_2017_flickr and the task's processed references are there for `seq2seq eval`."""

    dir: str = option(
        "",
        "Folder of the official files: `<split>.<lang>.gz` (split train, val, test_2016_flickr, "
        "test_2017_flickr) and the target side's `<split>.lc.norm.tok.<lang>` ('' : data/multi30k-task1 "
        "under the working directory).",
        path=True,
    )
    download: bool = option(
        False, "Download the files missing from `dir` into it first (from `url`), checked before use."
    )
    url: str = option(
        "",
        "Where a download comes from: `<url>/raw/<split>.<lang>.gz` and "
        "`<url>/tok/<split>.lc.norm.tok.<lang>` ('' : the dataset's GitHub repository, "
        "github.com/multi30k/dataset, at the commit of the checksums).",
    )


@dataclass
class CleanConfig:
    """Corpus cleaning rules, applied in this order, with a count of pairs dropped by each."""

    normalize_whitespace: bool = option(True, "Collapse runs of white space and strip both ends.")
    drop_empty: bool = option(True, "Drop pairs where either side is empty.")
    max_words: int = option(250, "Drop pairs with more words than this on either side (0: no limit).", ge=0)
    max_ratio: float = option(
        3.0, "Drop pairs whose word-count ratio (longer/shorter) exceeds this (0: no limit).", ge=0
    )
    dedup: bool = option(False, "Drop exact duplicate pairs (keeps the first).")
    splits: list[str] = option(
        ["train"],
        "Splits the rules apply to (keep dev/test intact for evaluation).",
        items=list(SPLITS),
    )


@dataclass
class DataConfig:
    """Where the parallel corpus comes from and how it is cleaned."""

    source: str = option(
        "synthetic", "Corpus source.", choices=["synthetic", "local", "huggingface", "multi30k"]
    )
    dir: str = option(
        "", "Output folder for prepared data ('' : data/<name> under the working directory).", path=True
    )
    src_lang: str = option("en", "Source language code (names files and the translation field).")
    tgt_lang: str = option("fr", "Target language code.")
    synthetic: SyntheticConfig = section(SyntheticConfig, "Settings for source: synthetic.")
    local: LocalConfig = section(LocalConfig, "Settings for source: local.")
    huggingface: HuggingFaceConfig = section(HuggingFaceConfig, "Settings for source: huggingface.")
    multi30k: Multi30kConfig = section(Multi30kConfig, "Settings for source: multi30k.")
    tokenize: str = option(
        "none",
        "'moses': Moses-tokenise the training text before cleaning and the vocabulary (the paper's words); "
        "the model then tokenises what it reads and detokenises what it writes. 'task': as 'moses', the text "
        "lowercased and punctuation-normalised first, as shared tasks such as Multi30k processed theirs: "
        "the model writes lowercased text, scored case-insensitively.",
        choices=["none", "moses", "task"],
    )
    clean: CleanConfig = section(CleanConfig, "Cleaning rules.")


# ----------------------------------------------------------------------------------------------------------
# vocabulary


@dataclass
class VocabConfig:
    """sentencepiece subword (or word) vocabularies."""

    type: str = option(
        "bpe",
        "sentencepiece model type ('word' + size 30000 is the paper's shortlist).",
        choices=["bpe", "unigram", "word"],
    )
    size: int = option(8000, "Vocabulary size of each model (source and target, or the joint one).", ge=8)
    joint: bool = option(False, "One model shared by source and target instead of one per language.")
    input_sentence_size: int = option(
        1000000, "Sentences sampled to train sentencepiece on big corpora (0: all).", ge=0
    )
    character_coverage: float = option(
        1.0, "Share of characters covered by the model (sentencepiece takes 0.98 to 1).", ge=0.98, le=1
    )
    threads: int = option(0, "Threads for training and encoding (0: all cores).", ge=0)


# ----------------------------------------------------------------------------------------------------------
# model


@dataclass
class ModelConfig:
    """The encoder-decoder (Bahdanau et al. 2014 RNNsearch / RNNencdec; Luong et al. 2015)."""

    decoder: str = option(
        "rnnsearch",
        "Decoder family: the paper's RNNsearch or Luong's input-feeding one.",
        choices=["rnnsearch", "luong"],
    )
    attention: str = option(
        "bahdanau",
        "Attention score; 'none' gives the RNNencdec baseline (fixed context).",
        choices=["none", "bahdanau", "dot", "general", "concat"],
    )
    cell: str = option("gru", "Recurrent cell of encoder and decoder.", choices=["gru", "lstm"])
    src_embed_dim: int = option(128, "Source word embedding size (paper: 620).", ge=1)
    tgt_embed_dim: int = option(128, "Target word embedding size (paper: 620).", ge=1)
    hidden_size: int = option(256, "Encoder hidden size per direction (paper: 1000).", ge=1)
    decoder_hidden_size: int = option(256, "Decoder hidden size (paper: 1000).", ge=1)
    encoder_layers: int = option(1, "Stacked encoder RNN layers.", ge=1)
    decoder_layers: int = option(
        1, "Stacked decoder RNN layers; attention and the output read the top one (paper: 1).", ge=1
    )
    bidirectional: bool = option(True, "Bidirectional encoder: annotations h_j = [fwd h_j ; bwd h_j].")
    attention_dim: int = option(
        256, "Hidden size of the alignment model (bahdanau, concat; paper: 1000).", ge=1
    )
    maxout_dim: int = option(256, "Deep-output maxout units after pooling (rnnsearch; paper: 500).", ge=1)
    decoder_step: str = option(
        "update_then_attend",
        "RNNsearch / RNNencdec step order. update_then_attend (the authors' GroundHog code): the state "
        "first reads y_{i-1} with the previous context c_{i-1}, then queries attention and feeds the "
        "deep output. attend_then_update (Appendix A.2.2): s_{i-1} queries attention and feeds the deep "
        "output, then s_i = f(s_{i-1}, y_{i-1}, c_i), so the state that predicts y_i has not read "
        "y_{i-1}. The default won on real data at equal updates (docs/RESULTS.md, section 4). "
        "conditional: the conditional GRU of Nematus (Sennrich et al. 2017, sec. 2): s'_i = "
        "GRU_1(y_{i-1}, s_{i-1}) queries attention, then s_i = GRU_2(c_i, s'_i) feeds the deep output; "
        "one-layer GRU decoders with attention only.",
        choices=["attend_then_update", "update_then_attend", "conditional"],
    )
    coverage: str = option(
        "none",
        "Coverage model of the attention (Tu et al. 2016, sec. 3; rnnsearch with bahdanau or concat "
        "attention): a vector C_j per source word, fed into the score, e_ij = v_a^T tanh(W_a s + U_a h_j "
        "+ V_a C_{i-1,j}), so that attention knows what it has already translated. linguistic: C_j sums "
        "the attention j received over its fertility Phi_j = max_fertility * sigmoid(U_f h_j); neural: a "
        "GRU of coverage_dim units per source word reads alpha_ij, h_j and the query state. Not "
        "decode.coverage_penalty, which rescores finished hypotheses by the attention they paid.",
        choices=["none", "linguistic", "neural"],
    )
    coverage_dim: int = option(
        10, "Units of the neural coverage vector per source word (Tu et al. 2016: 10).", ge=1
    )
    max_fertility: float = option(
        2.0,
        "N in the linguistic coverage's fertility Phi_j = N sigmoid(U_f h_j): the most target words one "
        "source word is expected to produce (Tu et al. 2016: 2).",
        gt=0,
    )
    fixed_context: str = option(
        "projected",
        "RNNencdec (attention none): the fixed context c. projected: c = tanh(V h_T) (Cho et al. 2014, "
        "arXiv 1406.1078); last_state: c = h_T, the encoder's last state (Bahdanau et al.'s RNNencdec).",
        choices=["projected", "last_state"],
    )
    input_feeding: bool = option(
        True,
        "Luong: feed the previous attentional vector into the next step (off: one cuDNN call for all steps).",
    )
    dropout_embed: float = option(0.0, "Dropout on embeddings.", ge=0, lt=1)
    dropout_hidden: float = option(0.0, "Dropout between stacked RNN layers and on annotations.", ge=0, lt=1)
    dropout_output: float = option(
        0.0, "Dropout before the output projection (on t_i for rnnsearch, on h~_t for luong).", ge=0, lt=1
    )
    tie_embeddings: bool = option(
        False,
        "Share target embeddings with the output projection: needs tgt_embed_dim == maxout_dim (rnnsearch) "
        "or == decoder_hidden_size (luong).",
    )
    init: str = option(
        "paper",
        "Initialisation: paper = Bahdanau App. A (orthogonal recurrent matrices, attention W_a/U_a "
        "N(0, 0.001^2) and v_a 0, other weights N(0, 0.01^2), biases 0); pytorch = library defaults.",
        choices=["paper", "pytorch"],
    )

    @property
    def attends(self) -> bool:
        """Whether the decoder attends: every attention but `none` (the RNNencdec's fixed context), whose
        weights are uniform and say nothing about alignment."""
        return self.attention != "none"


# ----------------------------------------------------------------------------------------------------------
# training


@dataclass
class TrainConfig:
    """Batching, optimisation, validation, checkpoints."""

    run_dir: str = option("", "Run folder ('' : runs/<name> under the working directory).", path=True)
    device: str = option(
        "auto", "Where to train: auto picks cuda when available.", choices=["auto", "cpu", "cuda"]
    )
    precision: str = option(
        "auto",
        "auto: bf16 autocast on GPU, fp32 on CPU (bf16 pays on some CPUs only; on the GPUs measured, the "
        "paper model's updates took from 7% less to 41% more time than in fp32: docs/performance.md). "
        "tf32: fp32, the matrix products and cuDNN's RNNs on a GPU's TF32 tensor cores (Ampere and newer; "
        "fp32 on a CPU). fp32 is fp32 on a GPU too.",
        choices=["auto", "fp32", "tf32", "bf16"],
    )
    compile: bool = option(
        False,
        "Run the additive attention's per-step work (and its gradient) through torch.compile, after "
        "seconds of compiling; needs a C++ compiler (Triton on a GPU). On the GPUs measured it made "
        "training updates slower (docs/performance.md); on a CPU, time it with `benchmarks.bench_step "
        "--compile`. Validation's search uses it too.",
    )
    cuda_graphs: str = option(
        "auto",
        "Capture the training update (forward, backward, clipping, the optimiser's step) in CUDA graphs, "
        "one per batch shape, and replay them, so that the GPU runs an update's thousands of small kernels "
        "without the CPU launching each. Batches are padded to a small fixed set of shapes: sentences "
        "(batch_size with batch_type sentences; else rounded up to one of 8 sizes per doubling) and both "
        "lengths rounded up to a multiple of 8, at most max_len + 1 (docs/gpu.md). auto: on a CUDA "
        "device with optimizer adam or adadelta in a single process; on: the same, an error elsewhere; "
        "off: never.",
        choices=["auto", "on", "off"],
    )
    batch_type: str = option(
        "tokens",
        "Batch size counted in tokens (src+tgt) or sentences (paper: 80).",
        choices=["tokens", "sentences"],
    )
    batch_size: int = option(4096, "Tokens or sentences per batch, see batch_type.", ge=1)
    max_len: int = option(
        50, "Skip training pairs longer than this many tokens on either side (paper: 30/50).", ge=1
    )
    concat_share: float = option(
        0.0,
        "Share of the training examples made of consecutive pairs (in the epoch's shuffled order) joined "
        "into one, source to source and target to target, so that training sees inputs longer than its "
        "sentences (Varis & Bojar 2021); each joined example takes 2 to concat_max pairs while both sides "
        "fit max_len. 0: off.",
        ge=0,
        le=1,
    )
    concat_max: int = option(3, "The most pairs a joined example of concat_share takes.", ge=2)
    bucket_pool: int = option(
        100, "Batches per sorting pool: larger means less padding, less randomness.", ge=1
    )
    optimizer: str = option("adam", "Optimiser (paper: adadelta).", choices=["adam", "adadelta", "sgd"])
    learning_rate: float = option(1e-3, "Peak learning rate (adadelta: 1.0).", gt=0)
    adam_betas: list[float] = option([0.9, 0.999], "Adam beta1, beta2.", length=2, ge=0, lt=1)
    adadelta_rho: float = option(0.95, "Adadelta decay rho (paper: 0.95).", gt=0, lt=1)
    adadelta_eps: float = option(1e-6, "Adadelta epsilon (paper: 1e-6).", gt=0)
    momentum: float = option(0.0, "SGD momentum.", ge=0, lt=1)
    weight_decay: float = option(0.0, "L2 weight decay.", ge=0)
    scheduler: str = option(
        "constant", "Learning-rate schedule.", choices=["constant", "plateau", "inverse_sqrt"]
    )
    warmup_steps: int = option(
        0, "Linear warm-up steps, before any scheduler's rate (constant, inverse_sqrt, plateau).", ge=0
    )
    plateau_factor: float = option(
        0.5, "plateau: multiply the rate by this when the dev metric stalls.", gt=0, lt=1
    )
    plateau_patience: int = option(2, "plateau: validations without improvement before decaying.", ge=0)
    min_learning_rate: float = option(1e-6, "Lower bound on the learning rate.", ge=0)
    clip_norm: float = option(1.0, "Clip the global gradient norm to this (paper: 1; 0: off).", ge=0)
    label_smoothing: float = option(0.0, "Label smoothing of the cross-entropy.", ge=0, lt=1)
    loss_norm: str = option(
        "tokens",
        "What the batch's summed loss is divided by before backward. tokens: its target tokens (the mean "
        "token loss; under DDP each rank's mean, averaged over the ranks). sentences: its sentences (the sum "
        "over each sentence, averaged; under DDP per rank, as tokens). batch: nothing, the "
        "sum over every target token of the (global, under DDP) batch: the RNNsearch authors' code "
        "(GroundHog), whose gradients are so large that clip_norm 1 clips nearly every update.",
        choices=["tokens", "sentences", "batch"],
    )
    max_steps: int = option(0, "Stop after this many updates (0: no limit).", ge=0)
    max_epochs: int = option(0, "Stop after this many epochs (0: no limit).", ge=0)
    max_minutes: float = option(
        0.0,
        "Wall-clock training budget in minutes (0: no limit), checked every log_every updates (a host sync, "
        "and under DDP rank 0's clock decides): a run ends up to log_every updates past it.",
        ge=0,
    )
    log_every: int = option(100, "Updates between log lines.", ge=1)
    validate_every: int = option(
        1000, "Updates between validations (dev loss and BLEU) and checkpoints.", ge=1
    )
    checkpoint_every: int = option(
        0, "Extra 'latest' checkpoints every N updates for resume (0: at validation).", ge=0
    )
    valid_bleu: bool = option(True, "Compute dev BLEU at validation (else loss only).")
    valid_max_sentences: int = option(
        0, "Validate on at most this many dev sentences, their loss and BLEU (0: all).", ge=0
    )
    valid_beam: int = option(
        1,
        "Beam width for dev BLEU (1: greedy, fast); otherwise the decode section's search, with EOS forced "
        "at the maximum length.",
        ge=1,
    )
    early_stop_metric: str = option(
        "bleu",
        "Metric for best checkpoint, early stopping and reduce-on-plateau. bleu needs train.valid_bleu: "
        "with it off, no BLEU is computed and the loss decides.",
        choices=["bleu", "loss"],
    )
    patience: int = option(0, "Validations without improvement before stopping (0: never).", ge=0)
    keep_best: int = option(3, "Best checkpoints kept besides the latest.", ge=1)
    max_nonfinite: int = option(20, "Consecutive non-finite losses/gradients that stop the run.", ge=1)

    @property
    def ranking_metric(self) -> str:
        """The dev metric that ranks checkpoints (`early_stop_metric`): the loss when `valid_bleu` is off,
        since no BLEU is computed then (a BLEU of 0 at every validation would keep the first checkpoints
        as the best and end a run with `patience`)."""
        return self.early_stop_metric if self.valid_bleu else "loss"


# ----------------------------------------------------------------------------------------------------------
# decoding and evaluation


# decode.cuda_graphs `auto` captures only in a search of at least this many sentences (a test or dev set, not
# a server's micro-batch): each capture waits for the GPU and empties torch's memory cache, which only
# enough replays pay back. Not yet measured on a GPU.
GRAPH_AUTO_SENTENCES = 64


@dataclass
class DecodeConfig:
    """Beam search settings used by validation, `translate` and `eval --model`."""

    beam_size: int = option(5, "Beam width (1: greedy).", ge=1, short="Beam width, 1 for greedy.")
    nbest: int = option(
        1,
        "Hypotheses returned per sentence.",
        ge=1,
        short="Hypotheses per sentence; above 1, output rows of index, rank, score and text, tab-separated.",
    )
    length_penalty: str = option(
        "gnmt",
        "Length normalisation of scores.",
        choices=["none", "average", "gnmt"],
        short="Score normalisation.",
    )
    alpha: float = option(
        0.6, "GNMT length-penalty exponent alpha.", ge=0, short="GNMT length-penalty exponent."
    )
    max_len_a: float = option(
        1.5,
        "Maximum output length is a*src_len + b (tokens).",
        ge=0,
        short="At most a * source length + b output tokens.",
    )
    max_len_b: int = option(10, "See max_len_a.", ge=1, short="See --max-len-a.")
    min_len: int = option(
        0,
        "Minimum output length in tokens before EOS is allowed.",
        ge=0,
        short="No EOS before this many tokens.",
    )
    min_len_a: float = option(
        0.0,
        "Minimum output length relative to the source: EOS is forbidden before ceil(a * src_len) tokens "
        "(the larger of this and min_len applies; the RNNsearch authors' beam search: 0.5).",
        ge=0,
        short="No EOS before ceil(a * source length) tokens.",
    )
    at_max_len: str = option(
        "force_eos",
        "What happens at the maximum output length. force_eos: EOS is forced, so every sentence ends in one "
        "search. retry (the RNNsearch authors' GroundHog): the open hypotheses are dropped, and a sentence "
        "none of whose hypotheses ended is searched again with a doubled beam while the beam is under 500.",
        choices=["force_eos", "retry"],
        short=(
            "force_eos: EOS is forced at the maximum length; retry: unfinished hypotheses are "
            "dropped there and a sentence with none ended is searched again with a doubled beam, "
            "as GroundHog."
        ),
    )
    no_unk: bool = option(
        False,
        "Never generate <unk> (Bahdanau et al. 2014, Table 1's no-UNK column); a sentence that finds no "
        "translation without it is searched again with it, at the same beam (GroundHog).",
        short="Never generate <unk>; a sentence with no translation without it is searched again with it.",
    )
    coverage_penalty: float = option(
        0.0,
        "beta of the coverage penalty of Wu et al. 2016 (eq. 14): a finished hypothesis' score gains beta * "
        "sum_j log(min(c_j, 1)), c_j the attention its steps paid source piece j, so translations that "
        "leave source pieces unattended rank lower (0: off). Needs attention (RNNencdec's is uniform). It "
        "reads the attention weights whatever made them: with a coverage model (model.coverage) it "
        "rescores the attention that model steered.",
        ge=0,
        short="Coverage penalty beta (Wu et al. 2016), 0 off: ranks lower the translations that leave "
        "source pieces unattended.",
    )
    no_repeat_ngram: int = option(
        0,
        "Forbid repeating any n-gram of this size (0: off).",
        ge=0,
        short="Forbid repeating any n-gram of this size, 0 off.",
    )
    stopping: str = option(
        "bound",
        "When a sentence's search ends besides running out of open hypotheses or reaching the maximum "
        "length. bound: once no open hypothesis can still beat the nbest-th finished one, so stopping "
        "early never changes the result. top: as soon as a step's best candidate is EOS and nbest "
        "hypotheses have ended (OpenNMT-py's and JoeyNMT's rule): fewer steps, but a longer hypothesis that "
        "would have scored better can be missed.",
        choices=["bound", "top"],
        short=(
            "bound: stop a sentence once no open hypothesis can win; top: once a step's best "
            "candidate is EOS, as OpenNMT-py and JoeyNMT (faster, may miss a better hypothesis)."
        ),
    )
    batch_tokens: int = option(
        4000, "Source tokens per decoding batch.", ge=1, short="Padded source tokens per search batch."
    )
    batch_sentences: int = option(
        0,
        "At most this many sentences per decoding batch (0: no limit, batch_tokens alone cuts). With a large "
        "batch_tokens, batches of this many sentences, as OpenNMT-py's -batch_type sents.",
        ge=0,
        short="At most this many sentences per search batch, 0: no limit.",
    )
    lexical_shortlist: bool = option(
        False,
        "Score only each sentence's lexical candidates (the run's lexical_shortlist.npz, built by "
        "`seq2seq lexical-shortlist RUN`): a smaller output layer, an approximate search; faster where a "
        "batch's lists are small against the vocabulary (large vocabularies, few sentences at a time), not "
        "in batches of 64 at 4,000-8,000 pieces (docs/performance.md).",
        short=(
            "Score only each sentence's lexical candidates (`seq2seq lexical-shortlist RUN` "
            "builds them): approximate; faster with large vocabularies or few sentences."
        ),
    )
    max_src_tokens: int = option(
        256,
        "translate and eval --model cut longer sources to this many pieces: search time and memory grow "
        "with the source length.",
        ge=1,
        short="Longer sources are cut to this many pieces (bounds time and memory).",
    )
    precision: str = option(
        "auto",
        "auto: bf16 autocast on GPU, fp32 on CPU. fp32 keeps results independent of the batch; bf16 "
        "measured faster on a CPU with AVX-512 BF16 and slower on others, and on the GPUs measured its "
        "search steps took from 17% less to 29% more time than fp32's; tf32 (search on a GPU) runs fp32 "
        "with the matrix products and cuDNN's RNNs on TF32 tensor cores; int8 (CPU only, search only: "
        "translate, eval, serve, the Python API) runs the decoder's products with int8 weights, one "
        "scale per row (docs/performance.md).",
        choices=["auto", "fp32", "tf32", "bf16", "int8"],
        short=(
            "auto: bf16 on GPU, fp32 on CPU; bf16 pays on some CPUs only; tf32: fp32 on TF32 tensor cores "
            "(GPU); int8: CPU search with int8 weights."
        ),
    )
    compile: bool = option(
        False,
        "Run the additive attention's per-step work through torch.compile in `translate` and `eval` "
        "beam search (see train.compile), after seconds of compiling: on the GPUs measured a search step "
        "took from 17% less to 29% more time (docs/performance.md); greedy search gains nothing and never "
        "compiles.",
        short=(
            "Run the additive attention through torch.compile (beam search; measured both faster and "
            "slower); greedy never compiles."
        ),
    )
    cuda_graphs: str = option(
        "auto",
        "Replay the search's decoder step from CUDA graphs, so that the GPU runs a step's small kernels "
        "without the CPU launching each: one graph per shape, captured during a call to translate (a "
        "batch's source padded to a multiple of 8 pieces, the sentences still searching rounded up to one "
        "of 4 sizes per doubling; docs/gpu.md). auto: on a CUDA device, for one model without a lexical "
        f"shortlist, in a search of at least {GRAPH_AUTO_SENTENCES} sentences (not a server's micro-batch); "
        "on: the first two "
        "alike, an error elsewhere, and any number of sentences; off: never.",
        choices=["auto", "on", "off"],
        short=(
            "Replay the search's decoder step from CUDA graphs (auto: on a GPU, one model, no shortlist, "
            f"{GRAPH_AUTO_SENTENCES} sentences or more)."
        ),
    )
    replace_unk: bool = option(
        False,
        "Replace <unk> by the most attended source word (word vocabularies).",
        short="Replace each <unk> by the most attended source word.",
    )
    unk_dictionary: str = option(
        "",
        "Optional source->target word dictionary for replace_unk (TSV).",
        path=True,
        short="TSV source word<TAB>target word; implies --replace-unk.",
    )

    def check(self, where: str) -> None:
        """The rule between keys that the per-key rules cannot express."""
        if self.nbest > self.beam_size:
            raise UserError(
                f"{where}: `decode.nbest` = {self.nbest} exceeds `decode.beam_size` = {self.beam_size}: "
                "a beam of k finishes at most k hypotheses"
            )


def check_edges(edges: Sequence[int], key: str = "eval.buckets") -> list[int]:
    """The edges as a list, when they make buckets; `key` names them in the error (a config's key, or
    where the caller set it)."""
    edges = list(edges)
    if not edges or edges[0] != 0 or any(low >= high for low, high in pairwise(edges)):
        raise UserError(
            f"bucket edges {edges}: expected strictly increasing word counts starting at 0, e.g. 0,10,20 "
            f"({key})"
        )
    return edges


@dataclass
class EvalConfig:
    """BLEU/chrF by sentence length, as in Bahdanau et al. 2014, Fig. 2."""

    buckets: list[int] = option(
        [0, 10, 20, 30, 40, 50, 60],
        "Bucket edges in words; bucket i is [edge_i, edge_i+1), the last is open.",
        short="Bucket edges in words. Bucket i is [edge_i, edge_i+1) and the last is open: with 0,10,20 a "
        "9-word sentence is in 0-10, a 10-word one in 10-20, a 25-word one in 20+.",
    )
    bucket_by: str = option(
        "source",
        "Length used for bucketing.",
        choices=["source", "reference"],
        short="Whose length picks the bucket: the source's or the reference's.",
    )
    words: str = option(
        "whitespace",
        "How bucket lengths count words: white-space separated, or Moses-tokenised (the paper's unit).",
        choices=["whitespace", "moses"],
        short="How lengths count words: white-space separated, or Moses-tokenised (the paper's unit).",
    )
    words_lang: str = option(
        "",
        "With words: moses, the language of the bucketed side ('': the trained runs' own, from their data "
        "section).",
        short="With --words moses: the language of the bucketed side (none: the --model runs' own).",
    )
    bootstrap: int = option(
        1000,
        "Bootstrap resamples for the 95% confidence interval and the paired test (0: none).",
        ge=0,
        short="Bootstrap resamples for the 95% BLEU interval (0: none).",
    )
    significance: str = option(
        "paired-bs",
        "Paired test of two systems' BLEU difference (as sacrebleu's): bootstrap resampling or "
        "approximate randomization, with `bootstrap` resamples or trials.",
        choices=["paired-bs", "paired-ar"],
        short="Paired test of BLEU differences per bucket, as sacrebleu's: bootstrap resampling (paired-bs) "
        "or approximate randomization (paired-ar), with --bootstrap resamples or trials.",
    )
    baseline: str = option(
        "",
        "The label of the system every other one is compared with ('': every pair of systems).",
        short="Compare every other system with this one (none: every pair of systems).",
    )
    seed: int = option(12345, "Seed of the bootstrap.", ge=0)
    min_bucket_size: int = option(
        30,
        "Buckets with fewer sentences are flagged as unreliable.",
        ge=0,
        short="Flag buckets with fewer sentences.",
    )
    lowercase: bool = option(
        False,
        "Case-insensitive BLEU and chrF (sacrebleu's -lc; the signatures say case:lc); on by itself when a "
        "trained run writes lowercased text (data.tokenize: task).",
        short="Case-insensitive BLEU and chrF (sacrebleu's -lc; the signatures say case:lc). On by itself "
        "when a --model run writes lowercased text (data.tokenize: task).",
    )
    moses_bleu: str = option(
        "",
        "Also report BLEU-moses in this target language ('': not): BLEU of text tokenised by the Moses "
        "tokenizer, with no further tokenisation and no smoothing (the paper's multi-bleu.perl setting).",
        short="Also report BLEU-moses: BLEU of text tokenised by the Moses tokenizer for target language "
        "LANG, with no further tokenisation and no smoothing (the paper's multi-bleu.perl setting).",
    )
    task_ref: str = option(
        "",
        "Also report BLEU-task, a shared task's metric, against this file ('': not): BLEU of the hypotheses "
        "lowercased, punctuation-normalised and Moses-tokenised with escaping, against the references as "
        "the task processed them (line-aligned with the references, e.g. Multi30k's *.lc.norm.tok.fr); no "
        "smoothing.",
        path=True,
        short="Also report BLEU-task, a shared task's metric: BLEU of the hypotheses lowercased, "
        "punctuation-normalised and Moses-tokenised with escaping, against FILE, the references as the "
        "task processed them (line-aligned with --ref, e.g. Multi30k's *.lc.norm.tok.fr); no smoothing.",
    )
    task_lang: str = option(
        "",
        "With task_ref: the language of the task's references ('': the trained runs' target language).",
        short="With --task-ref: the references' language (none: the --model runs' target language).",
    )
    align_threshold: float = option(
        0.3,
        "`seq2seq align --method threshold`: link every word pair whose attention is at least this.",
        ge=0,
        le=1,
        short="For --method threshold.",
    )

    def check(self, where: str) -> None:
        """The edges must make buckets: every scoring command would refuse them, after a whole training."""
        check_edges(self.buckets, f"eval.buckets in {where}")


@dataclass
class Config:
    """One experiment: data -> vocab -> model -> train -> decode -> eval."""

    name: str = option("experiment", "Experiment name; default data/<name> and runs/<name> folders.")
    seed: int = option(1, "Global seed (python, numpy, torch).", ge=0, le=SEED_MAX)
    data: DataConfig = section(DataConfig, "Corpus.")
    vocab: VocabConfig = section(VocabConfig, "Vocabulary.")
    model: ModelConfig = section(ModelConfig, "Model.")
    train: TrainConfig = section(TrainConfig, "Training.")
    decode: DecodeConfig = section(DecodeConfig, "Decoding.")
    eval: EvalConfig = section(
        EvalConfig,
        "Evaluation: what `seq2seq eval --model RUN` and `seq2seq align` use for the options they are "
        "not given.",
    )

    def check(self, where: str) -> None:
        """A name is the default folders' last part: an empty one would make them data/ and runs/."""
        if not self.name.strip():
            raise UserError(f"{where}: `name` must not be empty (it names the data and run folders)")

    @property
    def data_dir(self) -> Path:
        return Path(self.data.dir) if self.data.dir else Path("data") / self.name

    @property
    def run_dir(self) -> Path:
        return Path(self.train.run_dir) if self.train.run_dir else Path("runs") / self.name
