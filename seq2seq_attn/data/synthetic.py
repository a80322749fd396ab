"""A synthetic, seeded language pair on which a fixed-vector encoder-decoder visibly fails on long sentences.

Bahdanau et al. (2014) show that RNNencdec, which squeezes the whole source sentence into one vector,
loses BLEU as sentences grow, while RNNsearch, which attends to every source annotation, does not. This
module makes that phenomenon reproducible offline, in minutes, on a CPU.

The two languages. Each has a Zipfian lexicon of `vocab_size` content words (nouns, verbs, adjectives,
adverbs) plus 33 function words, all pseudo-words made of syllables, so sentencepiece splits the rarer
ones into pieces. The source uses consonant-vowel syllables (`kamotu`), the target onsets the source never
uses (c h j w x y sh ch th) and diphthongs (`xauweichu`), so the two never share a word. The most frequent
`irregular_words` content words get arbitrary translations; the long tail are cognates (a fixed
syllable-to-syllable sound correspondence plus a part-of-speech ending), as names and loanwords are in
real languages, so that rare words can be learnt from a handful of examples. Word ranks are dealt to the
word classes so that each class holds its share of the probability mass: the corpus as a whole then
follows p(rank) ~ rank^-zipf_exponent.

The grammar (source side, in capitals the function words, drawn anew for every seed):
    sentence = clause ("," CONJ clause)* "."        clause = NP VP
    NP = PRON | DET (INTENS? ADJ)* NOUN (PP | REL VP)?
    VP = ADV? NEG? VERB NP? PP* ("," SUBORD clause)?   PP = PREP NP | PREP PREP NP (a fixed compound)
Each sentence draws a target length uniformly from [min_words, max_words] (punctuation counts as a word)
and starts as "PRON VERB ."; random expansions (an adjective, an adverb, an object, a PP, a relative,
subordinate or coordinated clause, ...) each add a known number of words and are applied until the
length is reached, so every sentence is a complete grammatical structure.

The translation is a deterministic function of the source string (the grammar's attachment ambiguities
all render to the same target) and changes the sentence only locally:
- a bilingual lexicon, with noun classes (read off the noun's last vowel) and number on the target side:
  determiners, adjectives and relative pronouns agree with their noun, plural nouns take a suffix;
- adjective-noun inversion, several adjectives in mirror order ("big red dog" -> "dog red big");
- object-verb order: the object's determiner, adjectives and noun move before the verb, its PP or
  relative clause stays after it; the adverb moves after the verb;
- one-to-many: NEG becomes a circumfix around the verb ("not see" -> "ne see pas"), and some verbs
  translate as a light verb plus a stem ("dance" -> "do dance");
- many-to-one: compound prepositions (two source words) and INTENS + adjective (a prefix) become one
  target word.

Why long sentences are hard for a fixed-size vector: every content word must be reproduced, each a draw
from a Zipf law over hundreds of words per class (5-7 bits of entropy), so the information to carry grows
linearly with the length, to some 200-300 bits for 80 words; a 256-unit recurrent state squeezed through
one vector cannot keep it, and the decoder drops or garbles words of long sentences. The alignment, by
contrast, is monotone up to swaps within a few words, which soft attention learns quickly, so RNNsearch
keeps its quality.

`generate_split` streams the pairs (memory does not grow with the split size); `generate_aligned` yields
them with the gold word alignment, which shows how the target departs from a word-for-word copy.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..config import SyntheticConfig
from ..config.constants import SPLITS
from ..errors import UserError

# Sound systems. Source: one consonant + one vowel. Target: an onset made of letters the source never uses
# (c h j w x y) + a vowel or diphthong, so no target word is ever spelt like a source word, a target word
# splits into syllables in exactly one way, and distinct syllable sequences stay distinct.
SRC_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]  # 70
TGT_ONSETS = ("c", "h", "j", "w", "x", "y", "sh", "ch", "th")
TGT_NUCLEI = ("a", "e", "i", "o", "u", "ou", "ei", "ai", "au")
TGT_SYLLABLES = [c + v for c in TGT_ONSETS for v in TGT_NUCLEI]  # 81

# Share of content-word slots each class fills in generated text (measured); ranks are dealt to match.
CLASS_SHARE = {"noun": 0.40, "verb": 0.26, "adj": 0.24, "adv": 0.10}

# Target morphology.
VERB_ENDING = "r"
ADV_ENDING = "sk"
PLURAL_SUFFIX = "s"
ADJ_ENDINGS = (("n", "ns"), ("l", "ls"))  # [noun class][plural]
INTENSIFIER_PREFIX = "ul"
ONE_TO_MANY_VERBS = 0.15  # share of verbs translated as light verb + stem

# Function words: how many of each, and how often each is used (Zipf-like weights).
N_DETERMINERS = 3  # definite, indefinite, demonstrative; each has a singular and a plural form
DETERMINER_WEIGHTS = (0.5, 0.3, 0.2)
PLURAL_RATE = 0.3
N_PRONOUNS = 6
N_PREPOSITIONS = 10
N_COMPOUNDS = 8  # two-preposition compounds, e.g. "in front of"
CONJUNCTION_WEIGHTS = (0.6, 0.25, 0.15)  # and, but, or
DETERMINER_CUM = list(itertools.accumulate(DETERMINER_WEIGHTS))
CONJUNCTION_CUM = list(itertools.accumulate(CONJUNCTION_WEIGHTS))
N_SUBORDINATORS = 5
N_LIGHT_VERBS = 3

# Limits that keep structures natural.
MAX_ADJECTIVES = 3
MAX_VP_PPS = 2
MAX_CLAUSES = 4


# ----------------------------------------------------------------------------------------------------------
# the two lexicons


@dataclass
class WordClass:
    """Content words of one part of speech, sampled by their global Zipf rank."""

    src: list[str] = field(default_factory=list)
    tgt: list[tuple[str, ...]] = field(default_factory=list)  # one or two target words
    cum_weights: list[float] = field(default_factory=list)

    def add(self, src: str, tgt: tuple[str, ...], weight: float) -> None:
        self.src.append(src)
        self.tgt.append(tgt)
        self.cum_weights.append((self.cum_weights[-1] if self.cum_weights else 0.0) + weight)

    def sample(self, rng: random.Random) -> int:
        return bisect.bisect_right(self.cum_weights, rng.random() * self.cum_weights[-1])


@dataclass
class Language:
    """Both lexicons and the function words of the pair; built once from the seed, shared by all splits."""

    noun: WordClass
    verb: WordClass
    adj: WordClass
    adv: WordClass
    noun_class: list[int]  # target gender of each noun, 0 or 1
    det_src: list[tuple[str, str]]  # [kind][plural]
    det_tgt: list[tuple[tuple[str, str], tuple[str, str]]]  # [kind][plural][noun class]
    pronoun: list[tuple[str, str]]  # (source, target)
    preposition: list[tuple[str, str]]
    preposition_cum: list[float]
    compound: list[tuple[int, int, str]]  # (first, second source preposition, target word)
    conjunction: list[tuple[str, str]]
    subordinator: list[tuple[str, str]]
    relative_src: str
    relative_tgt: tuple[str, str]  # [noun class]
    negation_src: str
    negation_tgt: tuple[str, str]  # before and after the verb
    intensifier_src: str


def build_language(cfg: SyntheticConfig) -> Language:
    rng = random.Random(derive_seed(cfg.seed, "language"))
    src_fn = iter(rng.sample(SRC_SYLLABLES, 40))  # one-syllable function words, all distinct (33 used)
    tgt_fn = iter(rng.sample(TGT_SYLLABLES, 60))  # (51 used)
    syllable_map = dict(zip(SRC_SYLLABLES, rng.sample(TGT_SYLLABLES, len(SRC_SYLLABLES)), strict=True))

    # Source content words: frequent ones short, rare ones long (Zipf's law of abbreviation).
    ranks = range(1, cfg.vocab_size + 1)
    seen: set[tuple[str, ...]] = set()
    src_words: list[tuple[str, ...]] = []
    for rank in ranks:
        n = 2 if rank <= 100 else rng.choice((2, 3)) if rank <= 1000 else rng.choice((3, 4))
        word = tuple(rng.choices(SRC_SYLLABLES, k=n))
        while word in seen:
            word = tuple(rng.choices(SRC_SYLLABLES, k=n))
        seen.add(word)
        src_words.append(word)

    # Target stems: cognates for the tail, arbitrary distinct forms for the `irregular_words` head.
    stems = ["".join(syllable_map[s] for s in word) for word in src_words]
    used = set(stems[cfg.irregular_words :])
    for i in range(min(cfg.irregular_words, cfg.vocab_size)):
        stem = "".join(rng.choices(TGT_SYLLABLES, k=rng.choice((2, 3))))
        while stem in used:
            stem = "".join(rng.choices(TGT_SYLLABLES, k=rng.choice((2, 3))))
        used.add(stem)
        stems[i] = stem

    classes = {name: WordClass() for name in CLASS_SHARE}
    noun_class: list[int] = []
    light_verbs = [next(tgt_fn) for _ in range(N_LIGHT_VERBS)]
    weights = [rank**-cfg.zipf_exponent for rank in ranks]
    for word, stem, weight, pos in zip(src_words, stems, weights, _deal_classes(weights), strict=True):
        src = "".join(word)
        if pos == "noun":
            noun_class.append(TGT_NUCLEI.index(_last_nucleus(stem)) % 2)
            tgt: tuple[str, ...] = (stem,)
        elif pos == "verb":
            light = rng.random() < ONE_TO_MANY_VERBS
            tgt = (rng.choice(light_verbs), stem) if light else (stem + VERB_ENDING,)
        elif pos == "adv":
            tgt = (stem + ADV_ENDING,)
        else:
            tgt = (stem,)
        classes[pos].add(src, tgt, weight)

    def pairs(n: int) -> list[tuple[str, str]]:
        return [(next(src_fn), next(tgt_fn)) for _ in range(n)]

    prepositions = pairs(N_PREPOSITIONS)
    compounds = rng.sample(list(itertools.permutations(range(N_PREPOSITIONS), 2)), N_COMPOUNDS)
    return Language(
        noun=classes["noun"],
        verb=classes["verb"],
        adj=classes["adj"],
        adv=classes["adv"],
        noun_class=noun_class,
        det_src=[(next(src_fn), next(src_fn)) for _ in range(N_DETERMINERS)],
        det_tgt=[((next(tgt_fn), next(tgt_fn)), (next(tgt_fn), next(tgt_fn))) for _ in range(N_DETERMINERS)],
        pronoun=pairs(N_PRONOUNS),
        preposition=prepositions,
        preposition_cum=list(itertools.accumulate(1 / r for r in range(1, N_PREPOSITIONS + 1))),
        compound=[(a, b, next(tgt_fn)) for a, b in compounds],
        conjunction=pairs(len(CONJUNCTION_WEIGHTS)),
        subordinator=pairs(N_SUBORDINATORS),
        relative_src=next(src_fn),
        relative_tgt=(next(tgt_fn), next(tgt_fn)),
        negation_src=next(src_fn),
        negation_tgt=(next(tgt_fn), next(tgt_fn)),
        intensifier_src=next(src_fn),
    )


def _deal_classes(weights: list[float]) -> list[str]:
    """Give each rank, most frequent first, to the word class least filled relative to its share of the mass.

    Every class gets one of the first four ranks, so each has words even under a steep Zipf law.
    """
    mass = dict.fromkeys(CLASS_SHARE, 0.0)
    dealt = []
    for weight in weights:
        pos = min(CLASS_SHARE, key=lambda name: mass[name] / CLASS_SHARE[name])
        mass[pos] += weight
        dealt.append(pos)
    return dealt


def _last_nucleus(stem: str) -> str:
    vowels = len(stem) - len(stem.rstrip("aeiou"))
    return stem[-vowels:]


def derive_seed(seed: int, label: str) -> int:
    """A 64-bit seed for one purpose, independent of Python's hash randomisation."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{label}".encode()).digest()[:8], "big")


