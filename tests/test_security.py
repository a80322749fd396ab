"""Nothing the tool loads can run code: checkpoints load with `torch.load(weights_only=True)`, configs with
`yaml.safe_load`; no shell ever sees a user's string; config paths resolve against the config's folder.
The server answers only its own names (no DNS rebinding) and shows no path of the machine.

The payloads used here create a file when executed; the control tests show they really do under an
unsafe loader, so the refusal tests could fail.
"""

from __future__ import annotations

import ast
import pickle
import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from fastapi.testclient import TestClient
from helpers import assert_one_line_error, run_main, snapshot

import seq2seq_attn
from seq2seq_attn.errors import UserError
from seq2seq_attn.runs.checkpoint import load_checkpoint
from seq2seq_attn.serving.app import create_app
from seq2seq_attn.serving.hosting import ModelSpec, host_models
from seq2seq_attn.serving.middleware import allowed_hosts


class CreatesFile:
    """Unpickling this calls open(path, "w"): the file appears if, and only if, the payload runs."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def crafted(source: Path, target: Path, marker: Path, writer: str = "zip") -> Path:
    """A copy of the real checkpoint `source` with a payload hidden in it, written as torch's zip
    archive, torch's legacy format, or a bare pickle."""
    payload = torch.load(source, weights_only=True)
    payload["config"]["note"] = CreatesFile(marker)
    if writer == "pickle":
        target.write_bytes(pickle.dumps(payload))
    else:
        torch.save(payload, target, _use_new_zipfile_serialization=writer == "zip")
    return target


def tiny_best(run: Path) -> Path:
    return (run / "checkpoints" / "best.pt").resolve()


