"""Moses tokenisation (`data.tokenize: moses` or `task`, `eval.words: moses`): the training text is
tokenised once when prepared (lowercased and punctuation-normalised first for `task`), the vocabulary
processes what the model reads and detokenises what it writes, and length buckets can count the paper's
words."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import assert_one_line_error, make_run_dir, run_main, tiny_config

from seq2seq_attn.config import EvalConfig
from seq2seq_attn.data import moses
from seq2seq_attn.data.prepare import prepare
from seq2seq_attn.decoding.translate import Translator
from seq2seq_attn.errors import UserError
from seq2seq_attn.evaluation.metrics.bleu import bleu_metric
from seq2seq_attn.evaluation.metrics.by_length import evaluate
from seq2seq_attn.evaluation.metrics.inputs import System
from seq2seq_attn.evaluation.models.align import AlignmentCorpus, as_read, attention_scores
from seq2seq_attn.model import build_model
from seq2seq_attn.vocab.cache import build_cache, cache_stats, load_cache
from seq2seq_attn.vocab.pieces import Vocab, build_vocab

EN = ["the cat's mat", "a dog, a house.", "(big) red cat!", "it isn't the dog's"]
FR = ["l'homme", "le chat, le chien.", "c'est « rouge » !", "qu'il a couru"]


def test_tokenize_splits_punctuation_and_clitics_and_detokenize_undoes_it() -> None:
    assert moses.tokenize_line("L'homme, dit-il.", "fr") == "L' homme , dit-il ."
    assert moses.tokenize_line("the dog's bone, isn't it?", "en") == "the dog 's bone , isn 't it ?"
    for line, lang in [("L'homme, dit-il.", "fr"), ("the dog's bone, isn't it?", "en")]:
        assert moses.detokenize(moses.tokenize_line(line, lang), lang) == line
    assert moses.word_count("L'homme, dit-il.", "fr") == 5  # 2 white-space words


def test_tokenizing_twice_is_not_tokenizing_once() -> None:
    """Why every text is tokenised exactly once (the prepared training text is never tokenised again)."""
    once = moses.tokenize_line("l'homme", "fr")
    assert moses.tokenize_line(once, "fr") != once


def write_local_corpus(folder: Path, lines: int = 120) -> dict:
    """train/valid/test .en/.fr files of punctuated sentences; returns the data.local section."""
    rng = random.Random(0)
    folder.mkdir(parents=True, exist_ok=True)
    local = {}
    for split in ("train", "valid", "test"):
        picks = [rng.randrange(len(EN)) for _ in range(lines)]
        for lang, side, sentences in (("en", "src", EN), ("fr", "tgt", FR)):
            path = folder / f"{split}.{lang}"
            path.write_text("".join(sentences[i] + "\n" for i in picks), encoding="utf-8")
            local.setdefault(split, {})[side] = str(path)
    return local


def moses_config(tmp_path: Path, tokenize: str = "moses", **clean: object):
    local = write_local_corpus(tmp_path / "corpus")
    data = {"source": "local", "local": local, "tokenize": tokenize, "clean": {"max_words": 0, **clean}}
    return tiny_config(tmp_path, data=data, vocab={"size": 40, "threads": 1})


def test_prepare_tokenizes_the_training_split_only_and_says_so(tmp_path: Path) -> None:
    config = moses_config(tmp_path)
    manifest = prepare(config).manifest
    data = config.data_dir
    train_src = (data / "train.src").read_text(encoding="utf-8").splitlines()
    raw_src = Path(config.data.local.train.src).read_text(encoding="utf-8").splitlines()
    assert train_src == [moses.tokenize_line(line, "en") for line in raw_src]
    train_tgt = (data / "train.tgt").read_text(encoding="utf-8").splitlines()
    assert "c' est « rouge » !" in train_tgt  # the target in French
    for split in ("valid", "test"):  # what the model is given and scored against: the corpus' text
        assert (data / f"{split}.tgt").read_text() == Path(getattr(config.data.local, split).tgt).read_text()
    assert manifest["tokenize"] == "moses"
    assert [manifest["splits"][s]["tokenized"] for s in ("train", "valid", "test")] == [True, False, False]


def test_cleaning_counts_tokenized_words(tmp_path: Path) -> None:
    """'a dog, a house.' is 4 white-space words but 6 Moses words: max_words 5 drops it only tokenised."""
    kept = {}
    for tokenize in ("none", "moses"):
        config = moses_config(tmp_path / tokenize, tokenize=tokenize, max_words=5)
        manifest = prepare(config).manifest
        kept[tokenize] = manifest["splits"]["train"]["dropped"]["max_words"]
        source = (config.data_dir / "train.src").read_text(encoding="utf-8").splitlines()
        assert ("a dog, a house." in source) is (tokenize == "none")  # kept as it is, or dropped
    assert kept["none"] == 0 and kept["moses"] > 0


def prepared_vocab(config):
    """The config with its data prepared and its vocabulary built."""
    prepare(config)
    return config, build_vocab(config)


@pytest.fixture(scope="module")
def moses_vocab(tmp_path_factory: pytest.TempPathFactory):
    return prepared_vocab(moses_config(tmp_path_factory.mktemp("moses")))


def test_the_vocabulary_tokenizes_raw_text_once(moses_vocab) -> None:
    config, vocab = moses_vocab
    assert Vocab.load(config.data_dir / "vocab").text == (moses.Pipeline("en"), moses.Pipeline("fr"))
    assert not vocab.lowercases
    manifest = json.loads((config.data_dir / "vocab" / "manifest.json").read_text())
    assert manifest["tokenize"] == {"scheme": "moses", "src_lang": "en", "tgt_lang": "fr"}
    tokenized = [moses.tokenize_line(line, "en") for line in EN]
    assert vocab.encode_src(EN) == vocab.encode_src(tokenized, tokenized=True)
    assert vocab.encode_src(tokenized) != vocab.encode_src(tokenized, tokenized=True)  # twice differs
    assert vocab.src_pieces(EN[0]) == [vocab._src.id_to_piece(i) for i in vocab.encode_src(EN[:1])[0]]


def test_decoding_gives_the_corpus_text_back(moses_vocab) -> None:
    _, vocab = moses_vocab
    for line in FR:
        assert vocab.decode_tgt(vocab.encode_tgt([line])[0]) == line
        assert vocab.tgt_text(vocab.encode_tgt([line])[0]) == moses.tokenize_line(line, "fr")


def test_the_cache_encodes_prepared_training_text_without_tokenizing_again(moses_vocab) -> None:
    config, vocab = moses_vocab
    build_cache(config, vocab)
    raw_train = Path(config.data.local.train.src).read_text(encoding="utf-8").splitlines()
    raw_valid = Path(config.data.local.valid.src).read_text(encoding="utf-8").splitlines()
    for split, raw in (("train", raw_train), ("valid", raw_valid)):
        cached = load_cache(config.data_dir / "vocab", split).src
        assert [cached[i].tolist() for i in range(20)] == vocab.encode_src(raw[:20])
    assert cache_stats(config.data_dir / "vocab")["train.src"]["sentences"] == len(raw_train)


def test_the_cache_is_encoded_again_when_only_the_tokenization_changed(tmp_path: Path) -> None:
    """Training text that Moses leaves as it is ("the cat sat") trains the same models with data.tokenize
    none and moses, but the dev and test lines are encoded tokenised only with moses: the cache follows."""
    words = ["the", "cat", "sat", "on", "mat", "dog", "ran", "house", "big", "red"]
    rng = random.Random(0)
    train = [" ".join(rng.choices(words, k=5)) for _ in range(200)]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    local = {}
    for split, lines in (
        ("train", train),
        ("valid", ["the cat, sat.", "a dog's house!"]),
        ("test", ["the cat."]),
    ):
        for side in ("src", "tgt"):
            (corpus / f"{split}.{side}").write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        local[split] = {side: str(corpus / f"{split}.{side}") for side in ("src", "tgt")}
    fingerprints = set()
    for tokenize in ("none", "moses"):
        data = {"source": "local", "local": local, "tokenize": tokenize, "clean": {"max_words": 0}}
        config, vocab = prepared_vocab(tiny_config(tmp_path, data=data, vocab={"size": 40, "threads": 1}))
        build_cache(config, vocab)
        fingerprints.add(vocab.fingerprint())
        cached = load_cache(config.data_dir / "vocab", "valid").src
        assert [cached[i].tolist() for i in range(2)] == vocab.encode_src(["the cat, sat.", "a dog's house!"])
    assert len(fingerprints) == 1  # the same models: the test would pass with the fingerprint alone otherwise


def test_a_vocabulary_without_tokenization_keeps_an_older_manifest_current(tmp_path: Path) -> None:
    config = moses_config(tmp_path, tokenize="none")
    prepare(config)
    vocab = build_vocab(config)
    manifest_file = config.data_dir / "vocab" / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    assert manifest["tokenize"] is None and vocab.text is None
    del manifest["tokenize"]  # as vocabularies built before the key existed
    manifest_file.write_text(json.dumps(manifest))
    model_time = (config.data_dir / "vocab" / "src.model").stat().st_mtime_ns
    assert build_vocab(config).text is None
    assert (config.data_dir / "vocab" / "src.model").stat().st_mtime_ns == model_time  # not retrained


# a shared task's form (`data.tokenize: task`): capitals and typographic punctuation to normalise
TASK_EN = ["The Cat’s mat", "A dog, a House.", "(Big) red cat!", "It isn't the Dog's"]
TASK_FR = ["L’Homme", "Le chat, le Chien.", "C'est « Rouge » !", "Qu'il a couru"]


def task_config(tmp_path: Path):
    config = moses_config(tmp_path, tokenize="task")
    for split in ("train", "valid", "test"):  # the same sentences, with capitals and typographic quotes
        files = getattr(config.data.local, split)
        for path, raw, cased in ((files.src, EN, TASK_EN), (files.tgt, FR, TASK_FR)):
            lines = Path(path).read_text(encoding="utf-8").splitlines()
            Path(path).write_text("".join(cased[raw.index(line)] + "\n" for line in lines), encoding="utf-8")
    return config


@pytest.fixture(scope="module")
def task_vocab(tmp_path_factory: pytest.TempPathFactory):
    return prepared_vocab(task_config(tmp_path_factory.mktemp("task")))


def test_the_task_form_trains_on_lowercased_normalised_tokenised_text(task_vocab) -> None:
    config, _ = task_vocab
    train_tgt = set((config.data_dir / "train.tgt").read_text(encoding="utf-8").splitlines())
    assert train_tgt == {"l' homme", "le chat , le chien .", 'c\' est " rouge " !', "qu' il a couru"}
    train_src = set((config.data_dir / "train.src").read_text(encoding="utf-8").splitlines())
    assert "the cat 's mat" in train_src  # the typographic apostrophe normalised, then split off
    valid_tgt = (config.data_dir / "valid.tgt").read_text(encoding="utf-8")
    assert valid_tgt == Path(config.data.local.valid.tgt).read_text(encoding="utf-8")  # the corpus' text
    manifest = json.loads((config.data_dir / "vocab" / "manifest.json").read_text())
    assert manifest["tokenize"] == {"scheme": "task", "src_lang": "en", "tgt_lang": "fr"}


def test_alignment_reads_gold_words_as_the_task_form_reads_its_text(task_vocab) -> None:
    """Gold words come tokenised but cased: `align` lowercases and normalises them first, as the task form
    does every line it reads (else a cased word is <unk>), and the attention is that of the words read."""
    config, vocab = task_vocab
    model = build_model(config.model, vocab.src_size, vocab.tgt_size).eval()
    cased = AlignmentCorpus([["The", "Cat", "Sat"]], [["Le", "Chat"]], [None])
    read = AlignmentCorpus([["the", "cat", "sat"]], [["le", "chat"]], [None])
    assert as_read(vocab, 0, cased.src_words) == read.src_words
    (got,), (want,) = (attention_scores(model, vocab, corpus, "cpu") for corpus in (cased, read))
    np.testing.assert_array_equal(got, want)


def test_a_task_form_vocabulary_reads_any_case_and_writes_lowercase(task_vocab) -> None:
    config, vocab = task_vocab
    assert vocab.lowercases and Vocab.load(config.data_dir / "vocab").lowercases
    assert vocab.encode_src(["THE CAT’S MAT"]) == vocab.encode_src(["the cat's mat"])
    assert vocab.encode_src(["the cat's mat"]) == vocab.encode_src(["the cat 's mat"], tokenized=True)
    assert [vocab.decode_tgt(ids) for ids in vocab.encode_tgt(TASK_FR)] == [
        "l'homme",
        "le chat, le chien.",
        'c\'est "rouge" !',
        "qu'il a couru",
    ]


def test_an_ensemble_tells_the_task_form_from_the_plain_tokenizer(task_vocab) -> None:
    """The same pieces read through another processing of the text are another target side."""
    from seq2seq_attn.decoding.ensemble import side_fingerprint

    config, vocab = task_vocab
    plain = Vocab(
        config.data_dir / "vocab",
        vocab.model_type,
        vocab.joint,
        1,
        (moses.Pipeline("en"), moses.Pipeline("fr")),
    )
    assert vocab.text[1].describe() == "lowercase+moses-punct-norm+moses-tokenizer:fr"
    assert side_fingerprint(vocab, "tgt") == side_fingerprint(Vocab.load(config.data_dir / "vocab"), "tgt")
    assert side_fingerprint(vocab, "tgt") != side_fingerprint(plain, "tgt")


def test_a_task_form_run_is_scored_case_insensitively(task_vocab, tmp_path: Path) -> None:
    config, _ = task_vocab
    run = make_run_dir(
        dataclasses.replace(config, train=dataclasses.replace(config.train, run_dir=str(tmp_path / "run")))
    )
    valid = config.data.local.valid
    result = run_main(
        "--quiet", "eval", "--model", str(run), "--src", valid.src, "--ref", valid.tgt, "--bootstrap", "0",
        "--format", "json", text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    signatures = json.loads(result.stdout)["signatures"]
    assert "|case:lc|" in signatures["bleu"] and "|case:lc|" in signatures["chrf"]


@pytest.mark.parametrize("fixture", ["moses_vocab", "task_vocab"])
def test_dev_bleu_is_case_insensitive_for_a_lowercasing_model(fixture, request, monkeypatch) -> None:
    from seq2seq_attn.training import validate as validation

    config, vocab = request.getfixturevalue(fixture)
    build_cache(config, vocab)
    asked = []

    def metric(references, lowercase=False):
        asked.append(lowercase)
        return bleu_metric(references, lowercase)

    monkeypatch.setattr(validation, "bleu_metric", metric)
    torch.manual_seed(0)
    model = build_model(config.model, vocab.src_size, vocab.tgt_size)
    found = validation.validate(
        model, validation.load_dev(config), config, vocab, torch.device("cpu"), bf16=False
    )
    assert asked == [vocab.lowercases] and 0.0 <= found["bleu"] <= 100.0
    assert asked == [fixture == "task_vocab"]


def test_translations_are_detokenized(moses_vocab) -> None:
    config, vocab = moses_vocab
    torch.manual_seed(0)
    model = build_model(config.model, vocab.src_size, vocab.tgt_size).eval()
    decode = config.decode.__class__(beam_size=2, max_len_a=0.0, max_len_b=6, min_len_a=0.0)
    (translation,) = Translator(model, vocab, decode, "cpu").translate([EN[1]])
    tokens = translation.hypotheses[0].tokens
    assert translation.texts[0] == moses.detokenize(vocab.tgt_text(tokens), "fr").strip()


def test_buckets_can_count_moses_words() -> None:
    sources = ["a, b, c, d, e.", "a b c d e f g h i j k"]  # 5 white-space words, 10 Moses words; 11 both
    references = hypotheses = ["x y", "x y"]
    systems = [System("s", hypotheses)]
    counts = {}
    for words in ("whitespace", "moses"):
        config = EvalConfig(buckets=[0, 10], words=words, words_lang="en", bootstrap=0)
        report = evaluate(systems, references, sources, by_length=True, config=config)
        rows = {row["bucket"]: row["count"] for row in report["systems"][0]["rows"] if row["subset"] == "all"}
        counts[words] = (rows["0-10"], rows["10+"])
        assert report["words"] == ("moses:en" if words == "moses" else "whitespace")
    assert counts == {"whitespace": (1, 1), "moses": (0, 2)}
    with pytest.raises(UserError, match="eval.words: moses needs the language of the source"):
        evaluate(systems, references, sources, by_length=True, config=EvalConfig(words="moses"))
    assert np.array_equal(np.array([moses.word_count(s, "en") for s in sources]), np.array([10, 11]))


def test_eval_counts_moses_words_from_the_command_line(tmp_path: Path) -> None:
    for name, lines in (("src", ["a, b, c, d, e.", "a b c d e f g h i j k"]), ("ref", ["x y"] * 2)):
        (tmp_path / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    common = ("eval", "--hyp", str(tmp_path / "ref"), "--ref", str(tmp_path / "ref"), "--src")
    common += (str(tmp_path / "src"), "--by-length", "--buckets", "0,10", "--words", "moses")
    result = run_main(*common, "--words-lang", "en", "--output", str(tmp_path / "r.json"), text=True)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["words"] == "moses:en"
    assert [row["count"] for row in report["systems"][0]["rows"]] == [2, 0, 2]  # all, 0-10, 10+
    assert_one_line_error(run_main(*common), "--words moses", "give --words-lang LANG")


def test_a_moses_word_vocabulary_reads_its_own_unk_back_as_one_word(tmp_path: Path) -> None:
    """A model's output keeps a literal <unk>: scored again (seq2seq score, rescoring), it must be the one
    unknown word it was, not "< unk >"."""
    config = moses_config(tmp_path)
    config = dataclasses.replace(config, vocab=dataclasses.replace(config.vocab, type="word", size=12))
    prepare(config)
    vocab = build_vocab(config)
    ids = vocab.encode_tgt(["le chat, le chien."])[0]
    with_unk = [ids[0], 1, *ids[1:]]  # an unknown word after the first
    text = vocab.decode_tgt(with_unk)
    assert "<unk>" in text
    assert vocab.encode_tgt([text]) == [with_unk]