# ----------------------------------------------------------------------------------------------------------
# sentence structures


@dataclass(slots=True, eq=False)
class NP:
    """A pronoun, or determiner + adjectives + noun with at most one PP or relative clause."""

    pronoun: int = -1  # index into Language.pronoun; -1 for a full noun phrase
    det: int = 0
    plural: bool = False
    noun: int = 0
    adjs: list[list] = field(default_factory=list)  # [adjective, intensified], in source order
    pp: PP | None = None
    rel: VP | None = None
    # source positions, set when the source is rendered
    det_at: int = 0
    noun_at: int = 0
    rel_at: int = 0
    adj_at: list[int] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class PP:
    prep: int
    np: NP
    compound: int = -1  # index into Language.compound; replaces `prep`
    at: int = 0


@dataclass(slots=True, eq=False)
class VP:
    verb: int
    relative: bool  # the VP of a relative clause takes no subordinate clause
    adv: int = -1
    neg: bool = False
    obj: NP | None = None
    pps: list[PP] = field(default_factory=list)
    sub: int = -1  # subordinator of `sub_clause`
    sub_clause: Clause | None = None
    adv_at: int = 0
    neg_at: int = 0
    verb_at: int = 0
    sub_at: int = 0


@dataclass(slots=True, eq=False)
class Clause:
    subj: NP
    vp: VP


