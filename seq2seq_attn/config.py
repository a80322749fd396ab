"""The experiment config: one YAML file with sections data, vocab, model, train, decode and eval.

The schema is a tree of dataclasses. Every key carries its documentation and its allowed range in the
field metadata, so validation messages, `seq2seq config --keys` and `docs/config.md` all come from one
place. Validation is strict: an unknown key is an error with a "did you mean" suggestion, and a value of
the wrong type or out of range names the key path and what was expected.

Paths written in a config file are relative to that file's folder. Output folders left empty default
to `data/<name>` and `runs/<name>` under the current working directory.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from .data import SPLITS
from .errors import UserError

T = TypeVar("T")


def option(default: Any, doc: str, **rules: Any) -> Any:
    """A documented config key. `rules`: choices=[...], ge=, gt=, le=, path=True (resolved vs. config)."""
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata={"doc": doc, **rules})
    return dataclasses.field(default=default, metadata={"doc": doc, **rules})


def section(cls: type, doc: str) -> Any:
    return dataclasses.field(default_factory=cls, metadata={"doc": doc})


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
    seed: int = option(1234, "Seed of the generator: same seed, same bytes; each split derives its own.")


@dataclass
class SplitFiles:
    """One split of a local corpus: a source and a target file (line-aligned, `.gz` allowed) or one TSV."""

    src: str = option("", "Source-language text file, one segment per line (.gz read directly).", path=True)
    tgt: str = option(
        "", "Target-language text file, line-aligned with `src` (.gz read directly).", path=True
    )
    tsv: str = option("", "Alternative to src/tgt: one TSV file, source<TAB>target per line.", path=True)


@dataclass
class LocalConfig:
    """Line-aligned plain-text corpus files on disk."""

    train: SplitFiles = section(SplitFiles, "Training split.")
    valid: SplitFiles = section(SplitFiles, "Validation (dev) split.")
    test: SplitFiles = section(SplitFiles, "Test split.")


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
    valid_split: str = option("validation", "Split used for validation (the paper: newstest2012+2013).")
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

    source: str = option("synthetic", "Corpus source.", choices=["synthetic", "local", "huggingface"])
    dir: str = option(
        "", "Output folder for prepared data ('' : data/<name> under the working directory).", path=True
    )
    src_lang: str = option("en", "Source language code (names files and the translation field).")
    tgt_lang: str = option("fr", "Target language code.")
    synthetic: SyntheticConfig = section(SyntheticConfig, "Settings for source: synthetic.")
    local: LocalConfig = section(LocalConfig, "Settings for source: local.")
    huggingface: HuggingFaceConfig = section(HuggingFaceConfig, "Settings for source: huggingface.")
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
    character_coverage: float = option(1.0, "Share of characters covered by the model.", gt=0, le=1)
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
        "attend_then_update",
        "RNNsearch / RNNencdec step order. attend_then_update (Appendix A.2.2): s_{i-1} queries "
        "attention and feeds the deep output, then s_i = f(s_{i-1}, y_{i-1}, c_i), so the state that "
        "predicts y_i has not read y_{i-1}. update_then_attend (the authors' GroundHog code): the state "
        "first reads y_{i-1} with the previous context c_{i-1}, then queries attention and feeds the "
        "deep output. See docs/model.md.",
        choices=["attend_then_update", "update_then_attend"],
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
        "auto: bf16 autocast on GPU, fp32 on CPU (bf16 pays on some CPUs only: docs/performance.md).",
        choices=["auto", "fp32", "bf16"],
    )
    compile: bool = option(
        False,
        "Run the additive attention's per-step work (and its gradient) through torch.compile: "
        "RNNsearch updates 10-15% faster on a CPU (docs/performance.md), after seconds of compiling; needs a "
        "C++ compiler (Triton on a GPU). Validation's search uses it too.",
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
    bucket_pool: int = option(
        100, "Batches per sorting pool: larger means less padding, less randomness.", ge=1
    )
    optimizer: str = option("adam", "Optimiser (paper: adadelta).", choices=["adam", "adadelta", "sgd"])
    learning_rate: float = option(1e-3, "Peak learning rate (adadelta: 1.0).", gt=0)
    adam_betas: list[float] = option([0.9, 0.999], "Adam beta1, beta2.", length=2)
    adadelta_rho: float = option(0.95, "Adadelta decay rho (paper: 0.95).", gt=0, lt=1)
    adadelta_eps: float = option(1e-6, "Adadelta epsilon (paper: 1e-6).", gt=0)
    momentum: float = option(0.0, "SGD momentum.", ge=0, lt=1)
    weight_decay: float = option(0.0, "L2 weight decay.", ge=0)
    scheduler: str = option(
        "constant", "Learning-rate schedule.", choices=["constant", "plateau", "inverse_sqrt"]
    )
    warmup_steps: int = option(0, "Linear warm-up steps (inverse_sqrt; also applied before constant).", ge=0)
    plateau_factor: float = option(
        0.5, "plateau: multiply the rate by this when the dev metric stalls.", gt=0, lt=1
    )
    plateau_patience: int = option(2, "plateau: validations without improvement before decaying.", ge=0)
    min_learning_rate: float = option(1e-6, "Lower bound on the learning rate.", ge=0)
    clip_norm: float = option(1.0, "Clip the global gradient norm to this (paper: 1; 0: off).", ge=0)
    label_smoothing: float = option(0.0, "Label smoothing of the cross-entropy.", ge=0, lt=1)
    loss_norm: str = option(
        "tokens",
        "What the batch's summed loss is divided by before backward: its target tokens (mean token loss) "
        "or its sentences (sum over each sentence, mean over sentences: the RNNsearch authors' code; with "
        "Adadelta and clip_norm 1 the gradient is about mean-target-length times larger).",
        choices=["tokens", "sentences"],
    )
    max_steps: int = option(0, "Stop after this many updates (0: no limit).", ge=0)
    max_epochs: int = option(0, "Stop after this many epochs (0: no limit).", ge=0)
    max_minutes: float = option(0.0, "Wall-clock training budget in minutes (0: no limit).", ge=0)
    log_every: int = option(100, "Updates between log lines.", ge=1)
    validate_every: int = option(
        1000, "Updates between validations (dev loss and BLEU) and checkpoints.", ge=1
    )
    checkpoint_every: int = option(
        0, "Extra 'latest' checkpoints every N updates for resume (0: at validation).", ge=0
    )
    valid_bleu: bool = option(True, "Compute dev BLEU at validation (else loss only).")
    valid_max_sentences: int = option(0, "Translate at most this many dev sentences for BLEU (0: all).", ge=0)
    valid_beam: int = option(
        1, "Beam width for dev BLEU (1: greedy, fast; the decode section is for test).", ge=1
    )
    early_stop_metric: str = option(
        "bleu", "Metric for best checkpoint and early stopping.", choices=["bleu", "loss"]
    )
    patience: int = option(0, "Validations without improvement before stopping (0: never).", ge=0)
    keep_best: int = option(3, "Best checkpoints kept besides the latest.", ge=1)
    max_nonfinite: int = option(20, "Consecutive non-finite losses/gradients that stop the run.", ge=1)


# ----------------------------------------------------------------------------------------------------------
# decoding and evaluation


@dataclass
class DecodeConfig:
    """Beam search settings used by validation, `translate` and `eval --model`."""

    beam_size: int = option(5, "Beam width (1: greedy).", ge=1)
    nbest: int = option(1, "Hypotheses returned per sentence.", ge=1)
    length_penalty: str = option(
        "gnmt", "Length normalisation of scores.", choices=["none", "average", "gnmt"]
    )
    alpha: float = option(0.6, "GNMT length-penalty exponent alpha.", ge=0)
    max_len_a: float = option(1.5, "Maximum output length is a*src_len + b (tokens).", ge=0)
    max_len_b: int = option(10, "See max_len_a.", ge=1)
    min_len: int = option(0, "Minimum output length in tokens before EOS is allowed.", ge=0)
    min_len_a: float = option(
        0.0,
        "Minimum output length relative to the source: EOS is forbidden before ceil(a * src_len) tokens "
        "(the larger of this and min_len applies; the RNNsearch authors' beam search: 0.5).",
        ge=0,
    )
    no_repeat_ngram: int = option(0, "Forbid repeating any n-gram of this size (0: off).", ge=0)
    stopping: str = option(
        "bound",
        "When a sentence's search ends besides running out of open hypotheses or reaching the maximum "
        "length. bound: once no open hypothesis can still beat the nbest-th finished one, so stopping "
        "early never changes the result. top: as soon as a step's best candidate is EOS and nbest "
        "hypotheses have ended (OpenNMT-py's and JoeyNMT's rule): fewer steps, but a longer hypothesis that "
        "would have scored better can be missed.",
        choices=["bound", "top"],
    )
    batch_tokens: int = option(4000, "Source tokens per decoding batch.", ge=1)
    batch_sentences: int = option(
        0,
        "At most this many sentences per decoding batch (0: no limit, batch_tokens alone cuts). With a large "
        "batch_tokens, batches of this many sentences, as OpenNMT-py's -batch_type sents.",
        ge=0,
    )
    max_src_tokens: int = option(
        256,
        "translate and eval --model cut longer sources to this many pieces: search time and memory grow "
        "with the source length.",
        ge=1,
    )
    precision: str = option(
        "auto",
        "auto: bf16 autocast on GPU, fp32 on CPU. fp32 keeps results independent of the batch; bf16 is "
        "faster on GPUs, and on some CPUs with AVX-512 BF16 but not all (docs/performance.md).",
        choices=["auto", "fp32", "bf16"],
    )
    compile: bool = option(
        False,
        "Run the additive attention's per-step work through torch.compile in `translate` and `eval` "
        "beam search (see train.compile): 8-25% faster on a CPU after ~4 s of compiling; greedy search "
        "gains nothing and never compiles.",
    )
    replace_unk: bool = option(False, "Replace <unk> by the most attended source word (word vocabularies).")
    unk_dictionary: str = option(
        "", "Optional source->target word dictionary for replace_unk (TSV).", path=True
    )

    def check(self, where: str) -> None:
        """The rule between keys that the per-key rules cannot express."""
        if self.nbest > self.beam_size:
            raise UserError(
                f"{where}: `decode.nbest` = {self.nbest} exceeds `decode.beam_size` = {self.beam_size}: "
                "a beam of k finishes at most k hypotheses"
            )


@dataclass
class EvalConfig:
    """BLEU/chrF by sentence length, as in Bahdanau et al. 2014, Fig. 2."""

    buckets: list[int] = option(
        [0, 10, 20, 30, 40, 50, 60],
        "Bucket edges in words; bucket i is [edge_i, edge_i+1), the last is open.",
    )
    bucket_by: str = option("source", "Length used for bucketing.", choices=["source", "reference"])
    bootstrap: int = option(
        1000,
        "Bootstrap resamples for the 95% confidence interval and the paired test (0: none).",
        ge=0,
    )
    significance: str = option(
        "paired-bs",
        "Paired test of two systems' BLEU difference (as sacrebleu's): bootstrap resampling or "
        "approximate randomization, with `bootstrap` resamples or trials.",
        choices=["paired-bs", "paired-ar"],
    )
    seed: int = option(12345, "Seed of the bootstrap.", ge=0)
    min_bucket_size: int = option(30, "Buckets with fewer sentences are flagged as unreliable.", ge=0)
    align_threshold: float = option(
        0.3,
        "`seq2seq align --method threshold`: link every word pair whose attention is at least this.",
        ge=0,
        le=1,
    )


@dataclass
class Config:
    """One experiment: data -> vocab -> model -> train -> decode -> eval."""

    name: str = option("experiment", "Experiment name; default data/<name> and runs/<name> folders.")
    seed: int = option(1, "Global seed (python, numpy, torch).")
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

    @property
    def data_dir(self) -> Path:
        return Path(self.data.dir) if self.data.dir else Path("data") / self.name

    @property
    def run_dir(self) -> Path:
        return Path(self.train.run_dir) if self.train.run_dir else Path("runs") / self.name


# ----------------------------------------------------------------------------------------------------------
# loading, overriding, validating


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config, apply `key.path=value` overrides, validate, and resolve relative paths."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: config file not found")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(f"{path}{where}: invalid YAML: {problem}") from None
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not valid UTF-8 ({err.reason} at byte {err.start})") from None
    if raw is None or raw == {}:  # a file not saved yet or cut short, not a wish for every default
        raise UserError(f"{path}: empty config; a config must set at least `name`")
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a config must be a mapping of sections, got {type(raw).__name__}")
    for item in overrides:
        apply_override(raw, item)
    config = from_dict(raw, where=str(path))
    resolve_paths(config, path.parent)
    return config


def apply_override(raw: dict, item: str) -> None:
    """Apply one `--set a.b.c=value` to the raw mapping; the value is typed like YAML."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise UserError(f"--set {item!r}: expected KEY=VALUE, e.g. train.learning_rate=3e-4")
    parts = key.strip().split(".")
    node = raw
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise UserError(f"--set {key}: {part!r} is not a section")
        node = child
    try:
        node[parts[-1]] = yaml.safe_load(value)
    except yaml.YAMLError:
        node[parts[-1]] = value


