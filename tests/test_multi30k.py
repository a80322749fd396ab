"""`data.source: multi30k`: the official files read from a local copy or downloaded (from a local file
server here, `data.multi30k.url`), each checked against its sha256; a damaged file stops the work with one
line naming it. With the copy in ../shared/corpora/multi30k, the checksums are checked against it."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from helpers import assert_one_line_error, load_script, run_main

from seq2seq_attn.config import Multi30kConfig, load_config
from seq2seq_attn.data import multi30k
from seq2seq_attn.io import sha256_file

ROOT = Path(__file__).resolve().parent.parent
MULTI30K = ROOT.parent / "shared" / "corpora" / "multi30k"
needs_copy = pytest.mark.skipif(not MULTI30K.is_dir(), reason="the Multi30k copy of ../shared is not here")


DOG = {"en": "A dog", "fr": "Un chien", "de": "Ein Hund"}


def fake_files(folder: Path, tgt_lang: str = "fr") -> dict[str, str]:
    """A tiny stand-in of every file the pair en-`tgt_lang` needs, raw ones gzipped; returns their sha256."""
    folder.mkdir(parents=True, exist_ok=True)
    sizes = {"train": 40, "val": 6, "test_2016_flickr": 5, "test_2017_flickr": 4}
    for name in multi30k.needed("en", tgt_lang):
        split, lang = name.split(".")[0], name.removesuffix(".gz").rsplit(".", 1)[1]
        lines = [f"{DOG[lang]} number {i} of {split}." for i in range(sizes[split])]
        text = "".join(line + "\n" for line in lines).encode()
        (folder / name).write_bytes(gzip.compress(text, mtime=0) if name.endswith(".gz") else text)
    return {path.name: sha256_file(path) for path in folder.iterdir()}


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, str, list[str]]]:
    """An HTTP server in a thread serving tmp/site (raw/ and tok/ as the dataset lays them out): the
    site folder, its base URL, and the paths requested so far."""
    site, requested = tmp_path / "site", []
    site.mkdir()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(site), **kwargs)

        def do_GET(self) -> None:
            requested.append(self.path)
            super().do_GET()

        def log_message(self, *args: object) -> None:  # quiet
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    yield site, f"http://127.0.0.1:{httpd.server_address[1]}", requested
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def publish(files: Path, site: Path) -> None:
    """The files laid out as the dataset's repository does: raw/*.gz and tok/*."""
    for path in files.iterdir():
        target = site / ("raw" if path.suffix == ".gz" else "tok") / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)