@dataclass(eq=False)
class Sentence:
    """Clauses joined by conjunctions, plus the registries of nodes that expansions can grow."""

    clauses: list[Clause] = field(default_factory=list)
    conjunctions: list[int] = field(default_factory=list)
    conj_at: list[int] = field(default_factory=list)
    size: int = 0  # source words, the final period included
    nps: list[NP] = field(default_factory=list)
    vps: list[VP] = field(default_factory=list)
    pps: list[PP] = field(default_factory=list)


def _weighted_index(rng: random.Random, cum_weights: list[float]) -> int:
    return bisect.bisect_right(cum_weights, rng.random() * cum_weights[-1])


def _new_np(s: Sentence, lang: Language, rng: random.Random) -> NP:
    det = _weighted_index(rng, DETERMINER_CUM)
    np = NP(det=det, plural=rng.random() < PLURAL_RATE, noun=lang.noun.sample(rng))
    s.nps.append(np)
    return np


def _new_pp(s: Sentence, lang: Language, rng: random.Random) -> PP:
    pp = PP(prep=_weighted_index(rng, lang.preposition_cum), np=_new_np(s, lang, rng))
    s.pps.append(pp)
    return pp


def _new_vp(s: Sentence, lang: Language, rng: random.Random, relative: bool) -> VP:
    vp = VP(verb=lang.verb.sample(rng), relative=relative)
    s.vps.append(vp)
    return vp


