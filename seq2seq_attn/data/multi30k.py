"""Multi30k task 1: the official files, from a local copy or downloaded, each checked against its sha256.

Multi30k (Elliott et al. 2016, github.com/multi30k/dataset) holds image captions in English with their
German and French translations, 29,000 training pairs of about 13 words: the public benchmark on which
the WMT 2016-2018 multimodal tasks compared systems, with BLEU on lowercased, tokenised text against its
processed references (`moses.task_pipeline`). A number comparable with theirs needs their very files, so
the checksums below are those of the dataset's commit `COMMIT`, and every file is checked, whether it was
found in `data.multi30k.dir` or downloaded there: a file that differs stops the work with one line
naming it, before anything is prepared from it.

The pipeline's splits are the official ones: train trains, val picks the checkpoint, test_2016_flickr is
the prepared test split. `test_sets` names both test sets the tasks scored, test_2016_flickr and
test_2017_flickr, with the task's processed references (`seq2seq eval --task-ref`).

A download is written to a temporary file beside its destination and renamed into place only once its
checksum is right (io.atomic_write), so an interrupted or corrupted download leaves no file behind that
would look complete.
"""

from __future__ import annotations

import hashlib
import http.client
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ..config import Multi30kConfig
from ..console import info
from ..errors import UserError
from ..io import atomic_write, sha256_file

COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
OFFICIAL_URL = f"https://raw.githubusercontent.com/multi30k/dataset/{COMMIT}/data/task1"
DEFAULT_DIR = Path("data") / "multi30k-task1"  # under the working directory, as data.dir's default
LANGS = ("en", "de", "fr")
SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}  # pipeline split -> official one
TEST_SETS = ("test_2016_flickr", "test_2017_flickr")
TIMEOUT_S = 60  # a download that sends nothing for this long fails
CHUNK = 1 << 16

SHA256 = {  # the files of data/task1 at COMMIT
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.fr.gz": "3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496",
    "val.lc.norm.tok.en": "46573ce391ae227f1c72f873392436a20ef18e0a6d518098cfbd70b77c8572ec",
    "val.lc.norm.tok.de": "97232bd273eceb7207f689527386a97e4be2616b18ada47576bdaf96c8ae1f00",
    "val.lc.norm.tok.fr": "b303e301aa21fe7822a846b2b3fb2d5a1121ec807cd5b1d006fb7b2b5507168a",
    "test_2016_flickr.lc.norm.tok.en": "5b7f32627cf99eced828311b955dae9800bb52bc8b91cf8b6526829e605b29d2",
    "test_2016_flickr.lc.norm.tok.de": "c6a33d39d48f9f510de147651316cd9d918e09ad0219df734a2f16b6baccacc4",
    "test_2016_flickr.lc.norm.tok.fr": "1463bd5960f9bfe098ec3cd752d3df0c49c84dc646fb518964a29232658cd836",
    "test_2017_flickr.lc.norm.tok.en": "c9d1dfd7a26add989382e534af235af9f0f658b2a30e7eb0efdaf142496ee54f",
    "test_2017_flickr.lc.norm.tok.de": "02067e4a9402786a4fcb8c1b6f4307e4a5073ced64800abead5273b54f5f31f6",
    "test_2017_flickr.lc.norm.tok.fr": "c0583117a47b31e8a6c6a97cfe8de153e462074668f4e994764fcc80b21d33b4",
}


@dataclass(frozen=True)
class TestSet:
    """One official test set of a language pair: raw sources and references, and the references as the
    task processed them (for its BLEU)."""

    name: str
    src: Path
    ref: Path
    task_ref: Path


def raw_name(split: str, lang: str) -> str:
    return f"{split}.{lang}.gz"


def task_name(split: str, lang: str) -> str:
    return f"{split}.lc.norm.tok.{lang}"


def needed(src_lang: str, tgt_lang: str) -> list[str]:
    """The files a language pair uses: every split of both sides, the processed references of the target
    side's dev and test sets."""
    scored = [SPLITS["valid"], *TEST_SETS]
    raw = [raw_name(split, lang) for split in ("train", *scored) for lang in (src_lang, tgt_lang)]
    return raw + [task_name(split, tgt_lang) for split in scored]


def folder_of(config: Multi30kConfig) -> Path:
    return Path(config.dir) if config.dir else DEFAULT_DIR


def fetch(config: Multi30kConfig, src_lang: str, tgt_lang: str) -> Path:
    """The folder holding every file the pair needs, each checked against its sha256; with
    `config.download`, the missing ones are downloaded into it first."""
    check_languages(src_lang, tgt_lang)
    folder = folder_of(config)
    for name in needed(src_lang, tgt_lang):
        path = folder / name
        if path.is_file():
            check_file(path)
        elif config.download:
            download(f"{config.url or OFFICIAL_URL}/{'raw' if name.endswith('.gz') else 'tok'}/{name}", path)
        else:
            raise UserError(
                f"`data.multi30k.dir`: {path}: file not found; point data.multi30k.dir at a copy of the "
                "official files, or set data.multi30k.download: true to download them"
            )
    return folder


def check_languages(src_lang: str, tgt_lang: str) -> None:
    for key, lang in (("data.src_lang", src_lang), ("data.tgt_lang", tgt_lang)):
        if lang not in LANGS:
            raise UserError(f"`{key}` {lang!r}: the Multi30k files here are in {', '.join(LANGS)}")
    if src_lang == tgt_lang:
        raise UserError(f"`data.src_lang` and `data.tgt_lang` are both {src_lang!r}: translate between two")


def check_file(path: Path) -> None:
    """A file found in the folder is the official one, or the work stops here."""
    found = sha256_file(path)
    if found != SHA256[path.name]:
        raise UserError(
            f"{path}: sha256 {found[:12]}... is not the official file's {SHA256[path.name][:12]}... "
            f"(github.com/multi30k/dataset at {COMMIT[:7]}): replace it, or delete it and set "
            "data.multi30k.download: true"
        )


def download(url: str, path: Path) -> None:
    """`url` into `path`, kept only when its sha256 is the official file's (else nothing is written)."""
    info(f"downloading {url}")
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with atomic_write(path, "wb") as handle:
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
                while chunk := response.read(CHUNK):
                    digest.update(chunk)
                    handle.write(chunk)
        except (OSError, http.client.HTTPException) as err:  # (urllib's errors are OSErrors)
            reason = err if isinstance(err, urllib.error.HTTPError) else getattr(err, "reason", err)
            raise UserError(f"{path}: download from {url} failed ({reason}); nothing was written") from None
        if digest.hexdigest() != SHA256[path.name]:
            raise UserError(
                f"{path}: the download from {url} has sha256 {digest.hexdigest()[:12]}..., not the official "
                f"file's {SHA256[path.name][:12]}...: a corrupted or another file; nothing was written"
            )


def split_files(folder: Path, split: str, src_lang: str, tgt_lang: str) -> tuple[Path, Path]:
    """The (source, target) files of a pipeline split ("train", "valid", "test")."""
    official = SPLITS[split]
    return folder / raw_name(official, src_lang), folder / raw_name(official, tgt_lang)


def test_sets(config: Multi30kConfig, src_lang: str, tgt_lang: str) -> list[TestSet]:
    """Both official test sets of the pair, in the folder `fetch` fills."""
    folder = folder_of(config)
    return [
        TestSet(
            name,
            folder / raw_name(name, src_lang),
            folder / raw_name(name, tgt_lang),
            folder / task_name(name, tgt_lang),
        )
        for name in TEST_SETS
    ]
