"""The models a server hosts: each loaded once through the Python API (`seq2seq_attn.load`) under an id,
with its own search thread and micro-batcher.

A server hosts one model (`seq2seq serve --model RUN`, several `--model`s making one ensemble, as in
`translate`) or several side by side from a JSON file in the layout of OpenNMT-py's `conf.json`, so a
client's `"id"` picks the model as it does there:

    {"models": [
        {"id": 100, "model": "runs/en-fr", "name": "en-fr", "opt": {"beam_size": 5}},
        {"id": 101, "models": ["runs/a", "runs/b"], "opt": {"precision": "int8"}}
    ]}

`opt` holds `decode` keys, checked as in a config file, and OpenNMT-py's translate options: those that
mean one of ours are read as it (`OPENNMT_KEYS`: `n_best` as `nbest`, `length_penalty: wu` as `gnmt`,
...), the others (`gpu`, `batch_size`, `max_length`, ...) are ignored with a one-line warning, so that a
conf.json written for OpenNMT-py's server starts ours. Paths are relative to the file. A model is searched
exactly as `translate` and the API search it: the run's decode settings with the overrides given.

What a client is shown of a model (its listing, its card) holds no path of the machine: a path under the
folder the server started in shows relative to it, any other as its name.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..api import Found, Model, load
from ..config import DecodeConfig
from ..config.loader import to_dict
from ..console import warn
from ..decoding.search import between_steps
from ..errors import UserError
from ..evaluation.models.likelihood import Score
from .batching import MicroBatcher
from .limits import BatchLimits, Refusal
from .middleware import STOPPING
from .threads import FreshThreads, in_own_thread
from .turns import Turn, Turns

DEFAULT_ID = 100  # the id OpenNMT-py's examples send
SEARCH_THREADS = 16  # a model's searches at once: more than the lanes of any sentence length (batching.py)
# OpenNMT-py's translate options that mean one of our decode keys: its name -> ours, and its values -> ours
OPENNMT_KEYS: dict[str, tuple[str, dict[str, Any]]] = {
    "n_best": ("nbest", {}),
    "min_length": ("min_len", {}),
    "block_ngram_repeat": ("no_repeat_ngram", {}),
    "ban_unk_token": ("no_unk", {}),
    "length_penalty": ("length_penalty", {"wu": "gnmt", "avg": "average"}),
    "coverage_penalty": ("coverage_penalty", {"none": 0.0}),  # its "wu" takes `beta`: ours is that beta
}
DECODE_KEYS = {key.name for key in dataclasses.fields(DecodeConfig)}


@dataclass(frozen=True)
class ModelSpec:
    """What to host under `id`: one run (or several, an ensemble) and the decode keys it overrides."""

    id: int
    paths: list[str]
    decode: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    report_align: bool = False  # OpenNMT-py's option: answer `/translate` with word alignments


def read_conf(path: str | Path) -> list[ModelSpec]:
    """The models of a conf.json file (see the module docstring), each checked, ids unique."""
    path = Path(path)
    try:
        conf = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise UserError(f"{path}:{error.lineno}: not JSON ({error.msg})") from None
    entries = conf.get("models") if isinstance(conf, dict) else None
    if not isinstance(entries, list) or not entries:
        raise UserError(f'{path}: expected {{"models": [...]}} with at least one model')
    specs = [_spec(entry, f"{path}: models[{n}]", path.parent) for n, entry in enumerate(entries)]
    ids = [spec.id for spec in specs]
    if len(set(ids)) != len(ids):
        raise UserError(f"{path}: model ids must differ, got {ids}")
    return specs


def _spec(entry: Any, where: str, base: Path) -> ModelSpec:
    if not isinstance(entry, dict):
        raise UserError(f'{where}: expected an object with "id" and "model"')
    paths = entry.get("models", entry.get("model"))
    paths = [paths] if isinstance(paths, str) else paths
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        raise UserError(f'{where}: "model" must be a path, or "models" a list of paths')
    model_id = entry.get("id", DEFAULT_ID)
    if not isinstance(model_id, int) or isinstance(model_id, bool):
        raise UserError(f"{where}.id: expected an integer, got {model_id!r}")
    opt = entry.get("opt", {})
    if not isinstance(opt, dict):
        raise UserError(f"{where}.opt: expected an object of decode keys")
    decode = _decode_keys({key: value for key, value in opt.items() if key != "report_align"}, where)
    name = entry.get("name", "")
    paths = [str(base / p) for p in paths]
    return ModelSpec(model_id, paths, decode, str(name), bool(opt.get("report_align", False)))


def _decode_keys(opt: dict[str, Any], where: str) -> dict[str, Any]:
    """`opt` as our decode keys: ours as they are, OpenNMT-py's read as ours (`OPENNMT_KEYS`), any other
    ignored with one warning line naming them."""
    decode, ignored = {}, []
    for key, value in opt.items():
        ours, values = OPENNMT_KEYS.get(key, (key, {}))
        if ours not in DECODE_KEYS:
            ignored.append(key)
            continue
        decode[ours] = values.get(value, value) if isinstance(value, str) else value
    if ignored:
        warn(f"serve: {where}.opt: {', '.join(ignored)}: not decode keys, ignored")
    return decode


class HostedModel:
    """One hosted model: the loaded API model, its search threads (one per search, serving/threads.py,
    which take turns on its cores, serving/turns.py) and its micro-batcher."""

    def __init__(self, spec: ModelSpec, model: Model, limits: BatchLimits, mix_int8: bool = False) -> None:
        self.spec, self.model = spec, model
        self.started_in = Path.cwd()  # where the paths it shows are relative to
        self.executor = FreshThreads(SEARCH_THREADS, f"model-{spec.id}")
        self.turns = Turns()
        self._scoring: dict[Turn, asyncio.Future] = {}  # the scorings running: their turns and answers
        self._stopped: Exception = Refusal(503, STOPPING)  # what a scoring stopped by `stop` answers
        mix = mix_int8 or model.decode.precision != "int8"
        self.batcher: MicroBatcher[Found] = MicroBatcher(
            self._search, self.executor, limits, mix, self.turns, self._width
        )

    @property
    def id(self) -> int:
        return self.spec.id

    @property
    def attends(self) -> bool:
        """Whether the model has attention to show (an RNNencdec has none)."""
        return self.model.config.model.attends

    @property
    def name(self) -> str:
        return self.spec.name or Path(self.spec.paths[0]).name

    async def translate(self, lines: Sequence[str], n: int = 1, attention: bool = False) -> list[Found]:
        """The n best translations of each line (and the best one's attention), micro-batched."""
        return await self.batcher.submit(lines, (n, attention))

    async def score(self, sources: Sequence[str], targets: Sequence[str]) -> list[Score]:
        """Forced decoding of each pair, in a search thread, taking turns with the searches between its
        pairs (an ensemble refuses, as the API). Cancelled (its client left), it stops before its next
        pair; a stopping server (`stop`) answers its error at once and stops it before its next pair."""
        turn = self.turns.turn()
        loop = asyncio.get_running_loop()
        work = loop.run_in_executor(self.executor, self._score, turn, list(sources), list(targets))
        self._scoring[turn] = work
        try:
            return await work
        except asyncio.CancelledError:
            if turn.cancelled:  # `stop` cancelled it
                raise self._stopped from None
            turn.cancel()  # its client left
            raise
        finally:
            del self._scoring[turn]

    def _score(self, turn: Turn, sources: list[str], targets: list[str]) -> list[Score]:
        """One pair at a time, so that a turn is one pair's forced pass: a request of many long pairs is
        one teacher-forced batch, which would hold the model while searches waited for all of it. What
        the API refuses (lists of other lengths, an ensemble) it refuses in its own words."""
        with turn, between_steps(turn.step):
            if len(sources) != len(targets) or not sources:
                return self.model.score(sources, targets)
            return [
                self.model.score([source], [target])[0]
                for source, target in zip(sources, targets, strict=True)
            ]

    def stop(self, error: Exception) -> None:
        """Answer every request in flight with `error` and stop its search or scoring (a server stopping)."""
        self._stopped = error
        self.batcher.stop(error)
        for turn, work in self._scoring.items():
            turn.cancel()
            work.cancel()

    def _search(self, lines: list[str], settings: Any) -> list[Found]:
        n, attention = settings
        return self.model.search(lines, n, attention)

    def _width(self, settings: Any) -> int:
        """The beam the search of `settings` runs: the model's, or wider for a longer n-best."""
        n, _ = settings
        return max(n, self.model.decode.beam_size)

    def shown(self, value: Any) -> Any:
        """`value` with each absolute path in it relative to where the server started, or its name when
        it lies elsewhere (module docstring)."""
        if isinstance(value, dict):
            return {key: self.shown(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.shown(item) for item in value]
        if not (isinstance(value, str) and os.path.isabs(value)):
            return value
        path = Path(value)
        return str(path.relative_to(self.started_in)) if path.is_relative_to(self.started_in) else path.name

    def summary(self) -> dict[str, Any]:
        """What `/v1/models` lists of it."""
        decode = self.model.decode
        return {
            "id": self.id,
            "name": self.name,
            "models": self.shown(self.spec.paths),
            "ensemble": len(self.spec.paths) > 1,
            "beam_size": decode.beam_size,
            "precision": decode.precision,
            "lexical_shortlist": decode.lexical_shortlist,
            "attention": self.attends,
        }

    def card(self) -> dict[str, Any]:
        """The model's card: its config, size, search settings and, for an exported folder with an eval
        report, its BLEU by length."""
        return {
            **self.summary(),
            "checkpoints": self.shown([str(path) for path in self.model.checkpoints]),
            "parameters": self.model.parameters,
            "config": self.shown(to_dict(self.model.config)),
            "decode": self.shown(to_dict(self.model.decode)),
            "bleu_by_length": self.model.bleu_by_length,
        }

    def opennmt_entry(self) -> dict[str, Any]:
        """Its entry in OpenNMT-py's `GET /models` list."""
        return {
            "model_id": self.id,
            "opt": {**self.spec.decode, **({"report_align": True} if self.spec.report_align else {})},
            "models": self.shown(self.spec.paths),
            "loaded": True,
            "timeout": -1,
        }

    def close(self) -> None:
        self.executor.shutdown(wait=True)


def find(hosted: Mapping[int, HostedModel], model_id: int | None) -> HostedModel:
    """The model hosted under `model_id` (None: the only one hosted); 404 when there is none."""
    if model_id is None and len(hosted) == 1:
        return next(iter(hosted.values()))
    if model_id not in hosted:
        raise Refusal(404, f"No such model '{model_id}' (the models: {', '.join(map(str, hosted))})")
    return hosted[model_id]


def host_models(
    specs: Sequence[ModelSpec],
    device: str = "cpu",
    limits: BatchLimits | None = None,
    mix_int8: bool = False,
    common: Mapping[str, Any] | None = None,
    threads: int | None = None,
) -> dict[int, HostedModel]:
    """Load every model (through `seq2seq_attn.load`), each with `common` decode keys under its own, in a
    thread that ends with the load (serving/threads.py says why)."""
    hosted = {}
    for spec in specs:
        decode = {**(common or {}), **spec.decode}
        try:
            model = in_own_thread(load, spec.paths, device=device, threads=threads, **decode)
        except UserError as error:
            raise UserError(f"model {spec.id}: {error}") from None
        hosted[spec.id] = HostedModel(spec, model, limits or BatchLimits(), mix_int8)
        if spec.report_align and not hosted[spec.id].attends:
            raise UserError(
                f"model {spec.id}: report_align: the model has no attention (model.attention: none), "
                "so no word alignments"
            )
    return hosted