def _new_clause(s: Sentence, lang: Language, rng: random.Random) -> Clause:
    """The smallest clause, "pronoun verb" (2 words)."""
    subj = NP(pronoun=rng.randrange(N_PRONOUNS))
    s.nps.append(subj)
    return Clause(subj, _new_vp(s, lang, rng, relative=False))


# ----------------------------------------------------------------------------------------------------------
# growing a sentence to its drawn length


def _pick(rng: random.Random, items: list, ok: Callable) -> object | None:
    """A random item satisfying `ok`: a few blind draws first (cheap), then an exhaustive filter."""
    if not items:
        return None
    for _ in range(3):
        item = rng.choice(items)
        if ok(item):
            return item
    eligible = [item for item in items if ok(item)]
    return rng.choice(eligible) if eligible else None


def _adjective(s: Sentence, lang: Language, rng: random.Random) -> bool:
    np = _pick(rng, s.nps, lambda n: n.pronoun < 0 and len(n.adjs) < MAX_ADJECTIVES)
    if np is not None:
        np.adjs.append([lang.adj.sample(rng), False])
    return np is not None


def _intensifier(s: Sentence, lang: Language, rng: random.Random) -> bool:
    np = _pick(rng, s.nps, lambda n: any(not strong for _, strong in n.adjs))
    if np is not None:
        rng.choice([a for a in np.adjs if not a[1]])[1] = True
    return np is not None


def _adverb(s: Sentence, lang: Language, rng: random.Random) -> bool:
    vp = _pick(rng, s.vps, lambda v: v.adv < 0)
    if vp is not None:
        vp.adv = lang.adv.sample(rng)
    return vp is not None