def write_config(tmp_path: Path, **multi30k_keys: object) -> Path:
    raw = {
        "name": "m30k",
        "data": {"source": "multi30k", "dir": str(tmp_path / "data"), "multi30k": multi30k_keys},
    }
    path = tmp_path / "m30k.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def prepare(config: Path):
    return run_main("--quiet", "data", "prepare", str(config))


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in files in tmp/official, with their checksums in place of the real ones."""
    monkeypatch.setattr(multi30k, "SHA256", fake_files(tmp_path / "official"))
    return tmp_path / "official"


def test_download_from_a_file_server_checks_every_file_and_prepares_the_official_splits(
    tmp_path, fake, server
):
    site, url, requested = server
    publish(fake, site)
    config = write_config(tmp_path, dir=str(tmp_path / "downloaded"), download=True, url=url)
    result = prepare(config)
    assert result.returncode == 0, result.stderr
    assert sorted(requested) == sorted(
        f"/{'raw' if name.endswith('.gz') else 'tok'}/{name}" for name in multi30k.needed("en", "fr")
    )
    for name in multi30k.needed("en", "fr"):
        assert (tmp_path / "downloaded" / name).read_bytes() == (fake / name).read_bytes()
    data = tmp_path / "data"
    assert (data / "valid.src").read_text().splitlines() == [f"A dog number {i} of val." for i in range(6)]
    assert len((data / "test.tgt").read_text().splitlines()) == 5  # test_2016_flickr is the test split
    assert len((data / "train.tgt").read_text().splitlines()) == 40
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["source"]["type"] == "multi30k" and manifest["source"]["commit"] == multi30k.COMMIT

    requested.clear()  # the files are there: checked, not downloaded again
    assert prepare(config).returncode == 0 and requested == []


def test_a_corrupted_download_is_a_one_line_error_naming_the_file_and_nothing_is_written(
    tmp_path, fake, server
):
    site, url, _ = server
    publish(fake, site)
    corrupted = site / "raw" / "val.fr.gz"
    corrupted.write_bytes(corrupted.read_bytes()[:-3] + b"xyz")
    folder = tmp_path / "downloaded"
    result = prepare(write_config(tmp_path, dir=str(folder), download=True, url=url))
    target = folder / "val.fr.gz"
    assert_one_line_error(result, f"{target}: the download from {url}/raw/val.fr.gz has sha256", "nothing")
    assert not target.exists() and not list(folder.glob(".*.tmp"))
    assert not (tmp_path / "data" / "manifest.json").exists()


def test_a_file_the_server_lacks_is_a_one_line_error(tmp_path, fake, server):
    site, url, _ = server
    publish(fake, site)
    (site / "tok" / "test_2017_flickr.lc.norm.tok.fr").unlink()
    result = prepare(write_config(tmp_path, dir=str(tmp_path / "downloaded"), download=True, url=url))
    assert_one_line_error(result, "test_2017_flickr.lc.norm.tok.fr: download from", "404")


def test_a_local_copy_is_read_in_place_and_each_file_checked(tmp_path, fake):
    config = write_config(tmp_path, dir=str(fake))
    result = prepare(config)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "data" / "manifest.json").read_text())["source"]["files"]["test"] == [
        str(fake / "test_2016_flickr.en.gz"),
        str(fake / "test_2016_flickr.fr.gz"),
    ]
    damaged = fake / "train.en.gz"
    damaged.write_bytes(gzip.compress(b"A cat.\n" * 40, mtime=0))
    assert_one_line_error(prepare(config), f"{damaged}: sha256 ", "is not the official file's")


def test_a_missing_file_without_download_names_the_file_and_the_way_out(tmp_path, fake):
    (fake / "val.lc.norm.tok.fr").unlink()
    assert_one_line_error(
        prepare(write_config(tmp_path, dir=str(fake))),
        f"{fake / 'val.lc.norm.tok.fr'}: file not found",
        "data.multi30k.download: true",
    )


def test_languages_outside_the_files_are_one_line_errors(tmp_path, fake):
    config = write_config(tmp_path, dir=str(fake))
    result = run_main("--quiet", "data", "prepare", str(config), "--set", "data.tgt_lang=cs")
    assert_one_line_error(result, "`data.tgt_lang` 'cs'", "en, de, fr")


@pytest.mark.parametrize("tgt_lang", ["fr", "de"])
def test_the_recipe_configs_prepare_from_a_copy_and_score_both_official_test_sets(
    tmp_path, monkeypatch, tgt_lang
):
    official = tmp_path / "official"
    monkeypatch.setattr(multi30k, "SHA256", fake_files(official, tgt_lang))
    config = ROOT / "configs" / f"multi30k_en{tgt_lang}.yaml"
    sets = [f"data.multi30k.dir={official}", f"data.dir={tmp_path / 'data'}"]
    result = run_main("--quiet", "data", "prepare", str(config), *(f"--set={item}" for item in sets))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "data" / "test.tgt").read_text().startswith(f"{DOG[tgt_lang]} number 0 of test_2016")
    assert load_script("reproduce").test_sets(load_config(config, sets)) == [
        (
            name,
            official / f"{name}.en.gz",
            official / f"{name}.{tgt_lang}.gz",
            official / f"{name}.lc.norm.tok.{tgt_lang}",
        )
        for name in ("test_2016_flickr", "test_2017_flickr")
    ]


@needs_copy
def test_the_checksums_are_those_of_the_shared_copy():
    assert {name: sha256_file(MULTI30K / name) for name in multi30k.SHA256} == multi30k.SHA256


@needs_copy
def test_the_real_files_download_and_check(tmp_path, server):
    site, url, _ = server
    publish(MULTI30K, site)
    folder = multi30k.fetch(Multi30kConfig(dir=str(tmp_path / "got"), download=True, url=url), "de", "en")
    for name in multi30k.needed("de", "en"):
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == multi30k.SHA256[name]
