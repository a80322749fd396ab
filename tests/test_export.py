"""`seq2seq export`: a run as a model folder in the Hugging Face layout (no pickle), which every decode
loads where it loads a run, with the same translations; pushing it with the hub's client (mocked: no
network here) and loading `hf://OWNER/NAME` from the client's cache, offline."""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
import sys
from pathlib import Path

import huggingface_hub
import huggingface_hub.constants as hub_constants
import pytest
import torch
import yaml
from helpers import (
    ENV,
    assert_one_line_error,
    make_run_dir,
    run_main,
    snapshot,
    tiny_config,
    tiny_model,
    write_corpus,
)
from safetensors.torch import load_file

import seq2seq_attn as s2s
from seq2seq_attn.errors import UserError
from seq2seq_attn.runs import export as exporting
from seq2seq_attn.runs import model_folder
from seq2seq_attn.runs.average import average_checkpoints
from seq2seq_attn.runs.checkpoint import load_checkpoint
from seq2seq_attn.runs.run_folder import load_trained

LINES = ["the cat sat", "", "a dog ran home"]
COMMIT = "0123456789abcdef0123456789abcdef01234567"  # a snapshot's name in the hub cache


def export(run: Path, folder: Path, *args: str) -> subprocess.CompletedProcess:
    result = run_main("export", str(run), "-o", str(folder), *args, text=True)
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def exported(tiny_run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny run exported (read-only: copy it to change it)."""
    folder = tmp_path_factory.mktemp("exported") / "tiny-model"
    export(tiny_run_dir, folder)
    return folder


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "src.txt"
    path.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    return path


def translate(model: str | Path, source: Path, *args: str) -> str:
    result = run_main("translate", "--model", str(model), "--input", str(source), *args, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def hub_cache(root: Path, folder: Path, repo: str = "owner/tiny") -> Path:
    """The hub client's cache layout holding `folder` as the main revision of model `repo`."""
    owner, name = repo.split("/")
    stored = root / f"models--{owner}--{name}"
    shutil.copytree(folder, stored / "snapshots" / COMMIT)
    (stored / "refs").mkdir()
    (stored / "refs" / "main").write_text(COMMIT)
    return root


def test_the_folder_holds_safetensors_the_config_the_vocabulary_and_a_card_and_no_pickle(
    exported: Path, tiny_run_dir: Path
) -> None:
    names = sorted(str(path.relative_to(exported)) for path in exported.rglob("*"))
    assert names == [
        "README.md",
        "config.json",
        "model.safetensors",
        "vocab",
        "vocab/manifest.json",
        "vocab/src.model",
        "vocab/tgt.model",
    ]
    assert not [path for path in exported.rglob("*") if path.suffix in (".pt", ".bin", ".pkl", ".pickle")]
    checkpoint = load_checkpoint(tiny_run_dir / "checkpoints" / "best.pt")
    weights = load_file(exported / "model.safetensors")
    assert weights.keys() == checkpoint["model"].keys()
    assert all(torch.equal(weights[name], tensor) for name, tensor in checkpoint["model"].items())
    header = json.loads((exported / "config.json").read_text(encoding="utf-8"))
    assert (header["library_name"], header["format"]) == ("seq2seq-attn", model_folder.FORMAT)
    assert header["config"] == checkpoint["config"]
    assert header["vocab_fingerprint"] == checkpoint["vocab_fingerprint"]
    assert header["checkpoint"] == {"run": "run", "step": 1, "file": "step-1.pt"}
    for name in ("src.model", "tgt.model", "manifest.json"):
        assert (exported / "vocab" / name).read_bytes() == (tiny_run_dir / "vocab" / name).read_bytes()


def test_tied_weights_are_stored_under_each_name_and_load_back_tied(tmp_path: Path) -> None:
    """safetensors refuses two names for one tensor: a tied embedding is written as two copies, and
    loading fills the one parameter from both (the same values)."""
    tied = tiny_model("gru-bi-1", "general", "rnnsearch", tie_embeddings=True, maxout_dim=8)
    exporting.write_weights(tied, tmp_path / "model.safetensors")
    weights = load_file(tmp_path / "model.safetensors")
    assert torch.equal(weights["decoder.output.weight"], weights["decoder.embed.weight"])
    loaded = tiny_model("gru-bi-1", "general", "rnnsearch", seed=1, tie_embeddings=True, maxout_dim=8)
    loaded.load_state_dict(weights)
    assert loaded.decoder.output.weight is loaded.decoder.embed.weight
    expected = tied.state_dict()
    assert all(torch.equal(tensor, expected[name]) for name, tensor in loaded.state_dict().items())


def test_the_card_describes_the_model_its_data_and_its_checkpoint(exported: Path, tiny_run_dir: Path) -> None:
    card = (exported / "README.md").read_text(encoding="utf-8")
    meta = front_matter(card)
    assert meta["library_name"] == "seq2seq-attn" and meta["pipeline_tag"] == "translation"
    assert {"translation", "seq2seq", "rnn", "gru", "rnnsearch"} <= set(meta["tags"])
    assert "language" not in meta and "license" not in meta  # a synthetic pair; no license known
    parameters = sum(p.numel() for p in load_trained(tiny_run_dir)[0].parameters())
    for fragment in (
        "an RNNsearch",
        "| attention | bahdanau, 16 units |",
        "| encoder | 1 x bidirectional gru, 16 units per direction |",
        f"| parameters | {parameters:,} |",
        "synthetic language pair, seed 1234",
        "Run `run`, update 1, checkpoint `step-1.pt`; the run recorded no dev score at that update.",
        "No evaluation report came with this model.",
        'model = s2s.load("hf://OWNER/NAME")',
    ):
        assert fragment in card, fragment


@pytest.mark.slow(seconds=12)
def test_translations_and_scores_from_the_folder_are_the_runs(
    exported: Path, tiny_run_dir: Path, source: Path, tmp_path: Path
) -> None:
    """Beam and greedy, n-best lists with their scores, forced-decoding scores: identical from the
    exported folder and from the run, through the API and the command line."""
    for beam in ("3", "1"):
        options = ["--beam", beam, "--nbest", beam, "--scores"]
        assert translate(exported, source, *options) == translate(tiny_run_dir, source, *options)
    run, folder = s2s.load(tiny_run_dir, beam_size=3), s2s.load(exported, beam_size=3)
    assert folder.translate(LINES) == run.translate(LINES)
    assert folder.nbest(LINES, 3) == run.nbest(LINES, 3)
    assert s2s.load(exported, beam_size=1).translate(LINES) == s2s.load(tiny_run_dir, beam_size=1).translate(
        LINES
    )
    targets = run.translate(LINES)
    assert folder.score(LINES, targets) == run.score(LINES, targets)
    reference = tmp_path / "ref.txt"
    reference.write_text("".join(line + "\n" for line in targets), encoding="utf-8")
    scored = [
        run_main("score", "--model", str(model), "--src", str(source), "--tgt", str(reference), text=True)
        for model in (tiny_run_dir, exported)
    ]
    assert scored[0].returncode == 0 and scored[0].stdout == scored[1].stdout


@pytest.mark.slow(seconds=10)
def test_eval_int8_the_lexical_shortlist_and_mixed_ensembles_from_the_folder(
    tiny_run_dir: Path, source: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run_dir, run)
    (tmp_path / "data").symlink_to(tiny_run_dir.parent / "data")
    learn = ["--top-k", "3", "--frequent", "4", "--sentences", "50"]
    assert run_main("lexical-shortlist", str(run), *learn).returncode == 0
    folder = tmp_path / "model"
    export(run, folder)
    assert (folder / "lexical_shortlist.npz").read_bytes() == (run / "lexical_shortlist.npz").read_bytes()
    for options in (
        ["--lexical-shortlist"],
        ["--precision", "int8"],
        ["--precision", "int8", "--lexical-shortlist"],
    ):
        result = run_main("translate", "--model", str(folder), "--input", str(source), *options, text=True)
        assert result.returncode == 0 and "learned from" not in result.stderr  # the table's own weights
        assert result.stdout == translate(run, source, *options)
    assert translate(folder, source, "--model", str(run)) == translate(run, source, "--model", str(run))
    assert s2s.load([run, folder]).translate(LINES) == s2s.load([run, run]).translate(LINES)

    reference = tmp_path / "ref.txt"
    reference.write_text(translate(run, source), encoding="utf-8")
    reports = []
    for model in (run, folder):
        report = tmp_path / f"{model.name}.json"
        args = ["--src", str(source), "--ref", str(reference), "--label", "m", "-o", str(report)]
        assert run_main("eval", "--model", str(model), "--bootstrap", "0", *args).returncode == 0
        reports.append(json.loads(report.read_text(encoding="utf-8"))["systems"])
    assert reports[0] == reports[1] and reports[0][0]["rows"][0]["chrf"] == 100.0


def test_an_averaged_export_is_the_mean_and_translates_as_translate_average(
    tmp_path: Path, source: Path
) -> None:
    config = tiny_config(tmp_path)
    write_corpus(config.data_dir)
    run = make_run_dir(config, steps=(1, 2))
    folder = tmp_path / "averaged"
    export(run, folder, "--average", "2")
    mean = average_checkpoints([run / "checkpoints" / f"step-{step}.pt" for step in (1, 2)])["model"]
    weights = load_file(folder / "model.safetensors")
    assert all(torch.equal(weights[name], tensor) for name, tensor in mean.items())
    header = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert header["checkpoint"] == {"run": "run", "step": 2, "averaged_from": ["step-1.pt", "step-2.pt"]}
    assert "the mean of step-1.pt, step-2.pt" in (folder / "README.md").read_text(encoding="utf-8")
    assert translate(folder, source) == translate(run, source, "--average", "2")
    assert_one_line_error(
        run_main("translate", "--model", str(folder), "--input", str(source), "--average", "2"),
        f"{folder}: an exported model folder holds one set of weights",
    )


def test_the_card_shows_the_eval_report_its_figure_and_the_dev_scores(
    trained_run: Path, tmp_path: Path
) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_text("a b c\nd e f g\n", encoding="utf-8")
    report = tmp_path / "report.json"
    evaluated = run_main(
        "eval",
        "--hyp",
        str(lines),
        "--ref",
        str(lines),
        "--src",
        str(lines),
        "--by-length",
        "--buckets",
        "0,4",
        "--bootstrap",
        "0",
        "--label",
        "tiny",
        "-o",
        str(report),
    )
    assert evaluated.returncode == 0, evaluated.stderr
    figure = tmp_path / "figure.png"
    figure.write_bytes(b"\x89PNG\r\n\x1a\n")
    folder = tmp_path / "model"
    export(trained_run, folder, "--report", str(report), "--plot", str(figure))
    assert (folder / "by_length.json").read_bytes() == report.read_bytes()
    assert (folder / "curve.png").read_bytes() == figure.read_bytes()
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert "`seq2seq eval`'s report `by_length.json`, systems `tiny`:" in card
    assert "![BLEU by source length](curve.png)" in card
    assert "| tiny | 0-4 | 1 |" in card and "| tiny | 4+ | 1 |" in card
    header = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    scores = header["checkpoint"]["validation"]
    assert header["checkpoint"]["step"] == 2 and set(scores) == {"loss", "ppl", "bleu"}
    assert f"update 2, checkpoint `{header['checkpoint']['file']}`: dev loss {scores['loss']:.4f}" in card
    assert "| pairs | train 400, valid 16, test 16 |" in card  # the data folder's manifest


def test_bad_input_and_unsafe_outputs_are_one_line_errors(
    exported: Path, tiny_run_dir: Path, tmp_path: Path
) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine", encoding="utf-8")
    out = tmp_path / "out"
    report = tmp_path / "report.json"
    report.write_text("{}", encoding="utf-8")
    cases = [
        (["-o", str(taken)], f"{taken}: not empty; give --force"),
        (["-o", str(taken), "--force"], f"{taken}: not empty and not an exported model folder"),
        (["-o", str(tmp_path / "no" / "out")], f"folder {tmp_path / 'no'} does not exist"),
        (["-o", str(out), "--plot", str(report)], "--plot is the figure of a report: give --report too"),
        (["-o", str(out), "--report", str(report)], f"{report}: not a report saved by `seq2seq eval"),
        (["-o", str(out), "--push", "no-owner"], "--push no-owner: name the model repository as OWNER/NAME"),
    ]
    for args, message in cases:
        assert_one_line_error(run_main("export", str(tiny_run_dir), *args), message)
    assert_one_line_error(run_main("export", str(tmp_path / "nope"), "-o", str(out)), "no such run directory")
    assert not out.exists() and (taken / "notes.txt").read_text(encoding="utf-8") == "mine"
    link = tmp_path / "current"  # a link to an earlier export: renaming over it would replace the link
    link.symlink_to(exported)
    before = sorted(tmp_path.iterdir())
    result = run_main("export", str(tiny_run_dir), "-o", str(link), "--force")
    assert_one_line_error(result, f"{link}: is a link; give the folder it names ({exported})")
    assert sorted(tmp_path.iterdir()) == before

    foreign = tmp_path / "foreign"  # another library's folder of the same two names
    foreign.mkdir()
    (foreign / "config.json").write_text('{"model_type": "bert"}', encoding="utf-8")
    shutil.copy(exported / "model.safetensors", foreign)
    source = tmp_path / "src.txt"
    source.write_text("a b\n", encoding="utf-8")
    unversioned = tmp_path / "unversioned"  # ours, its format a boolean
    shutil.copytree(exported, unversioned)
    header = json.loads((unversioned / "config.json").read_text(encoding="utf-8"))
    (unversioned / "config.json").write_text(json.dumps({**header, "format": True}), encoding="utf-8")
    newer = tmp_path / "newer"  # a key of a later version in its model section
    shutil.copytree(exported, newer)
    config = {**header["config"], "model": {**header["config"]["model"], "new_thing": 1}}
    (newer / "config.json").write_text(json.dumps({**header, "config": config}), encoding="utf-8")
    for model, message in (
        (newer, f"{newer / 'config.json'} (config): unknown key `model.new_thing`"),
        (foreign, f"{foreign / 'config.json'}: not a seq2seq-attn model folder"),
        (unversioned, f"{unversioned / 'config.json'}: format True, this seq2seq-attn reads format"),
        ("hf://only-a-name", "hf://only-a-name: name a model on the Hugging Face hub as hf://OWNER/NAME"),
        ("owner/missing", "(for a model on the Hugging Face hub, write hf://owner/missing)"),
    ):
        result = run_main("translate", "--model", str(model), "--input", str(source), cwd=tmp_path)
        assert_one_line_error(result, message)


def test_force_replaces_an_earlier_export_whole_or_not_at_all(
    exported: Path, tiny_run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "model"
    shutil.copytree(exported, folder)
    (folder / "stale.txt").write_text("from before", encoding="utf-8")
    before = snapshot(folder)

    def broken(model: torch.nn.Module, path: Path) -> None:
        path.write_bytes(b"half")
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(exporting, "write_weights", broken)
    assert run_main("export", str(tiny_run_dir), "-o", str(folder), "--force").returncode == 2
    assert snapshot(folder) == before and sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    monkeypatch.undo()
    export(tiny_run_dir, folder, "--force")
    assert not (folder / "stale.txt").exists() and snapshot(folder) == snapshot(exported)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # nothing left beside it


def test_export_into_the_working_directory_named_dot(tiny_run_dir: Path, tmp_path: Path) -> None:
    """`-o .` from inside an empty folder: the folder is exported into, not a rename of `.` refused."""
    here = tmp_path / "here"
    here.mkdir()
    assert run_main("export", str(tiny_run_dir), "-o", ".", cwd=here).returncode == 0
    assert (here / "model.safetensors").is_file() and sorted(tmp_path.iterdir()) == [here]


class FakeHfApi:
    """huggingface_hub.HfApi as `push_folder` uses it, recording each call."""

    calls: list[tuple[str, dict]] = []
    fail = False

    def create_repo(self, **kwargs: object) -> None:
        self.calls.append(("create_repo", kwargs))

    def upload_folder(self, **kwargs: object) -> None:
        self.calls.append(("upload_folder", kwargs))
        if self.fail:
            raise ConnectionError("[Errno 111] Connection refused")


def test_push_uploads_the_folder_with_the_hub_client(
    tiny_run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHfApi)
    monkeypatch.setattr(FakeHfApi, "calls", [])
    folder = tmp_path / "model"
    result = export(tiny_run_dir, folder, "--push", "owner/tiny")
    assert f"export: pushed {folder} to hf://owner/tiny" in result.stderr
    assert FakeHfApi.calls == [
        ("create_repo", {"repo_id": "owner/tiny", "repo_type": "model", "exist_ok": True}),
        (
            "upload_folder",
            {
                "folder_path": str(folder),
                "repo_id": "owner/tiny",
                "repo_type": "model",
                "commit_message": f"seq2seq export of {tiny_run_dir}",
            },
        ),
    ]
    assert 'model = s2s.load("hf://owner/tiny")' in (folder / "README.md").read_text(encoding="utf-8")
    monkeypatch.setattr(FakeHfApi, "fail", True)
    failed = run_main(
        "--quiet", "export", str(tiny_run_dir), "-o", str(folder), "--force", "--push", "owner/tiny"
    )
    assert_one_line_error(
        failed, f"hf://owner/tiny: push of {folder} failed: ConnectionError: [Errno 111] Connection refused"
    )
    assert (folder / "model.safetensors").is_file()  # the folder is written before the push


@pytest.mark.slow(seconds=5)
def test_a_hub_model_brings_its_report_and_training_record(
    tiny_run_dir: Path, source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading `hf://` fetches only the files loading reads (`LOADED_FILES`): those include the folder's
    BLEU-by-length report and training record, so the API and eval show them as for the local folder."""
    report = tmp_path / "report.json"
    args = [
        "--hyp",
        str(source),
        "--label",
        "tiny",
        "--src",
        str(source),
        "--ref",
        str(source),
        "--by-length",
    ]
    assert run_main("eval", *args, "--bootstrap", "0", "--output", str(report)).returncode == 0
    run = shutil.copytree(tiny_run_dir, tmp_path / "run")
    (run / "provenance.json").write_text('[{"from_step": 0}]\n', encoding="utf-8")  # as training writes it
    folder = tmp_path / "exported"
    export(run, folder, "--report", str(report))

    def snapshot_download(repo_id: str, allow_patterns: list[str], **_: object) -> str:
        """The hub's client, offline: the folder's files that `allow_patterns` name, nothing else."""
        fetched = tmp_path / "snapshot"
        for path in folder.rglob("*"):
            relative = path.relative_to(folder).as_posix()
            if path.is_file() and any(fnmatch.fnmatch(relative, pattern) for pattern in allow_patterns):
                (fetched / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, fetched / relative)
        return str(fetched)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    loaded = s2s.load("hf://owner/tiny")
    assert loaded.bleu_by_length == s2s.load(folder).bleu_by_length is not None
    assert (tmp_path / "snapshot" / "provenance.json").is_file()
    assert not (tmp_path / "snapshot" / "README.md").exists()  # the card is not needed to load
    (folder / "by_length.json").write_text("[]", encoding="utf-8")  # damaged: one line naming it
    with pytest.raises(UserError, match=f"^{folder / 'by_length.json'}: not a report of `seq2seq eval"):
        s2s.load(folder).bleu_by_length  # noqa: B018


@pytest.mark.slow(seconds=5)
def test_hf_models_load_from_the_hub_cache_offline(
    exported: Path, tiny_run_dir: Path, source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hf://OWNER/NAME` goes through huggingface_hub.snapshot_download: with HF_HUB_OFFLINE=1 and a cache
    laid out as the client lays it out, it resolves to the cached snapshot, and loads as the folder does."""
    cache = hub_cache(tmp_path / "hub", exported)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)  # (read by the client at import)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    snapshot_folder = cache / "models--owner--tiny" / "snapshots" / COMMIT
    assert Path(huggingface_hub.snapshot_download("owner/tiny")) == snapshot_folder
    expected = s2s.load(tiny_run_dir).translate(LINES)
    assert s2s.load("hf://owner/tiny").translate(LINES) == expected
    assert s2s.load(f"hf://owner/tiny@{COMMIT}").translate(LINES) == expected
    assert translate("hf://owner/tiny", source) == translate(tiny_run_dir, source)
    reference = tmp_path / "ref.txt"
    reference.write_text("".join(line + "\n" for line in expected), encoding="utf-8")
    scored = run_main(
        "eval", "--model", "hf://owner/tiny", "--src", str(source), "--ref", str(reference), cwd=tmp_path
    )
    assert scored.returncode == 0, scored.stderr
    assert (tmp_path / "src.tiny.hyp").read_text(
        encoding="utf-8"
    ).splitlines() == expected  # not in the cache
    assert snapshot(snapshot_folder) == snapshot(exported)
    assert_one_line_error(
        run_main("translate", "--model", "hf://owner/missing", "--input", str(source)),
        "hf://owner/missing: cannot fetch it from the Hugging Face hub: offline mode is on (HF_HUB_OFFLINE) "
        f"and it is not in the cache {cache}",
    )
    other = tmp_path / "other"
    other.mkdir()
    (other / "README.md").write_text("# another library's model\n", encoding="utf-8")
    hub_cache(cache, other, "owner/other")
    assert_one_line_error(
        run_main("translate", "--model", "hf://owner/other", "--input", str(source)),
        "hf://owner/other: not a model folder of `seq2seq export`",
    )
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub_constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens
    assert_one_line_error(
        run_main("translate", "--model", "hf://owner/missing", "--input", str(source)),
        "hf://owner/missing: cannot fetch it from the Hugging Face hub: the hub is unreachable",
    )


@pytest.mark.slow(seconds=8)
def test_the_command_line_reads_the_hub_cache_named_by_the_environment(
    exported: Path, tiny_run_dir: Path, source: Path, tmp_path: Path
) -> None:
    cache = hub_cache(tmp_path / "hub", exported)
    env = {**ENV, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "home")}
    command = [
        sys.executable,
        "-m",
        "seq2seq_attn",
        "--quiet",
        "translate",
        "--input",
        str(source),
        "--model",
    ]
    found = subprocess.run(
        [*command, "hf://owner/tiny"], capture_output=True, text=True, env=env, timeout=120
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout == translate(tiny_run_dir, source)
    missing = subprocess.run(
        [*command, "hf://owner/other"], capture_output=True, text=True, env=env, timeout=120
    )
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "hf://owner/other: cannot fetch it from the Hugging Face hub: offline mode is on" in missing.stderr


def test_the_card_says_what_the_model_and_the_folder_are():
    """Its decoder as configured (a Luong decoder may read no attentional vector back), and every file the
    folder ships: provenance.json when the run recorded what trained it."""
    from seq2seq_attn.runs.model_card import folder_files, summary

    feeding = tiny_config(model={"decoder": "luong", "attention": "general", "input_feeding": True})
    plain = tiny_config(model={"decoder": "luong", "attention": "general", "input_feeding": False})
    assert "decoder with input feeding" in summary(feeding)
    assert "decoder without input feeding" in summary(plain)
    assert "`provenance.json`" in dict(folder_files(False, None, True))
    assert "`provenance.json`" not in dict(folder_files(False, None, False))