def _negation(s: Sentence, lang: Language, rng: random.Random) -> bool:
    vp = _pick(rng, s.vps, lambda v: not v.neg)
    if vp is not None:
        vp.neg = True
    return vp is not None


def _compound(s: Sentence, lang: Language, rng: random.Random) -> bool:
    pp = _pick(rng, s.pps, lambda p: p.compound < 0)
    if pp is not None:
        pp.compound = rng.randrange(N_COMPOUNDS)
    return pp is not None


def _noun_subject(s: Sentence, lang: Language, rng: random.Random) -> bool:
    np = _pick(rng, s.nps, lambda n: n.pronoun >= 0)
    if np is not None:
        np.pronoun = -1
        np.det = _weighted_index(rng, DETERMINER_CUM)
        np.plural = rng.random() < PLURAL_RATE
        np.noun = lang.noun.sample(rng)
    return np is not None


def _object(s: Sentence, lang: Language, rng: random.Random) -> bool:
    vp = _pick(rng, s.vps, lambda v: v.obj is None)
    if vp is not None:
        vp.obj = _new_np(s, lang, rng)
    return vp is not None


def _relative(s: Sentence, lang: Language, rng: random.Random) -> bool:
    np = _pick(rng, s.nps, lambda n: n.pronoun < 0 and n.pp is None and n.rel is None)
    if np is not None:
        np.rel = _new_vp(s, lang, rng, relative=True)
    return np is not None


def _np_pp(s: Sentence, lang: Language, rng: random.Random) -> bool:
    np = _pick(rng, s.nps, lambda n: n.pronoun < 0 and n.pp is None and n.rel is None)
    if np is not None:
        np.pp = _new_pp(s, lang, rng)
    return np is not None


def _vp_pp(s: Sentence, lang: Language, rng: random.Random) -> bool:
    vp = _pick(rng, s.vps, lambda v: len(v.pps) < MAX_VP_PPS)
    if vp is not None:
        vp.pps.append(_new_pp(s, lang, rng))
    return vp is not None


def _subordinate(s: Sentence, lang: Language, rng: random.Random) -> bool:
    vp = _pick(rng, s.vps, lambda v: not v.relative and v.sub_clause is None)
    if vp is not None:
        vp.sub = rng.randrange(N_SUBORDINATORS)
        vp.sub_clause = _new_clause(s, lang, rng)
    return vp is not None


def _coordinate(s: Sentence, lang: Language, rng: random.Random) -> bool:
    if len(s.clauses) >= MAX_CLAUSES:
        return False
    s.conjunctions.append(_weighted_index(rng, CONJUNCTION_CUM))
    s.clauses.append(_new_clause(s, lang, rng))
    return True


@dataclass(frozen=True)
class Expansion:
    grow: Callable[[Sentence, Language, random.Random], bool]
    cost: int  # source words it adds
    weight: float  # how often it is tried


EXPANSIONS = (
    Expansion(_adjective, 1, 0.22),
    Expansion(_intensifier, 1, 0.02),
    Expansion(_adverb, 1, 0.10),
    Expansion(_negation, 1, 0.03),
    Expansion(_compound, 1, 0.02),
    Expansion(_noun_subject, 1, 0.10),
    Expansion(_object, 2, 0.15),  # det noun
    Expansion(_relative, 2, 0.08),  # rel verb
    Expansion(_np_pp, 3, 0.08),  # prep det noun
    Expansion(_vp_pp, 3, 0.08),
    Expansion(_subordinate, 4, 0.08),  # , subordinator pronoun verb
    Expansion(_coordinate, 4, 0.04),  # , conjunction pronoun verb
)


def _fitting(expansions: tuple[Expansion, ...], room: int) -> tuple[list[Expansion], list[float]]:
    """The expansions adding at most `room` words, with their cumulative weights."""
    fit = [e for e in expansions if e.cost <= room]
    return fit, list(itertools.accumulate(e.weight for e in fit))


MAX_COST = max(e.cost for e in EXPANSIONS)
FITTING = [_fitting(EXPANSIONS, room) for room in range(MAX_COST + 1)]  # precomputed: the common case