def from_dict(raw: dict, where: str = "config") -> Config:
    """Build and validate a Config from a plain mapping (as read from YAML)."""
    return _build(Config, raw, prefix="", where=where)


def _all_keys(cls: type, prefix: str = "") -> list[str]:
    keys = []
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        keys.append(path)
        if dataclasses.is_dataclass(_hints(cls)[f.name]):
            keys.extend(_all_keys(_hints(cls)[f.name], path + "."))
    return keys


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _suggest(key_path: str) -> str:
    candidates = _all_keys(Config)
    leaf = key_path.rsplit(".", 1)[-1]
    match = difflib.get_close_matches(key_path, candidates, n=1, cutoff=0.6)
    if not match:  # a key put in the wrong section: match on the leaf name alone
        by_leaf = {k.rsplit(".", 1)[-1]: k for k in candidates}
        leaf_match = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.7)
        match = [by_leaf[leaf_match[0]]] if leaf_match else []
    return f" (did you mean `{match[0]}`?)" if match else ""


def _build(cls: type, raw: Any, prefix: str, where: str) -> Any:
    label = prefix.rstrip(".") or "top level"
    if not isinstance(raw, dict):
        raise UserError(f"{where}: {label}: expected a mapping of keys, got {_kind(raw)}")
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in names:
            raise UserError(f"{where}: unknown key `{prefix}{key}`{_suggest(prefix + str(key))}")
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in raw:
            continue
        path = prefix + f.name
        if dataclasses.is_dataclass(hints[f.name]):
            values[f.name] = _build(hints[f.name], raw[f.name] or {}, path + ".", where)
        else:
            values[f.name] = _check_value(raw[f.name], hints[f.name], f.metadata, path, where)
    built = cls(**values)
    if hasattr(built, "check"):
        built.check(where)
    return built