def test_the_checkpoint_payload_runs_under_an_unsafe_loader(tiny_run_dir, tmp_path):
    marker = tmp_path / "pwned"
    torch.load(crafted(tiny_best(tiny_run_dir), tmp_path / "evil.pt", marker), weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize(
    ("writer", "message"),
    [
        ("zip", "refused to load checkpoint: it holds more than tensors and plain data (it references the"),
        ("legacy", "corrupt or truncated checkpoint (not a torch zip archive)"),
        ("pickle", "corrupt or truncated checkpoint (not a torch zip archive)"),
    ],
)
def test_load_checkpoint_refuses_a_pickle_payload(tiny_run_dir, tmp_path, writer, message):
    marker = tmp_path / "pwned"
    evil = crafted(tiny_best(tiny_run_dir), tmp_path / "evil.pt", marker, writer)
    with pytest.raises(UserError, match=re.escape(f"evil.pt: {message}")):
        load_checkpoint(evil)
    assert not marker.exists()


def crafted_run(tmp: Path, get) -> Path:
    """A copy of the tiny run whose best checkpoint carries the payload."""
    run = tmp / "run"
    shutil.copytree(get("tiny_run_dir"), run, symlinks=True)
    crafted(tiny_best(run), tiny_best(run), tmp / "pwned")
    return run


def translate_args(tmp: Path, get) -> list[str]:
    (tmp / "in.txt").write_text("the cat\n", encoding="utf-8")
    return ["translate", "--model", str(crafted_run(tmp, get)), "-i", str(tmp / "in.txt")]


def average_args(tmp: Path, get) -> list[str]:
    return ["average", str(crafted_run(tmp, get)), "--last", "1", "-o", str(tmp / "averaged.pt")]


def resume_args(tmp: Path, get) -> list[str]:
    run = tmp / "run"
    shutil.copytree(get("trained_run"), run, symlinks=True)
    latest = run / "checkpoints" / "latest.pt"
    crafted(latest, latest, tmp / "pwned")
    return ["train", str(get("prepared") / "tiny.yaml"), "--set", f"train.run_dir={run}"]


@pytest.mark.parametrize(
    "build", [translate_args, average_args, resume_args], ids=["translate", "average", "resume"]
)
def test_cli_refuses_a_pickle_payload_and_never_runs_it(build, tmp_path, request):
    args = build(tmp_path, request.getfixturevalue)
    before = snapshot(tmp_path)
    assert_one_line_error(
        run_main("--quiet", *args, cwd=tmp_path), "refused to load checkpoint", "it references the"
    )
    assert not (tmp_path / "pwned").exists()
    assert snapshot(tmp_path) == before


# ----------------------------------------------------------------------------------------------------------
# YAML


def yaml_payload(marker: Path) -> str:
    return f'!!python/object/apply:builtins.open ["{marker}", "w"]'


def test_the_yaml_payload_runs_under_an_unsafe_loader(tmp_path):
    yaml.unsafe_load(yaml_payload(tmp_path / "pwned"))
    assert (tmp_path / "pwned").exists()


@pytest.mark.parametrize("where", ["file", "--set"])
def test_a_python_tag_in_a_config_is_a_one_line_error_and_runs_nothing(tmp_path, where):
    marker = tmp_path / "pwned"
    config = tmp_path / "exp.yaml"
    if where == "file":
        config.write_text(f"train:\n  max_steps: {yaml_payload(marker)}\n", encoding="utf-8")
        expected = ["exp.yaml:2: invalid YAML", "python/object/apply:builtins.open"]
    else:
        config.write_text("name: x\n", encoding="utf-8")
        expected = ["`train.max_steps` must be an integer, got '!!python/object/apply:builtins.open"]
    options = ["--set", f"train.max_steps={yaml_payload(marker)}"] if where == "--set" else []
    assert_one_line_error(run_main("--quiet", "train", str(config), *options, cwd=tmp_path), *expected)
    assert not marker.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml"]  # no data/ or runs/: nothing ran


# ----------------------------------------------------------------------------------------------------------
# the source itself: no unsafe loader, no shell

UNSAFE_MODULE_LOADS = {"pickle", "marshal", "dill", "cloudpickle"}
UNSAFE_YAML = {"load", "load_all", "full_load", "full_load_all", "unsafe_load", "unsafe_load_all"}
UNSAFE_KEYWORDS = {"shell", "allow_pickle", "trust_remote_code"}  # must never be true


def unsafe_calls(source: str) -> list[str]:
    """Calls in `source` that could run code from data or hand a string to a shell."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func, where = node.func, f"line {node.lineno}: {ast.unparse(node)[:80]}"
        keywords = {k.arg: k.value for k in node.keywords}
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
        name = func.attr if isinstance(func, ast.Attribute) else ""
        risky = (
            (owner in UNSAFE_MODULE_LOADS and name in {"load", "loads", "Unpickler"})
            or (owner == "yaml" and name in UNSAFE_YAML)
            or (owner == "os" and name in {"system", "popen"})
            or (owner == "torch" and name == "load" and not _is_true(keywords.get("weights_only")))
            or (isinstance(func, ast.Name) and func.id in {"eval", "exec"})
            or any(
                _is_true(keywords[k]) or not isinstance(keywords[k], ast.Constant)
                for k in UNSAFE_KEYWORDS & keywords.keys()
            )
        )
        if risky:
            found.append(where)
    return found


def _is_true(value: ast.expr | None) -> bool:
    return isinstance(value, ast.Constant) and value.value is True


@pytest.mark.parametrize(
    ("snippet", "unsafe"),
    [
        ("subprocess.run(command, shell=True)", True),
        ("subprocess.run(command, shell=user_choice)", True),
        ("os.system(command)", True),
        ("os.popen(command)", True),
        ("yaml.load(text, Loader=yaml.Loader)", True),
        ("yaml.unsafe_load(text)", True),
        ("pickle.load(handle)", True),
        ("pickle.loads(data)", True),
        ("torch.load(path)", True),
        ("torch.load(path, weights_only=False)", True),
        ("np.load(path, allow_pickle=True)", True),
        ("datasets.load_dataset(name, trust_remote_code=True)", True),
        ("eval(text)", True),
        ("torch.load(path, map_location='cpu', weights_only=True)", False),
        ("yaml.safe_load(text)", False),
        ("subprocess.run(['git', 'status'], check=True)", False),
        ("np.load(path, mmap_mode='r')", False),
        ("model.eval()", False),
        ("model.to(device).eval()", False),
    ],
)
def test_the_source_scan_tells_safe_from_unsafe(snippet, unsafe):
    assert bool(unsafe_calls(snippet)) == unsafe


def test_no_module_loads_unsafely_or_uses_a_shell():
    package = Path(seq2seq_attn.__file__).parent
    files = sorted(package.rglob("*.py"))
    assert len(files) > 20
    found = {
        str(f.relative_to(package)): calls for f in files if (calls := unsafe_calls(f.read_text("utf-8")))
    }
    assert found == {}


# ----------------------------------------------------------------------------------------------------------
# config paths


def test_config_paths_resolve_against_the_config_folder_not_the_working_directory(tmp_path):
    folder = tmp_path / "experiments" / "en-fr"
    folder.mkdir(parents=True)
    (folder / "exp.yaml").write_text(
        "data:\n  dir: prepared\n  local:\n    train: {src: ../corpus/train.en, tgt: /abs/train.fr}\n"
        "train:\n  run_dir: runs/x\n",
        encoding="utf-8",
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run_main(
        "--quiet",
        "config",
        str(folder / "exp.yaml"),
        "--set",
        "decode.unk_dictionary=dict.tsv",
        cwd=elsewhere,
    )
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    assert resolved["data"]["dir"] == str(folder / "prepared")
    assert resolved["data"]["local"]["train"] == {
        "src": str(tmp_path / "experiments" / "corpus" / "train.en"),
        "tgt": "/abs/train.fr",
        "tsv": "",
    }
    assert resolved["train"]["run_dir"] == str(folder / "runs" / "x")
    assert resolved["decode"]["unk_dictionary"] == str(folder / "dict.tsv")  # --set paths too
    assert list(elsewhere.iterdir()) == []


# ----------------------------------------------------------------------------------------------------------
# the server: only its own names, no machine paths


@pytest.fixture
def served(tiny_run_dir, monkeypatch):
    """A server of the tiny run, started in the run's parent folder (where paths are shown from)."""
    monkeypatch.chdir(tiny_run_dir.parent)
    specs = [
        ModelSpec(100, [str(tiny_run_dir)], name="tiny"),
        ModelSpec(7, [str(tiny_run_dir / "checkpoints" / "best.pt")]),
    ]
    with TestClient(create_app(host_models(specs)), base_url="http://127.0.0.1:5000") as client:
        yield client


@pytest.mark.parametrize("host", ["evil.example", "evil.example:5000", "127.0.0.1.evil.example", "[::2]"])
def test_the_server_refuses_a_host_not_its_own(served, host):
    # a page of evil.example whose name was rebound to 127.0.0.1 sends its own name as the Host
    answer = served.get("/v1/models", headers={"host": host})
    assert answer.status_code == 400
    assert answer.json() == {"error": "invalid Host header", "status": "error"}  # as every refusal


@pytest.mark.parametrize("host", ["127.0.0.1:5000", "localhost:5000", "localhost", "[::1]:5000"])
def test_the_server_answers_its_own_names(served, host):
    assert served.get("/v1/health", headers={"host": host}).status_code == 200


def test_no_answer_echoes_the_clients_host(served):
    answer = served.get("/v1/models/", headers={"host": "localhost:5000"}, follow_redirects=False)
    assert answer.status_code == 404 and "location" not in answer.headers


@pytest.mark.parametrize(
    ("bind", "named", "allowed", "warned"),
    [
        ("127.0.0.1", [], ["127.0.0.1", "localhost", "[::1]"], False),
        ("localhost", ["mt.example"], ["127.0.0.1", "localhost", "[::1]", "mt.example"], False),
        ("192.168.1.5", [], ["127.0.0.1", "localhost", "[::1]", "192.168.1.5"], False),
        ("::1", [], ["127.0.0.1", "localhost", "[::1]"], False),
        (
            "0.0.0.0",
            ["mt.example", "*.mt.example"],
            ["127.0.0.1", "localhost", "[::1]", "mt.example", "*.mt.example"],
            False,
        ),
        ("0.0.0.0", [], ["*"], True),
        ("::", [], ["*"], True),
        ("127.0.0.1", ["*"], ["*"], False),
    ],
)
def test_the_allowed_hosts_are_the_bound_names_and_those_given(bind, named, allowed, warned):
    hosts, warning = allowed_hosts(bind, named)
    assert hosts == allowed
    assert bool(warning) == warned
    if warned:
        assert "--allowed-host" in warning and "\n" not in warning


def test_listings_and_cards_show_no_path_of_the_machine(served, tiny_run_dir):
    answers = [served.get(route).json() for route in ["/v1/models", "/translator/models"]]
    answers += [served.get(f"/v1/models/{model_id}").json() for model_id in (100, 7)]
    strings = _strings(answers)
    assert not [text for text in strings if text.startswith("/") or str(tiny_run_dir) in text]
    card = answers[2]
    assert card["models"] == ["run"]  # relative to where the server started
    assert card["config"]["train"]["run_dir"] == "run" and card["config"]["data"]["dir"] == "data"
    assert [Path(path).parts[0] for path in card["checkpoints"]] == ["run"]
    assert answers[1][1]["models"] == [str(Path("run", "checkpoints", "best.pt"))]


def test_a_path_outside_where_the_server_started_shows_as_its_name(tiny_run_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with TestClient(
        create_app(host_models([ModelSpec(100, [str(tiny_run_dir)])])), base_url="http://localhost"
    ) as client:
        card = client.get("/v1/models/100").json()
    assert card["models"] == [tiny_run_dir.name]
    assert not [text for text in _strings(card) if text.startswith("/")]


def _strings(value) -> list[str]:
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return [value] if isinstance(value, str) else []


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "http://evil.example"},
        {"origin": "null"},
        {"origin": "http://127.0.0.1:5001"},  # another port is another origin
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
        {"origin": "http://127.0.0.1:5000", "sec-fetch-site": "cross-site"},
    ],
)
def test_the_server_refuses_a_request_from_a_page_elsewhere(served, headers):
    # a page elsewhere may POST text/plain without a preflight, and the server reads any body as JSON
    body = '{"model": 100, "sentences": ["the cat"]}'
    answer = served.post("/v1/translate", content=body, headers={"content-type": "text/plain", **headers})
    assert answer.status_code == 403
    assert answer.json() == {"error": "cross-site request refused", "status": "error"}


@pytest.mark.parametrize(
    "headers",
    [
        {"content-type": "application/x-www-form-urlencoded"},  # OpenNMT-py's clients: `curl -d`
        {"origin": "http://127.0.0.1:5000", "sec-fetch-site": "same-origin"},  # the server's own page
        {"sec-fetch-site": "none"},  # typed into the address bar
    ],
)
def test_the_server_answers_its_own_page_and_clients_that_are_not_browsers(served, headers):
    body = '[{"src": "the cat", "id": 100}]'
    assert served.post("/translator/translate", content=body, headers=headers).status_code == 200


def test_a_link_elsewhere_still_opens_the_page(served):
    followed = {"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate"}
    assert served.get("/?q=the+cat", headers=followed).status_code == 200