def grow_sentence(lang: Language, rng: random.Random, length: int) -> Sentence:
    """Start from "pronoun verb ." and apply random expansions that fit until `length` words are reached."""
    s = Sentence()
    s.clauses.append(_new_clause(s, lang, rng))
    s.size = 3  # "PRON VERB ."
    while (room := length - s.size) > 0:
        options, cum_weights = FITTING[min(room, MAX_COST)]
        while options:
            choice = options[_weighted_index(rng, cum_weights)]
            if choice.grow(s, lang, rng):
                s.size += choice.cost
                break
            options, cum_weights = _fitting(tuple(e for e in options if e is not choice), room)
        else:
            break  # nothing fits any more: keep the slightly shorter sentence
    return s


# ----------------------------------------------------------------------------------------------------------
# rendering: the source in grammar order, then the target with the translation rules


def _src_np(np: NP, lang: Language, out: list[str]) -> None:
    if np.pronoun >= 0:
        np.noun_at = len(out)
        out.append(lang.pronoun[np.pronoun][0])
        return
    np.det_at = len(out)
    out.append(lang.det_src[np.det][np.plural])
    np.adj_at = []
    for adj, strong in np.adjs:
        if strong:
            out.append(lang.intensifier_src)
        np.adj_at.append(len(out))
        out.append(lang.adj.src[adj])
    np.noun_at = len(out)
    out.append(lang.noun.src[np.noun])
    if np.pp is not None:
        _src_pp(np.pp, lang, out)
    if np.rel is not None:
        np.rel_at = len(out)
        out.append(lang.relative_src)
        _src_vp(np.rel, lang, out)


def _src_pp(pp: PP, lang: Language, out: list[str]) -> None:
    pp.at = len(out)
    if pp.compound >= 0:
        first, second, _ = lang.compound[pp.compound]
        out += (lang.preposition[first][0], lang.preposition[second][0])
    else:
        out.append(lang.preposition[pp.prep][0])
    _src_np(pp.np, lang, out)


def _src_vp(vp: VP, lang: Language, out: list[str]) -> None:
    if vp.adv >= 0:
        vp.adv_at = len(out)
        out.append(lang.adv.src[vp.adv])
    if vp.neg:
        vp.neg_at = len(out)
        out.append(lang.negation_src)
    vp.verb_at = len(out)
    out.append(lang.verb.src[vp.verb])
    if vp.obj is not None:
        _src_np(vp.obj, lang, out)
    for pp in vp.pps:
        _src_pp(pp, lang, out)
    if vp.sub_clause is not None:
        out.append(",")
        vp.sub_at = len(out)
        out.append(lang.subordinator[vp.sub][0])
        _src_clause(vp.sub_clause, lang, out)


def _src_clause(clause: Clause, lang: Language, out: list[str]) -> None:
    _src_np(clause.subj, lang, out)
    _src_vp(clause.vp, lang, out)


def render_source(s: Sentence, lang: Language) -> list[str]:
    out: list[str] = []
    s.conj_at = []
    for i, clause in enumerate(s.clauses):
        if i:
            out.append(",")
            s.conj_at.append(len(out))
            out.append(lang.conjunction[s.conjunctions[i - 1]][0])
        _src_clause(clause, lang, out)
    out.append(".")
    return out


class Target:
    """Target words with, for each, the source positions it translates (the gold alignment)."""

    def __init__(self) -> None:
        self.words: list[str] = []
        self.links: list[tuple[int, int]] = []  # (source position, target position)

    def emit(self, word: str, *source_at: int) -> None:
        self.links += [(i, len(self.words)) for i in source_at]
        self.words.append(word)


def _tgt_np_head(np: NP, lang: Language, t: Target) -> None:
    """Determiner, noun, then adjectives in mirror order, all agreeing with the noun's class and number."""
    if np.pronoun >= 0:
        t.emit(lang.pronoun[np.pronoun][1], np.noun_at)
        return
    gender = lang.noun_class[np.noun]
    t.emit(lang.det_tgt[np.det][np.plural][gender], np.det_at)
    t.emit(lang.noun.tgt[np.noun][0] + (PLURAL_SUFFIX if np.plural else ""), np.noun_at)
    ending = ADJ_ENDINGS[gender][np.plural]
    for (adj, strong), at in zip(reversed(np.adjs), reversed(np.adj_at), strict=True):
        stem = lang.adj.tgt[adj][0] + ending
        if strong:  # many-to-one: intensifier + adjective -> one prefixed word
            t.emit(INTENSIFIER_PREFIX + stem, at - 1, at)
        else:
            t.emit(stem, at)


