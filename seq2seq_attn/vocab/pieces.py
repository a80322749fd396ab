"""sentencepiece vocabularies.

`build_vocab` trains one joint model or one model per language on `<data_dir>/train.{src,tgt}` and keeps
it in `<data_dir>/vocab/` with a manifest (the vocabulary settings and the sha256 of the files it was
trained on), so a second run does no work unless the data or the settings changed. Special ids are fixed
everywhere: pad=0, unk=1, bos=2, eos=3. `cache.py` encodes every split with it once, for training.

`build_vocab` and the cache hold the data folder's lock (io.py) while they write, and only then, so that
trainings which find the vocabulary and cache up to date can start side by side on one data folder.

The `word` model type is the paper's shortlist (Bahdanau et al. 2014: the 30k most frequent words, every
other word is <unk>). sentencepiece splits words on white space only, so punctuation stays attached to
words unless the corpus was tokenised beforehand. We encode words one by one (sentencepiece would merge a
run of unknown words into one <unk>), so each out-of-shortlist word is exactly one <unk>, as in the paper.

With `data.tokenize: moses` the training files are already Moses-tokenised (data/prepare.py), so the
models learn the paper's words; the vocabulary records it in its manifest, tokenises every raw line it
encodes and detokenises what it decodes, so the rest of the code, and the user, handle the corpus' text.
`data.tokenize: task` does the same with a shared task's processing (lowercased, punctuation normalised,
tokenised): what the model writes is then lowercased, detokenised text (`Vocab.lowercases`).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import sentencepiece as spm

from ..config import Config, DataConfig, VocabConfig, to_dict
from ..config.constants import SIDES
from ..console import info
from ..data import moses
from ..errors import UserError
from ..io import atomic_write, exclusive, read_json, sha256_file, sha256_text, write_json

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")
UNK_SURFACE = "<unk>"  # how decode_tgt shows an unknown token
SAMPLING_SEED = 1234  # seed of sentencepiece's sampling of `input_sentence_size` sentences
WORD_BOUNDARY = "\u2581"  # sentencepiece's "▁", which starts every word


def word_of_piece(pieces: Sequence[str]) -> list[int]:
    """The 0-based whitespace word each piece belongs to: a word starts at a piece that begins with
    WORD_BOUNDARY (or at the first piece). ['▁new', 'ton', '▁apple'] -> [0, 0, 1]."""
    words, word = [], -1
    for piece in pieces:
        if piece.startswith(WORD_BOUNDARY) or word < 0:
            word += 1
        words.append(word)
    return words


def vocab_dir(config: Config) -> Path:
    return config.data_dir / "vocab"


def resolve_threads(threads: int) -> int:
    """0 means every core this process may run on."""
    return threads or len(os.sched_getaffinity(0))


# ----------------------------------------------------------------------------------------------------------
# the vocabulary


class Vocab:
    """One joint or two separate sentencepiece models, behind the small API the rest of the code uses."""

    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    def __init__(
        self,
        directory: Path,
        model_type: str,
        joint: bool,
        threads: int = 0,
        text: tuple[moses.Pipeline, moses.Pipeline] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.model_type = model_type
        self.joint = joint
        self.text = text  # (source, target) Moses processing of the model's text, None: the corpus' own
        self.threads = resolve_threads(threads)
        self.model_files = [self.directory / f"{name}.model" for name in _model_names(joint)]
        for file in self.model_files:
            if not file.is_file():
                raise UserError(f"{file}: vocabulary model not found; run `seq2seq vocab CONFIG`")
        self._src = _processor(self.model_files[0])
        self._tgt = self._src if joint else _processor(self.model_files[1])
        self._fingerprint = _fingerprint(self.model_files)
        # word models: piece -> id, to encode word by word (see the module docstring)
        word_level = model_type == "word"
        self._word_ids = {side: _piece_ids(self._processor(side)) for side in SIDES} if word_level else {}

    @classmethod
    def load(cls, vocab_dir: Path, threads: int = 0) -> Vocab:
        """The vocabulary in `vocab_dir` (models + manifest.json), as written by `build_vocab`."""
        manifest = Path(vocab_dir) / "manifest.json"
        if not manifest.is_file():
            raise UserError(f"{manifest}: no vocabulary manifest; run `seq2seq vocab CONFIG`")
        found = read_json(manifest)
        if not isinstance(found, dict) or not isinstance(found.get("config"), dict):
            raise UserError(
                f"{manifest}: not a vocabulary manifest (no `config`); run `seq2seq vocab CONFIG`"
            )
        settings, text = found["config"], found.get("tokenize")
        pipelines = (
            (
                moses.text_pipeline(text["scheme"], text["src_lang"]),
                moses.text_pipeline(text["scheme"], text["tgt_lang"]),
            )
            if text
            else None
        )
        return cls(Path(vocab_dir), settings["type"], settings["joint"], threads, pipelines)

    @property
    def lowercases(self) -> bool:
        """True when the model reads and writes lowercased text (`data.tokenize: task`): its output is
        then scored case-insensitively."""
        return self.text is not None and self.text[1].lowercase

    @property
    def src_size(self) -> int:
        return self._src.get_piece_size()

    @property
    def tgt_size(self) -> int:
        return self._tgt.get_piece_size()

    def fingerprint(self) -> str:
        """sha256 of the model files: a checkpoint records it and refuses any other vocabulary."""
        return self._fingerprint

    def encode_src(self, lines: Sequence[str], tokenized: bool = False) -> list[list[int]]:
        """Ids of raw lines (Moses-processed first for a Moses vocabulary), or of `tokenized` lines."""
        return self._encode("src", lines if tokenized else self.tokenize("src", lines))

    def encode_tgt(self, lines: Sequence[str], tokenized: bool = False) -> list[list[int]]:
        return self._encode("tgt", lines if tokenized else self.tokenize("tgt", lines))

    def tokenize(self, side: str, lines: Sequence[str]) -> Sequence[str]:
        """`lines` as the model's text: Moses-processed for a Moses vocabulary, else unchanged."""
        if self.text is None:
            return lines
        # "<unk>" in a model's own output stays one word when it is read back (scoring, rescoring)
        return self.text[SIDES.index(side)](lines, keep=(UNK_SURFACE,))

    def detokenize(self, text: str) -> str:
        """The model's target text as the corpus writes it (undoes `tokenize`)."""
        return moses.detokenize(text, self.text[1].lang) if self.text else text

    def decode_tgt(self, ids: Sequence[int]) -> str:
        """Detokenised text; pad/bos/eos are dropped and unknown tokens show as `<unk>`."""
        return self.detokenize(self.tgt_text(ids))

    def tgt_text(self, ids: Sequence[int]) -> str:
        """The pieces as the model's text (Moses-tokenised for a Moses vocabulary); see `decode_tgt`."""
        ids = [int(i) for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID)]
        if self.model_type == "word":
            pieces = (UNK_SURFACE if i == UNK_ID else self._tgt.id_to_piece(i) for i in ids)
            return " ".join(piece.removeprefix(WORD_BOUNDARY) for piece in pieces)
        return self._tgt.decode(ids)  # the models are trained with unk_surface=<unk>

    def src_pieces(self, line: str) -> list[str]:
        """The pieces `encode_src([line])` gives ids for, as text (attention labels, UNK replacement)."""
        (line,) = self.tokenize("src", [line])
        if self.model_type == "word":
            return _words(self._src.normalize(line))
        return self._src.encode(line, out_type=str)

    def tgt_pieces(self, ids: Sequence[int]) -> list[str]:
        return [self._tgt.id_to_piece(int(i)) for i in ids]

    def copy_to(self, dest: Path) -> None:
        """Copy the models and manifest (not the token cache) into `dest`, e.g. a run directory."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        for file in [*self.model_files, self.directory / "manifest.json"]:
            with atomic_write(dest / file.name, "wb") as out, open(file, "rb") as source:
                shutil.copyfileobj(source, out)

    def _processor(self, side: str) -> spm.SentencePieceProcessor:
        return self._src if side == "src" else self._tgt

    def _encode(self, side: str, lines: Sequence[str]) -> list[list[int]]:
        processor, lines = self._processor(side), list(lines)
        if self.model_type != "word":
            return processor.encode(lines, out_type=int, num_threads=self.threads)
        # One id per word: sentencepiece itself would merge a run of unknown words into a single <unk>.
        ids = self._word_ids[side]
        return [[ids.get(word, UNK_ID) for word in _words(text)] for text in processor.normalize(lines)]


def _processor(file: Path) -> spm.SentencePieceProcessor:
    """The sentencepiece model in `file`; one that does not load is a one-line error naming it."""
    try:
        return spm.SentencePieceProcessor(model_file=str(file))
    except (RuntimeError, OSError) as err:
        raise UserError(f"{file}: not a readable sentencepiece model ({err})") from None


def _model_names(joint: bool) -> tuple[str, ...]:
    return ("joint",) if joint else SIDES


def _piece_ids(processor: spm.SentencePieceProcessor) -> dict[str, int]:
    return {processor.id_to_piece(i): i for i in range(processor.get_piece_size())}


def _words(normalized: str) -> list[str]:
    """'▁the▁cat' -> ['▁the', '▁cat'] (sentencepiece's normal form marks each word start with ▁)."""
    return normalized.replace(WORD_BOUNDARY, " " + WORD_BOUNDARY).split()


def _fingerprint(files: Sequence[Path]) -> str:
    return sha256_text(" ".join(f"{file.name}={sha256_file(file)}" for file in files))


# ----------------------------------------------------------------------------------------------------------
# training


def build_vocab(config: Config, force: bool = False) -> Vocab:
    """Train the vocabulary when it is missing or stale (settings or training data changed)."""
    folder = vocab_dir(config)
    inputs = [data_file(config, f"train.{side}") for side in SIDES]
    wanted = {
        "config": _settings(config.vocab),
        "data": {file.name: sha256_file(file) for file in inputs},
        "tokenize": _tokenize_settings(config.data),
    }
    manifest_file = folder / "manifest.json"
    if not force and manifest_file.is_file():
        manifest = read_json(manifest_file)
        current = {key: manifest.get(key) for key in wanted}
        models = [folder / f"{name}.model" for name in manifest["models"]]
        intact = all(model.is_file() for model in models) and _fingerprint(models) == manifest["fingerprint"]
        if current == wanted and intact:  # (a damaged or replaced model is trained again)
            info(f"vocab: {folder} is up to date")
            return Vocab.load(folder, config.vocab.threads)

    with exclusive(config.data_dir):  # one writer at a time
        folder.mkdir(parents=True, exist_ok=True)
        manifest_file.unlink(missing_ok=True)  # a run killed mid-training must not leave a "current" vocab
        names = _model_names(config.vocab.joint)
        for name in names:
            sources = inputs if config.vocab.joint else [file for file in inputs if file.suffix == f".{name}"]
            info(
                f"vocab: training {config.vocab.type} model {name} ({config.vocab.size} pieces) on "
                + " + ".join(file.name for file in sources)
            )
            _train_model(sources, folder, name, config.vocab)
        for stale in set(_model_names(not config.vocab.joint)) - set(names):
            for suffix in (".model", ".vocab"):
                (folder / f"{stale}{suffix}").unlink(missing_ok=True)
        models = [folder / f"{name}.model" for name in names]
        write_json(manifest_file, {**wanted, "models": list(names), "fingerprint": _fingerprint(models)})
    return Vocab.load(folder, config.vocab.threads)


def data_file(config: Config, name: str) -> Path:
    """`<data_dir>/<name>`, which `seq2seq data prepare` writes."""
    file = config.data_dir / name
    if not file.is_file():
        raise UserError(f"{file}: prepared data not found; run `seq2seq data prepare CONFIG` first")
    return file


def _tokenize_settings(data: DataConfig) -> dict | None:
    """How the text the vocabulary reads is tokenised (None: not at all), as `Vocab.load` reads it back."""
    if data.tokenize == "none":
        return None
    return {"scheme": data.tokenize, "src_lang": data.src_lang, "tgt_lang": data.tgt_lang}


def _settings(vocab: VocabConfig) -> dict:
    """The settings a trained model depends on (threads only change the speed)."""
    return {key: value for key, value in to_dict(vocab).items() if key != "threads"}


def _train_model(inputs: list[Path], folder: Path, name: str, vocab: VocabConfig) -> None:
    """Train `<folder>/<name>.model` and `.vocab`; each file appears atomically when complete."""
    if any("," in str(file) for file in inputs):  # sentencepiece splits its input list on commas
        raise UserError(f"{inputs[0].parent}: sentencepiece cannot read paths containing a comma")
    prefix = folder / f".{name}.training"
    spm.set_random_generator_seed(SAMPLING_SEED)
    try:
        spm.SentencePieceTrainer.train(
            input=[str(file) for file in inputs],
            model_prefix=str(prefix),
            model_type=vocab.type,
            vocab_size=vocab.size,
            character_coverage=vocab.character_coverage,
            input_sentence_size=vocab.input_sentence_size,
            shuffle_input_sentence=True,
            num_threads=resolve_threads(vocab.threads),
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            pad_piece=SPECIAL_PIECES[PAD_ID],
            unk_piece=SPECIAL_PIECES[UNK_ID],
            bos_piece=SPECIAL_PIECES[BOS_ID],
            eos_piece=SPECIAL_PIECES[EOS_ID],
            unk_surface=UNK_SURFACE,
            minloglevel=2,  # errors only: they come back as exceptions
        )
    except RuntimeError as err:
        raise _training_error(str(err), inputs, vocab) from None
    for suffix in (".model", ".vocab"):
        os.replace(f"{prefix}{suffix}", folder / f"{name}{suffix}")


def _training_error(message: str, inputs: list[Path], vocab: VocabConfig) -> UserError:
    """sentencepiece's error, said in terms of the config keys a user can change."""
    files = " + ".join(str(file) for file in inputs)
    if match := re.search(r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)", message):
        return UserError(
            f"vocab.size={vocab.size} is too large for {files}: this data supports at most "
            f"{match[1]} {vocab.type} pieces; set vocab.size <= {match[1]}"
        )
    if match := re.search(r"smaller than required_chars\. \d+ vs (\d+)", message):
        return UserError(
            f"vocab.size={vocab.size} is too small for {files}: its characters alone need "
            f"{match[1]} pieces; raise vocab.size or lower vocab.character_coverage"
        )
    if "!sentences_.empty()" in message or "all_chars_count" in message:
        return UserError(
            f"{files}: no sentence to train the vocabulary on (blank lines, or every line longer than "
            "sentencepiece's 4192 bytes)"
        )
    said = message.rsplit("] ", 1)[-1].strip() or " ".join(message.split())  # a failed check: itself
    return UserError(f"{files}: sentencepiece training failed: {said}")
