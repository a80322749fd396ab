"""The synthetic language pair: deterministic bytes, length spread, Zipf shape, a translation that is
learnable (a function of the source) but not a word-for-word copy, and streaming generation."""

from __future__ import annotations

import collections
import inspect
import itertools
import math
import os
import subprocess
import sys

import pytest

from seq2seq_attn.config import SyntheticConfig
from seq2seq_attn.data.synthetic import (
    NP,
    PP,
    VP,
    Clause,
    Sentence,
    build_language,
    generate_aligned,
    generate_split,
    render_source,
    render_target,
)
from seq2seq_attn.errors import UserError

SMALL = SyntheticConfig(train_size=300, valid_size=300, test_size=300)


def as_text(pairs) -> str:
    return "".join(f"{src}\t{tgt}\n" for src, tgt in pairs)


def test_same_config_same_pairs():
    first = list(generate_split(SMALL, "valid"))
    assert first == list(generate_split(SMALL, "valid"))
    assert len(first) == SMALL.valid_size
    assert all(src and tgt and "\n" not in src + tgt and "\t" not in src + tgt for src, tgt in first)


@pytest.mark.parametrize("hash_seed", ["0", "4242"])
def test_bytes_do_not_depend_on_python_hash_seed(hash_seed):
    code = (
        "import sys\n"
        "from seq2seq_attn.config import SyntheticConfig\n"
        "from seq2seq_attn.data.synthetic import generate_split\n"
        "for src, tgt in generate_split(SyntheticConfig(valid_size=300), 'valid'):\n"
        "    sys.stdout.write(f'{src}\\t{tgt}\\n')\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout == as_text(generate_split(SMALL, "valid"))


def test_seeds_and_splits_give_different_data_in_one_language():
    splits = {split: list(generate_split(SMALL, split)) for split in ("train", "valid", "test")}
    other_seed = list(generate_split(SyntheticConfig(train_size=300, seed=SMALL.seed + 1), "train"))
    texts = [set(pairs) for pairs in (*splits.values(), other_seed)]
    for a, b in itertools.combinations(texts, 2):
        assert len(a & b) < 0.1 * len(a)  # only a few short sentences may coincide

    def types(pairs):
        return {word for src, _ in pairs for word in src.split()}

    # Splits share the language (same words), another seed makes another language.
    assert len(types(splits["train"]) & types(splits["test"])) > 0.3 * len(types(splits["test"]))
    assert len(types(splits["train"]) & types(other_seed)) < 0.05 * len(types(other_seed))


def test_generation_streams():
    huge = SyntheticConfig(train_size=10**12)
    stream = generate_split(huge, "train")
    assert inspect.isgenerator(stream)
    assert len(list(itertools.islice(stream, 5))) == 5  # would never return if the split were built first


def lengths(cfg: SyntheticConfig, split: str) -> list[int]:
    return [len(src.split()) for src, _ in generate_split(cfg, split)]


def test_default_lengths_fill_every_evaluation_bucket():
    cfg = SyntheticConfig(test_size=4000)
    found = lengths(cfg, "test")
    assert min(found) <= 5 and max(found) == cfg.max_words == 80
    buckets = collections.Counter(min(n // 10, 6) for n in found)  # 0-10, 10-20, ..., 50-60, 60+
    shares = [buckets[b] / len(found) for b in range(7)]
    assert min(shares) >= 0.075, shares


@pytest.mark.parametrize(("low", "high"), [(3, 8), (12, 20), (40, 120)])
def test_lengths_stay_within_configured_range(low, high):
    found = lengths(SyntheticConfig(valid_size=400, min_words=low, max_words=high), "valid")
    assert low <= min(found) and max(found) <= high
    assert len(set(found)) >= 0.8 * (high - low + 1)  # spread over the range, not a few values


def test_min_words_above_max_words_is_a_user_error():
    with pytest.raises(UserError, match=r"data\.synthetic\.min_words"):
        next(generate_split(SyntheticConfig(min_words=30, max_words=20), "train"))


def test_unknown_split_is_rejected():
    with pytest.raises(ValueError, match="split"):
        next(generate_split(SMALL, "dev"))


def loglog_slope(counts: list[int], lo: int, hi: int) -> float:
    """Least-squares slope of log(frequency) against log(rank) over ranks lo..hi."""
    points = [(math.log(r), math.log(c)) for r, c in enumerate(counts, start=1) if lo <= r <= hi]
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


@pytest.mark.parametrize(("exponent", "max_rank"), [(1.0, 1000), (1.4, 300)])
def test_content_words_follow_zipf(exponent, max_rank):
    cfg = SyntheticConfig(train_size=3000, zipf_exponent=exponent)
    lang = build_language(cfg)
    content = {w for cls in (lang.noun, lang.verb, lang.adj, lang.adv) for w in cls.src}
    words = (w for src, _ in generate_split(cfg, "train") for w in src.split())
    counts = collections.Counter(w for w in words if w in content)
    slope = loglog_slope(sorted(counts.values(), reverse=True), 10, max_rank)
    assert abs(slope + exponent) < 0.15, slope
    if exponent == 1.0:
        assert len(counts) >= 2000  # thousands of distinct words in a few thousand sentences


def test_translation_is_not_a_word_for_word_copy():
    pairs = list(generate_aligned(SyntheticConfig(test_size=1000), "test"))

    def share(predicate) -> float:
        return sum(map(predicate, pairs)) / len(pairs)

    def reordered(p) -> bool:  # some target word translates a source word earlier than its predecessor's
        by_target = sorted(p.links, key=lambda link: (link[1], link[0]))
        return any(a[0] > b[0] for a, b in itertools.pairwise(by_target))

    def fan(p, side: int) -> int:
        return max(collections.Counter(link[side] for link in p.links).values())

    assert share(reordered) > 0.8
    assert share(lambda p: len(p.source) != len(p.target)) > 0.3
    assert share(lambda p: fan(p, 0) > 1) > 0.3  # one source word -> several target words
    assert share(lambda p: fan(p, 1) > 1) > 0.1  # several source words -> one target word
    # Every word on each side takes part in the alignment, and the two languages share no word.
    for p in pairs:
        assert {i for i, _ in p.links} == set(range(len(p.source)))
        assert {j for _, j in p.links} == set(range(len(p.target)))
    shared = {w for p in pairs for w in p.source} & {w for p in pairs for w in p.target}
    assert shared == {",", "."}


def test_repeated_sources_get_the_same_translation():
    # A tiny, steep lexicon makes whole sentences recur, with objects, PPs and clauses in them.
    cfg = SyntheticConfig(train_size=5000, vocab_size=100, zipf_exponent=3.0, max_words=12)
    targets = collections.defaultdict(set)
    counts = collections.Counter()
    for src, tgt in generate_split(cfg, "train"):
        targets[src].add(tgt)
        counts[src] += 1
    recurring = [src for src, n in counts.items() if n > 1]
    assert len(recurring) >= 100
    assert max(len(src.split()) for src in recurring) >= 9
    assert all(len(targets[src]) == 1 for src in recurring)


def attachment_variants(kind: str) -> list[Sentence]:
    """Two parses of one source string: a PP on the object or on the verb; a PP in or after a relative."""
    variants = []
    for low in (True, False):
        pp = PP(prep=1, np=NP(det=1, plural=True, noun=7, adjs=[[2, False]]))
        obj = NP(det=0, noun=5)
        vp = VP(verb=3, relative=False, obj=obj)
        if kind == "object-or-verb":
            if low:
                obj.pp = pp
            else:
                vp.pps.append(pp)
        else:  # a relative clause on the object; the PP ends the relative or belongs to the main verb
            obj.rel = VP(verb=4, relative=True)
            (obj.rel.pps if low else vp.pps).append(pp)
        variants.append(Sentence(clauses=[Clause(NP(pronoun=0), vp)]))
    return variants


@pytest.mark.parametrize("kind", ["object-or-verb", "relative-or-main"])
def test_attachment_ambiguity_has_one_translation(kind):
    lang = build_language(SMALL)
    rendered = set()
    for sentence in attachment_variants(kind):
        source = render_source(sentence, lang)
        rendered.add((" ".join(source), " ".join(render_target(sentence, lang, len(source)).words)))
    assert len(rendered) == 1