def _tgt_np_tail(np: NP, lang: Language, t: Target) -> None:
    if np.pp is not None:
        _tgt_pp(np.pp, lang, t)
    if np.rel is not None:
        t.emit(lang.relative_tgt[lang.noun_class[np.noun]], np.rel_at)
        _tgt_vp(np.rel, lang, t)


def _tgt_np(np: NP, lang: Language, t: Target) -> None:
    _tgt_np_head(np, lang, t)
    _tgt_np_tail(np, lang, t)


def _tgt_pp(pp: PP, lang: Language, t: Target) -> None:
    if pp.compound >= 0:  # many-to-one: a two-word compound preposition -> one word
        t.emit(lang.compound[pp.compound][2], pp.at, pp.at + 1)
    else:
        t.emit(lang.preposition[pp.prep][1], pp.at)
    _tgt_np(pp.np, lang, t)


def _tgt_vp(vp: VP, lang: Language, t: Target) -> None:
    """Object head before the verb, negation around it, adverb after it; the rest keeps source order."""
    if vp.obj is not None:
        _tgt_np_head(vp.obj, lang, t)
    if vp.neg:
        t.emit(lang.negation_tgt[0], vp.neg_at)
    for word in lang.verb.tgt[vp.verb]:  # one or two words (light verb + stem)
        t.emit(word, vp.verb_at)
    if vp.neg:
        t.emit(lang.negation_tgt[1], vp.neg_at)
    if vp.adv >= 0:
        t.emit(lang.adv.tgt[vp.adv][0], vp.adv_at)
    if vp.obj is not None:
        _tgt_np_tail(vp.obj, lang, t)
    for pp in vp.pps:
        _tgt_pp(pp, lang, t)
    if vp.sub_clause is not None:
        t.emit(",", vp.sub_at - 1)
        t.emit(lang.subordinator[vp.sub][1], vp.sub_at)
        _tgt_clause(vp.sub_clause, lang, t)


def _tgt_clause(clause: Clause, lang: Language, t: Target) -> None:
    _tgt_np(clause.subj, lang, t)
    _tgt_vp(clause.vp, lang, t)


def render_target(s: Sentence, lang: Language, source_len: int) -> Target:
    """Translate a sentence whose source was rendered (positions set) into target words and links."""
    t = Target()
    for i, clause in enumerate(s.clauses):
        if i:
            at = s.conj_at[i - 1]
            t.emit(",", at - 1)
            t.emit(lang.conjunction[s.conjunctions[i - 1]][1], at)
        _tgt_clause(clause, lang, t)
    t.emit(".", source_len - 1)
    return t


# ----------------------------------------------------------------------------------------------------------
# public API


@dataclass(frozen=True)
class AlignedPair:
    source: list[str]
    target: list[str]
    links: list[tuple[int, int]]  # (source word, target word) gold alignment


def generate_aligned(cfg: SyntheticConfig, split: str) -> Iterator[AlignedPair]:
    """Stream `cfg.<split>_size` sentence pairs of one split, with their word alignments."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if cfg.min_words > cfg.max_words:
        raise UserError(
            f"`data.synthetic.min_words` ({cfg.min_words}) must not exceed `data.synthetic.max_words` "
            f"({cfg.max_words})"
        )
    lang = build_language(cfg)
    rng = random.Random(derive_seed(cfg.seed, split))
    for _ in range(getattr(cfg, f"{split}_size")):
        sentence = grow_sentence(lang, rng, rng.randint(cfg.min_words, cfg.max_words))
        source = render_source(sentence, lang)
        target = render_target(sentence, lang, len(source))
        yield AlignedPair(source, target.words, target.links)


def generate_split(cfg: SyntheticConfig, split: str) -> Iterator[tuple[str, str]]:
    """Stream `cfg.<split>_size` (source, target) sentence pairs; the same config gives the same text."""
    for pair in generate_aligned(cfg, split):
        yield " ".join(pair.source), " ".join(pair.target)
