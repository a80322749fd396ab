"""`seq2seq eval` around the scoring: trained runs as systems, the options they imply, the report files.

`metrics/by_length.py` scores hypotheses. This module brings trained runs in (it translates the sources
with each run's own decode settings and keeps the hypotheses), takes the `eval` keys that the caller
leaves unset from those runs' configs, and writes what the report becomes: the table in a file, the
length curve and the self-contained HTML page with heat maps of how the runs attend.

A system may be an ensemble of runs (decoding/ensemble.py): it translates with the first run's decode
settings, and its first run's config stands for it (its `eval` and `data` sections, whether it has attention).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...config import Config, EvalConfig, override
from ...console import info
from ...data import moses
from ...errors import UserError, setting
from ...io import read_json, write_text
from ...provenance import describe
from ...runs.hub import hub_model
from ..metrics.by_length import Subset, TokenisedBleu, comparison_pairs, evaluate, shortlist_subset
from ..metrics.diagnostics import SentenceAttention
from ..metrics.examples import differing_examples
from ..metrics.inputs import System, check_aligned, check_labels, check_lines, read_text
from ..metrics.report import render

if TYPE_CHECKING:
    import torch

    from ...decoding.loader import Runs
    from ...decoding.translate import Translation, Translator
    from ...vocab.pieces import Vocab

SUFFIX_FORMATS = {".json": "json", ".csv": "csv", ".md": "markdown"}  # report format by file extension
HTML_HEATMAPS = 3  # attention heat maps per trained run in an HTML report without length buckets


@dataclass(frozen=True)
class Request:
    """What one evaluation scores: the hypothesis files read (`inputs.load_systems`) and the trained runs
    that translate the sources ((runs, label) pairs: one run, or an ensemble's), against the references,
    overall and with `by_length` by length bucket. The runs search with their own decode settings changed
    by `decode` (key -> value) and keep their hypotheses in `keep_in` (default: the run folder)."""

    references: Path
    sources: Path | None = None
    systems: Sequence[System] = ()
    runs: Sequence[tuple[Sequence[Path], str]] = ()
    by_length: bool = False
    decode: Mapping[str, Any] = field(default_factory=dict)
    keep_in: Path | None = None


@dataclass(frozen=True)
class TranslatedRun:
    """A trained run as a system, with what scored and drew it: the run's translator and config."""

    system: System
    translator: Translator
    config: Config
    trained: dict[str, Any] = field(default_factory=dict)  # each run's sittings (run_folder.run_provenance)

    @property
    def vocab(self) -> Vocab:
        return self.translator.vocab


@dataclass(frozen=True)
class Evaluation:
    """A report with the texts behind it (for the HTML page's examples and heat maps) and the settings it
    was scored with (`settled`), so that what the page adds is scored alike."""

    report: dict[str, Any]
    systems: list[System]
    references: list[str]
    sources: list[str] | None
    translated: list[TranslatedRun]
    config: EvalConfig


def default_run_label(runs: Sequence[Path]) -> str:
    """A run's (or model folder's) name, `<run>-<checkpoint>` for a checkpoint file, a hub model's NAME
    (of hf://OWNER/NAME); an ensemble's joined by `+`."""
    return "+".join(_run_label(run) for run in runs)


def _run_label(run: Path) -> str:
    if (model := hub_model(run)) is not None:
        return model.repo_id.split("/")[1]
    folder = _run_folder(run)
    return folder.name if run.is_dir() else f"{folder.name}-{run.stem}"


def _run_folder(run: Path) -> Path:
    """A run or model folder, or a checkpoint's run, named from anywhere (`.`, `best.pt` in checkpoints/)."""
    from ...runs.run_folder import run_dir_of  # (imports torch)

    return Path(os.path.abspath(run)) if run.is_dir() else run_dir_of(run)


def hypotheses_path(run: Path, label: str, sources: Path, keep_in: Path | None) -> Path:
    """Where a run's translation of `sources` is kept: in `keep_in`, else in the run folder (a hub model's
    folder is the hub client's cache: the working directory instead)."""
    if keep_in is not None:
        folder = keep_in
    elif hub_model(run) is not None:
        folder = Path(".")
    else:
        folder = _run_folder(run)
    return folder / f"{sources.stem}.{label}.hyp"


def translate_run(
    loaded: Runs,
    runs: Sequence[Path],
    label: str,
    sources: list[str],
    hyp_path: Path,
    decode: Mapping[str, Any] | None = None,
) -> TranslatedRun:
    """Translate `sources` with a trained run (or the ensemble of `runs`), `loaded`, and its own decode
    settings (the first run's) changed by `decode` (key -> value, `eval --set decode.KEY=VALUE`), and keep
    the hypotheses file. Says how many sources were cut to `decode.max_src_tokens` pieces."""
    from ...runs.run_folder import run_provenance

    translator = loaded.translator(decode)
    cut = sum(len(ids) > translator.cfg.max_src_tokens for ids in translator.vocab.encode_src(sources))
    if cut:
        most = translator.cfg.max_src_tokens
        info(f"eval: {cut} of {len(sources)} sources cut to decode.max_src_tokens={most} pieces")
    attending = translator.with_settings(translator.cfg, with_attention=True)  # for the diagnostics
    translations = attending.translate(sources)
    hypotheses = [t.texts[0] if t.texts else "" for t in translations]
    write_text(hyp_path, "".join(line + "\n" for line in hypotheses))
    info(f"eval: translated {len(sources)} lines with {' + '.join(map(str, runs))} -> {hyp_path}")
    attention = [sentence_attention(translator, t) for t in translations]
    system = System(label, hypotheses, str(hyp_path), attention if loaded_attends(loaded) else None, cut)
    trained = {str(run): run_provenance(folder) for run, folder in zip(runs, loaded.run_dirs, strict=True)}
    return TranslatedRun(system, translator, loaded.configs[0], trained)


def loaded_attends(loaded: Runs) -> bool:
    """Whether a loaded run (or any run of an ensemble) has attention: RNNencdec's is uniform, not read."""
    return any(config.model.attends for config in loaded.configs)


def sentence_attention(translator: Translator, translation: Translation) -> SentenceAttention | None:
    """The best hypothesis' attention with the pieces that label it (None for an empty line)."""
    if not translation.hypotheses or translation.hypotheses[0].attention is None:
        return None
    tokens = translation.hypotheses[0].tokens
    return SentenceAttention(
        translation.hypotheses[0].attention, translation.src_pieces, translator.vocab.tgt_pieces(tokens)
    )


def runs_eval_section(configs: Sequence[Config], given: Mapping[str, Any]) -> EvalConfig:
    """The `eval` section the runs were configured with (the schema's defaults without runs). Runs that
    differ in a key of `given` (the keys the caller may set) that it leaves None leave no single answer:
    an error names the key and where the caller sets it."""
    if not configs:
        return EvalConfig()
    first = configs[0].eval
    for other in configs[1:]:
        for key in given:
            if given[key] is None and getattr(other.eval, key) != getattr(first, key):
                values = f"{getattr(first, key)} vs {getattr(other.eval, key)}"
                raise UserError(
                    f"the trained runs differ in eval.{key} ({values}): give {setting('eval.' + key)}"
                )
    return first


def no_unk_subset(subset: Subset, translated: Sequence[TranslatedRun], sources: list[str]) -> Subset:
    """Table 1's "no UNK" rows as the authors scored them: each word-vocabulary run translates those
    sentences again with a search that never generates <unk> (`decode.no_unk`, GroundHog's --ignore-unk,
    which falls back to <unk> allowed where nothing else ends). The run's hypotheses with those lines
    replaced are kept beside its own, line-aligned with the sources, as `<src>.<label>.no-unk.hyp`."""
    outputs = {}
    chosen = [sources[i] for i in subset.members]
    searched_so = [run for run in translated if run.vocab.model_type == "word" and run.translator.cfg.no_unk]
    for run in translated:
        translator = run.translator
        if run.vocab.model_type != "word" or translator.cfg.no_unk or not chosen:
            continue  # (a run searching with decode.no_unk already wrote no-UNK translations)
        search = translator.with_settings(replace(translator.cfg, no_unk=True))
        hypotheses = list(run.system.hypotheses)
        for i, found in zip(subset.members, search.translate(chosen), strict=True):
            hypotheses[i] = found.texts[0] if found.texts else ""
        path = Path(run.system.path).with_suffix(".no-unk.hyp")
        write_text(path, "".join(line + "\n" for line in hypotheses))
        info(f"eval: translated the {len(chosen)} no-UNK lines with <unk> forbidden -> {path}")
        outputs[run.system.label] = hypotheses
    forbidding = [*outputs, *(run.system.label for run in searched_so)]
    if not forbidding:
        return subset
    definition = (
        f"{subset.definition}; {', '.join(forbidding)} translated with <unk> forbidden (decode.no_unk)"
    )
    return replace(subset, definition=definition, outputs=outputs)


def evaluate_runs(request: Request, given: Mapping[str, Any]) -> Evaluation:
    """Score the request's systems and trained runs against the references.

    Each run translates the sources (kept as `hypotheses_path`). The `eval` keys in `given` that are not
    None override the runs' eval section (`runs_eval_section`), each checked as a config value. A run with
    a word vocabulary (a shortlist) adds the sentences free of unknown words as their own rows ("no UNK",
    Bahdanau et al. 2014, Table 1). The settings left to the runs (`settled`): Moses-counted lengths in
    the first run's language of the bucketed side, the task's BLEU in its target language, and
    case-insensitive BLEU and chrF when a run writes lowercased text (`Vocab.lowercases`), so that every
    system of one report is scored alike.
    """
    references = read_text(request.references)
    sources = read_text(request.sources) if request.sources is not None else None
    if given.get("task_ref"):  # the task's references given: checked before minutes of translation
        task_ref = given["task_ref"]
        check_aligned(task_ref, len(read_text(task_ref)), str(request.references), len(references))
    source_path = str(request.sources) if request.sources is not None else ""
    check_lines(request.systems, references, sources, str(request.references), source_path)
    labels = [system.label for system in request.systems] + [label for _, label in request.runs]
    check_labels(labels)  # before minutes of translation, and before a run's file is written over
    comparison_pairs(labels, given.get("baseline") or None)
    loaded = load_request_runs(request, sources)
    section = runs_eval_section([runs.configs[0] for runs in loaded], given)  # before any translation
    translated = translate_runs(request, loaded, sources)
    systems = [*request.systems, *(run.system for run in translated)]
    config = settled(override(section, given, "eval."), translated)
    # (label, vocabulary) of the word-vocabulary runs: their shortlists define the "no UNK" sentences
    shortlists = [(run.system.label, run.vocab) for run in translated if run.vocab.model_type == "word"]
    subsets = []
    if shortlists:
        subsets.append(no_unk_subset(shortlist_subset(shortlists, sources, references), translated, sources))
    report = evaluate(
        systems,
        references,
        sources,
        by_length=request.by_length,
        config=config,
        references_path=str(request.references),
        sources_path=source_path,
        subsets=subsets,
        tokenised=tokenised_bleus(config),
    )
    report["provenance"] = {
        "evaluated": describe(str(translated_device(translated))),
        "runs": {run.system.label: run.trained for run in translated},
    }
    return Evaluation(report, systems, references, sources, translated, config)


def translated_device(translated: Sequence[TranslatedRun]) -> torch.device | str:
    """Where the runs translated (the CPU when only hypotheses files are scored)."""
    return translated[0].translator.device if translated else "cpu"


def load_request_runs(request: Request, sources: list[str] | None) -> list[Runs]:
    """Each trained run (or ensemble) of the request, loaded: their configs are known before any of them
    translates, so that settings that leave no single answer (`runs_eval_section`) are refused first."""
    if not request.runs:
        return []
    if sources is None:
        raise UserError("a trained run translates the sources: give the source file")
    from ...decoding.loader import load_runs
    from ...model.device import resolve_device

    device = resolve_device("auto", "the device")
    return [load_runs(paths, device) for paths, _ in request.runs]


def translate_runs(
    request: Request, loaded: Sequence[Runs], sources: list[str] | None
) -> list[TranslatedRun]:
    """Each trained run of the request (`loaded`) as a system: its translation of the sources, kept as
    `hypotheses_path`."""
    return [
        translate_run(
            runs,
            paths,
            label,
            sources,
            hypotheses_path(paths[0], label, request.sources, request.keep_in),
            request.decode,
        )
        for runs, (paths, label) in zip(loaded, request.runs, strict=True)
    ]


def settled(config: EvalConfig, translated: Sequence[TranslatedRun]) -> EvalConfig:
    """`config` with what its empty keys leave to the trained runs: the language of the bucketed side
    (`words_lang`) and of the task's references (`task_lang`), from the first run's data section, and
    case-insensitive scores (`lowercase`) when a run writes lowercased text."""
    data = translated[0].config.data if translated else None
    bucketed = (data.src_lang if config.bucket_by == "source" else data.tgt_lang) if data else ""
    return replace(
        config,
        words_lang=config.words_lang or bucketed,
        task_lang=config.task_lang or (data.tgt_lang if data else ""),
        lowercase=config.lowercase or any(run.vocab.lowercases for run in translated),
    )


def tokenised_bleus(config: EvalConfig) -> list[TokenisedBleu]:
    """The tokenised BLEUs `config` asks for: the paper's Moses BLEU in `moses_bleu`; the task's BLEU
    against the file of the task's processed references `task_ref`, in `task_lang`."""
    found = [TokenisedBleu("bleu_moses", moses.Pipeline(config.moses_bleu))] if config.moses_bleu else []
    if config.task_ref:
        if not config.task_lang:
            raise UserError(
                f"{config.task_ref}: the language of the task's references is needed "
                f"({setting('eval.task_lang')})"
            )
        lines = read_text(config.task_ref)
        found.append(
            TokenisedBleu("bleu_task", moses.task_pipeline(config.task_lang), lines, config.task_ref)
        )
    return found


def write_report(report: dict[str, Any], fmt: str | None, output: Path | None, plot: Path | None) -> str:
    """Save the report to `output` (format `fmt`, else by its extension) and draw the curve to `plot`;
    returns what to show: the report itself without `output`, else its text table."""
    fmt = fmt or (SUFFIX_FORMATS.get(output.suffix.lower(), "text") if output else "text")
    shown = render(report, fmt)
    if output is not None:
        write_text(output, shown)
        shown = render(report, "text")
        info(f"wrote {output}")
    if plot is not None:
        from ..metrics.plots import (  # (slow to import)
            diagnostics_figure,
            diagnostics_path,
            save_curve,
            save_figure,
        )

        save_curve(report, plot)
        info(f"wrote {plot}")
        if report.get("diagnostics"):
            save_figure(diagnostics_figure(report), diagnostics_path(plot))
            info(f"wrote {diagnostics_path(plot)}")
    return shown


def read_alignment(path: Path) -> dict[str, Any]:
    """The AER section that `seq2seq align --json` wrote, checked enough to render (align.py)."""
    section = read_json(path)
    if not isinstance(section, dict) or not {"method", "overall", "by_length"} <= section.keys():
        raise UserError(f"{path}: not the JSON of `seq2seq align --json` (method, overall, by_length)")
    by_length = section["by_length"] if isinstance(section["by_length"], list) else [None]
    rows = [section["overall"], *([section["baseline"]] if section.get("baseline") else [])]
    buckets = all(_scores(row) and isinstance(row.get("bucket"), str) for row in by_length)
    if not (isinstance(section["method"], str) and all(map(_scores, rows)) and buckets):
        raise UserError(
            f"{path}: not the JSON of `seq2seq align --json` (a method; each row: sentences, and aer, "
            "precision and recall as numbers or null; a bucket named in each by_length row)"
        )
    figures = section.get("figures", [])
    drawn = isinstance(figures, list) and all(
        isinstance(f, dict) and isinstance(f.get("title"), str) and isinstance(f.get("svg"), str)
        for f in figures
    )
    if not drawn:
        raise UserError(
            f"{path}: figures must be a list of {{title, svg}} texts, as `seq2seq align --json` writes"
        )
    return section


def _scores(row: Any) -> bool:
    """Whether `row` holds alignment scores as align.py writes them."""
    if not isinstance(row, dict) or type(row.get("sentences")) is not int:
        return False
    return all(
        k in row and (row[k] is None or type(row[k]) in (int, float)) for k in ("aer", "precision", "recall")
    )


def attention_heatmaps(run: TranslatedRun, sources: list[str], lines: Sequence[int]) -> list[dict[str, str]]:
    """[{"title", "svg"}] of the given source lines, as the run attends while translating them."""
    from ..metrics.plots import svg_text
    from .heatmap import attention_figure

    run.translator.with_attention = True
    heatmaps = []
    for line, translation in zip(lines, run.translator.translate([sources[i] for i in lines]), strict=True):
        found = run.translator.attention(translation)
        if found is not None:
            title = f"{run.system.label}, line {line + 1} ({len(sources[line].split())} words)"
            heatmaps.append({"title": title, "svg": svg_text(attention_figure(*found))})
    return heatmaps


def write_html(path: Path, evaluation: Evaluation, alignment: dict[str, Any] | None = None) -> None:
    """The self-contained HTML report (see `html_report`); heat maps of the trained runs with attention."""
    from ..metrics.html_report import render_html
    from ..metrics.plots import curve_figure, diagnostics_figure, svg_text  # (matplotlib: slow to import)
    from .heatmap import pick_by_length

    report = evaluation.report
    curve = svg_text(curve_figure(report)) if report["buckets"] else ""
    diagnostics = svg_text(diagnostics_figure(report)) if report["buckets"] else ""
    examples = differing_examples(
        report,
        evaluation.systems,
        evaluation.references,
        evaluation.sources,
        lowercase=evaluation.config.lowercase,
    )
    sources = evaluation.sources or []
    if report["buckets"]:  # the worst example of each bucket, as each attention run attends
        lines = [group["sentences"][0]["line"] for group in examples if group["sentences"]]
    else:
        lines = pick_by_length(sources, HTML_HEATMAPS)
    heatmaps = [
        heatmap
        for run in evaluation.translated
        if run.config.model.attends and sources
        for heatmap in attention_heatmaps(run, sources, lines)
    ]
    page = render_html(
        report,
        curve_svg=curve,
        diagnostics_svg=diagnostics,
        examples=examples,
        heatmaps=heatmaps,
        alignment=alignment,
    )
    write_text(path, page)
    info(f"wrote {path}")