def override(section: T, changes: dict[str, Any], prefix: str, options: dict[str, str]) -> T:
    """A copy of config section `section` (e.g. `config.decode`, prefix "decode.") with the changes that
    are not None applied, each checked as a value read from a config file; `options` names the
    command-line option of each key for the error message."""
    hints, fields = _hints(type(section)), {f.name: f for f in dataclasses.fields(section)}
    given = {key: value for key, value in changes.items() if value is not None}
    checked = {
        key: _check_value(value, hints[key], fields[key].metadata, prefix + key, options[key])
        for key, value in given.items()
    }
    result = dataclasses.replace(section, **checked)
    if hasattr(result, "check"):
        result.check(", ".join(options[key] for key in given) or "config")
    return result


def choices_enum(cls: type, key: str) -> type[enum.Enum]:
    """The schema's choices for key `key` of section `cls` as a str Enum, the type a typer option needs."""
    (field,) = [f for f in dataclasses.fields(cls) if f.name == key]
    choices = {choice: choice for choice in field.metadata["choices"]}
    return enum.Enum(f"{cls.__name__}.{key}", choices, type=str)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _check_value(value: Any, hint: Any, rules: dict, path: str, where: str) -> Any:
    def fail(expected: str) -> typing.NoReturn:
        raise UserError(f"{where}: `{path}` must be {expected}, got {value!r}")

    origin = typing.get_origin(hint)
    if origin in (list, types.GenericAlias) or hint is list:
        if not isinstance(value, list):
            fail(f"a list of {typing.get_args(hint)[0].__name__}")
        item_type = typing.get_args(hint)[0]
        items = [_check_scalar(v, item_type, fail) for v in value]
        if "length" in rules and len(items) != rules["length"]:
            fail(f"a list of {rules['length']} numbers")
        if "items" in rules and any(v not in rules["items"] for v in items):
            fail(f"a list drawn from {rules['items']}")
        return items
    value = _check_scalar(value, hint, fail)
    if "choices" in rules and value not in rules["choices"]:
        fail("one of " + ", ".join(repr(c) for c in rules["choices"]))
    _check_range(value, rules, fail)
    return value


def _check_scalar(value: Any, hint: Any, fail: Any) -> Any:
    if hint is bool:
        if not isinstance(value, bool):
            fail("true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            fail("an integer")
        return value
    if hint is float:
        if isinstance(value, str):  # YAML reads "1e-3" (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                fail("a number")
        if isinstance(value, bool) or not isinstance(value, int | float):
            fail("a number")
        return float(value)
    if hint is str:
        if value is None:
            return ""
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            fail("a string")
        return str(value)
    raise TypeError(f"unsupported config type {hint}")


_BOUNDS = {
    "ge": (">=", lambda v, b: v >= b),
    "gt": (">", lambda v, b: v > b),
    "le": ("<=", lambda v, b: v <= b),
    "lt": ("<", lambda v, b: v < b),
}


def _check_range(value: Any, rules: dict, fail: Any) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return
    bounds = [(name, rules[name]) for name in _BOUNDS if name in rules]
    if not all(_BOUNDS[name][1](value, bound) for name, bound in bounds):
        fail("a number " + " and ".join(f"{_BOUNDS[name][0]} {bound}" for name, bound in bounds))


def resolve_paths(config: Any, base: Path) -> None:
    """Make every non-empty path key absolute, relative to the config file's folder."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            resolve_paths(value, base)
        elif f.metadata.get("path") and value:
            path = Path(value).expanduser()
            setattr(config, f.name, str(path if path.is_absolute() else (base / path).resolve()))


def to_dict(config: Any) -> dict:
    return dataclasses.asdict(config)


def to_yaml(config: Any) -> str:
    return yaml.safe_dump(to_dict(config), sort_keys=False, allow_unicode=True)


def describe_keys(cls: type = Config, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key path, type, default, documentation) for every key, depth-first in schema order."""
    rows = []
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        path = prefix + f.name
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            rows.append((path, "section", "", f.metadata.get("doc", "")))
            rows.extend(describe_keys(hint, path + "."))
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        doc = f.metadata.get("doc", "")
        if "choices" in f.metadata:
            doc += " One of: " + ", ".join(f"`{c}`" for c in f.metadata["choices"]) + "."
        rows.append(
            (
                path,
                _type_name(hint),
                yaml.safe_dump(default, default_flow_style=True).strip().removesuffix("...").strip(),
                doc,
            )
        )
    return rows


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is list:
        return f"list[{typing.get_args(hint)[0].__name__}]"
    return hint.__name__


def config_markdown() -> str:
    """docs/config.md, generated from the schema (a test keeps the committed file in sync)."""
    lines = [
        "# Config reference",
        "",
        "Generated from `seq2seq_attn/config.py` by `seq2seq config --keys --format markdown`; do not edit.",
        "",
        "Paths are relative to the config file's folder. Override any key from the command line with",
        "`--set section.key=value` (typed like YAML), e.g. `--set train.learning_rate=3e-4`.",
        "",
        "| key | type | default | meaning |",
        "|---|---|---|---|",
    ]
    for key, kind, default, doc in describe_keys():
        if kind == "section":
            lines.append(f"| **`{key}`** | section | | {doc} |")
        else:
            lines.append(f"| `{key}` | {kind} | `{default}` | {doc} |")
    return "\n".join(lines) + "\n"
