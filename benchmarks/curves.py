"""Quality against time (`python -m benchmarks.bench --curves 10,20,30 --seeds 1,2`): the curve of each
system, its medians and min-max over the seeds, the markdown / JSON report and the plot.

bench.py runs the systems (one training per system and seed, a checkpoint at each point, each decoded and
scored by length); this turns what they wrote into the report. A point's training time leaves every
earlier checkpoint write out, in wall clock and in CPU seconds alike (`points`), so that no system pays for
its checkpoints: each system writes exactly one per point, in its own format, and none other.

CPU seconds are those of the training process and all its descendants (data-loader workers included,
running or ended; launcher/bench_snapshots.py), what `getrusage` counts with its children; wall clock is
from the process start, so start-up and data loading are inside both.

The JSON file next to the markdown keeps the latest result. Two seeds of three systems at 30 minutes are
hours of training, more than one sitting may have: `--add-seeds` runs further seeds later (another day,
another machine) and adds them to the result already there, when it is the same measurement (`earlier`);
each sitting's machine, commit and command stay with its seeds (`sessions`), and when the machines differ
the report says that times compare the systems within a seed, not the seeds.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import median
from typing import Any

from seq2seq_attn.io import write_json, write_text

from .machine import summary
from .report import portable

ALL = "all"  # the eval report's row of every sentence
LATE_S, LATE_SHARE = 30.0, 0.05  # a checkpoint this late (or this share of its point) misses its point
# settings that may differ between sittings of one measurement (`earlier`): the seeds and where things go
PER_SITTING = frozenset({"seeds", "out", "cache", "doc", "no_install", "add_seeds", "corpus", "corpus_name"})


def points(records: list[dict[str, Any]], minutes: list[float]) -> list[dict[str, Any]]:
    """One point per checkpoint record (launcher/bench_snapshots.py), in order: its minutes, the updates
    behind it, and its training time in wall-clock and CPU seconds, each earlier checkpoint's write taken
    out (the write of its own checkpoint comes after the clock is read)."""
    out, wall_written, cpu_written = [], 0.0, 0.0
    for minute, record in zip(minutes, records, strict=False):
        out.append(
            {
                "minutes": minute,
                "updates": record["step"],
                "checkpoint": record["checkpoint"],
                "wall_s": record["age_s"] - wall_written,
                "cpu_s": record["cpu_s"] - cpu_written,
                "save_s": record["save_s"],
                "save_cpu_s": record["save_cpu_s"],
            }
        )
        wall_written += record["save_s"]
        cpu_written += record["save_cpu_s"]
    return out


def late_warning(name: str, point: dict[str, Any]) -> str | None:
    """A warning when a checkpoint came well after its point: the toolkit had not yet made its first
    update (it serves the request after one), or an update took that long."""
    at = 60 * point["minutes"]
    if point["wall_s"] - at <= max(LATE_S, LATE_SHARE * at):
        return None
    return f"{name}: the checkpoint of {point['minutes']:g} min came at {point['wall_s']:.0f} s of training"


def bleu_of(report: dict[str, Any], label: str) -> dict[str, Any]:
    """A system's BLEU from a `seq2seq eval --by-length` report: over all sentences (`bleu`) and per
    source-length bucket (`buckets`, in the report's order)."""
    (system,) = [s for s in report["systems"] if s["label"] == label]
    rows = [row for row in system["rows"] if row["subset"] == ALL]
    return {
        "bleu": next(row["bleu"] for row in rows if row["bucket"] == ALL),
        "buckets": {row["bucket"]: row["bleu"] for row in rows if row["bucket"] != ALL},
    }


def spread(values: list[float | None]) -> dict[str, float | int] | None:
    """Median, min, max and how many values there were (None when there were none)."""
    known = [value for value in values if value is not None]
    if not known:
        return None
    return {"median": median(known), "min": min(known), "max": max(known), "n": len(known)}


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    """Per system and point: the spread over the seeds of updates, wall and CPU seconds and BLEU (overall
    and per bucket), as `summary`, in place; returns the result."""
    for toolkit in result["toolkits"].values():
        minutes = sorted({p["minutes"] for run in toolkit["runs"] for p in run.get("points", [])})
        rows = []
        for minute in minutes:
            at = [p for run in toolkit["runs"] for p in run.get("points", []) if p["minutes"] == minute]
            buckets = list(dict.fromkeys(b for p in at for b in p.get("buckets", {})))
            row = {key: spread([p.get(key) for p in at]) for key in ("updates", "wall_s", "cpu_s", "bleu")}
            row["buckets"] = {b: spread([p.get("buckets", {}).get(b) for p in at]) for b in buckets}
            rows.append({"minutes": minute, **row})
        toolkit["summary"] = rows
    return result


# ----------------------------------------------------------------------------------------------------------
# seeds run in several sittings


def earlier(path: Path, result: dict[str, Any]) -> dict[str, Any]:
    """The --curves result in `path` that `result` (just set up, no runs yet) adds its seeds to; a
    ValueError names what makes it another measurement: a setting, the corpus, a system's version or
    recipe, or a seed already measured. Checked before any training, not hours later."""
    if not path.is_file():
        raise ValueError(f"{path}: no earlier result to add seeds to")
    before = json.loads(path.read_text(encoding="utf-8"))
    now, then = result["settings"], before["settings"]
    for key in sorted((set(now) | set(then)) - PER_SITTING):
        if now.get(key) != then.get(key):
            raise ValueError(f"{path}: settings differ: {key} {then.get(key)!r} there, {now.get(key)!r} now")
    if before["corpus"]["pairs"] != result["corpus"]["pairs"]:  # its folder may have another name
        raise ValueError(f"{path}: another corpus: {before['corpus']['pairs']} pairs there")
    for key, toolkit in result["toolkits"].items():
        old = before["toolkits"].get(key, {})
        for aspect in ("version", "recipe"):
            if old.get(aspect) != toolkit.get(aspect):
                raise ValueError(f"{path}: {toolkit['label']}: its {aspect} differs from the earlier runs'")
    again = sorted(set(then["seeds"]) & set(now["seeds"]))
    if again:
        raise ValueError(f"{path}: seed {', '.join(map(str, again))} already measured there")
    return before


def add_seeds(result: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """`result` with `before`'s runs ahead of its own for every system, its seeds and warnings first,
    and each sitting (seeds, machine, command) in `sessions`; in place, returned."""
    sittings = [*before.get("sessions", [_sitting(before)]), _sitting(result)]
    for key, toolkit in result["toolkits"].items():
        toolkit["runs"] = [*before["toolkits"].get(key, {}).get("runs", []), *toolkit["runs"]]
    result["settings"]["seeds"] = [seed for sitting in sittings for seed in sitting["seeds"]]
    result["warnings"] = [*before["warnings"], *result["warnings"]]
    cpus = {(s["machine"]["cpu"], s["machine"]["cpu_capability"], s["machine"].get("gpu")) for s in sittings}
    if len(cpus) > 1:
        result["warnings"].append(
            "the seeds ran on different machines (sittings below): wall clock and CPU seconds compare the "
            "systems within a seed, not across seeds"
        )
    result["sessions"] = sittings
    return result


def _sitting(result: dict[str, Any]) -> dict[str, Any]:
    return {"seeds": result["settings"]["seeds"], "machine": result["machine"], "command": result["command"]}


# ----------------------------------------------------------------------------------------------------------
# files


def save(result: dict[str, Any], doc: Path, out: Path) -> Path:
    """Write `result` (its paths `portable`) as JSON next to `doc`, its plot (`<doc>.png`) and `doc`, its
    report; returns the JSON's path."""
    path = doc.with_suffix(".json")
    write_json(path, portable(result, out=out))
    plot(result, doc.with_suffix(".png"))
    write_text(doc, markdown(result, doc.with_suffix(".png").name))
    return path


def markdown(result: dict[str, Any], plot_name: str | None = None) -> str:
    """The report: how it was run, what each system trains with, the curves' medians and min-max per
    point, BLEU by source length, the plot, problems, method."""
    m, s, corpus = result["machine"], result["settings"], result["corpus"]
    where = f"GPU: {m['gpu']}" if m["device"] == "cuda" else f"CPU: {m['cpu']}, {m['cores']} cores"
    pairs = ", ".join(f"{n:,} {split}" for split, n in corpus["pairs"].items())
    toolkits = result["toolkits"]
    lines = [
        "# Quality against CPU time and wall clock",
        "",
        "Generated by `python -m benchmarks.bench --curves`: do not edit by hand, rerun it. Every run's "
        "figures are in the JSON file next to this one.",
        "",
        f"## {where}; corpus {corpus['id']}",
        "",
        f"    {result['command']}",
        "",
        f"- machine: {summary(m)}; {m['os']}; Python {m['python']}; {m['date']}",
        f"- load: 1-minute load average {m['load_before']:.2f} before the run",
        *_sittings(result.get("sessions", [])),
        *(f"- **warning**: {warning}" for warning in result.get("warnings", [])),
        f"- corpus: {corpus['name']}: {pairs} pairs",
        f"- points: {', '.join(f'{x:g}' for x in s['curves'])} minutes of training; seeds "
        f"{', '.join(map(str, s['seeds']))}, one training per system and seed, systems alternating; "
        f"beam {s['beam']}, GNMT length penalty alpha {s['alpha']:g}, batches of {s['batch']} sentences",
        "",
        *_recipes(toolkits),
        "",
        "| system | point (min) | updates | training wall clock (s) | training CPU (s) | test BLEU |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for toolkit in toolkits.values():
        for row in toolkit.get("summary", []):
            cells = [
                _spread(row[k], d) for k, d in (("updates", 0), ("wall_s", 0), ("cpu_s", 0), ("bleu", 2))
            ]
            lines.append(f"| {toolkit['label']} | {row['minutes']:g} | " + " | ".join(cells) + " |")
    lines += ["", "Each cell: the median over the seeds, [min, max] when there were several.", ""]
    lines += _buckets(toolkits)
    if plot_name:
        lines += ["", f"![BLEU against training CPU-hours and wall clock]({plot_name})"]
    problems = [f"- {t['label']} skipped: {t['skipped']}" for t in toolkits.values() if t.get("skipped")]
    for t in toolkits.values():
        problems += [f"- {t['label']}, seed {r['seed']}: {r['error']}" for r in t["runs"] if r.get("error")]
    if problems:
        lines += ["", "Problems:", "", *problems]
    return "\n".join([*lines, "", *METHOD]) + "\n"


def _sittings(sittings: list[dict[str, Any]]) -> list[str]:
    """One line per sitting when the seeds were run in several: its seeds, machine, date and command."""
    return [
        f"- seed {', '.join(map(str, s['seeds']))}: {summary(s['machine'])}; {s['machine']['date']}; "
        f"`{s['command']}`"
        for s in sittings
    ]


def _recipes(toolkits: dict[str, Any]) -> list[str]:
    """What each system trains with, side by side ("its config", "ours, matched", "its defaults")."""
    described = {key: t["recipe"] for key, t in toolkits.items() if t.get("recipe")}
    aspects = list(dict.fromkeys(aspect for recipe in described.values() for aspect in recipe))
    if not aspects:
        return []
    lines = ["| | " + " | ".join(toolkits[k]["label"] for k in described) + " |"]
    lines.append("|---|" + "---|" * len(described))
    for aspect in aspects:
        lines.append(f"| {aspect} | " + " | ".join(r.get(aspect, "–") for r in described.values()) + " |")
    return lines


def _buckets(toolkits: dict[str, Any]) -> list[str]:
    """Test BLEU per source-length bucket at each point (medians over the seeds)."""
    buckets = list(
        dict.fromkeys(b for t in toolkits.values() for row in t.get("summary", []) for b in row["buckets"])
    )
    if not buckets:
        return []
    lines = [
        "Test BLEU by source length (Moses words), medians over the seeds:",
        "",
        "| system | point (min) | " + " | ".join(buckets) + " |",
        "|---|---:|" + "---:|" * len(buckets),
    ]
    for toolkit in toolkits.values():
        for row in toolkit.get("summary", []):
            cells = [_median(row["buckets"].get(b)) for b in buckets]
            lines.append(f"| {toolkit['label']} | {row['minutes']:g} | " + " | ".join(cells) + " |")
    return lines


def _spread(value: dict[str, float] | None, decimals: int) -> str:
    if value is None:
        return "–"
    text = f"{value['median']:,.{decimals}f}"
    return text if value["n"] < 2 else f"{text} [{value['min']:,.{decimals}f}, {value['max']:,.{decimals}f}]"


def _median(value: dict[str, float] | None) -> str:
    return "–" if value is None else f"{value['median']:.2f}"


def plot(result: dict[str, Any], path: Path) -> None:
    """BLEU against training CPU-hours (left) and wall-clock minutes (right): one line per system through
    its medians, the seeds' range of BLEU as a band."""
    from matplotlib.figure import Figure  # slow to import: only when drawing

    from seq2seq_attn.evaluation.metrics.plots import save_figure

    figure = Figure(figsize=(11, 4.5), layout="constrained")
    cpu, wall = figure.subplots(1, 2, sharey=True)
    for toolkit in result["toolkits"].values():
        rows = [row for row in toolkit.get("summary", []) if row["bleu"] and row["cpu_s"] and row["wall_s"]]
        if not rows:
            continue
        low, high = [r["bleu"]["min"] for r in rows], [r["bleu"]["max"] for r in rows]
        bleu = [r["bleu"]["median"] for r in rows]
        for axes, x in (
            (cpu, [r["cpu_s"]["median"] / 3600 for r in rows]),
            (wall, [r["wall_s"]["median"] / 60 for r in rows]),
        ):
            (line,) = axes.plot(x, bleu, marker="o", label=toolkit["label"])
            axes.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    cpu.set(xlabel="training CPU-hours (all its processes)", ylabel="test BLEU (beam search)")
    wall.set(xlabel="training wall clock (minutes)")
    for axes in (cpu, wall):
        axes.grid(alpha=0.3)
    cpu.legend(loc="lower right")
    figure.suptitle("Quality against time: medians over the seeds, their range shaded")
    save_figure(figure, path)


METHOD = """How it is measured:

- One training per system and seed, from scratch, one at a time, systems alternating between seeds. At
  each point of training time the harness sends SIGUSR1; after the update in progress the system writes a
  checkpoint in its own format (ours `model/snapshots/step_N.pt`, OpenNMT-py `model/model_step_N.pt`) and
  records the updates, the wall clock since its process started and the CPU seconds of its process and all
  its descendants (data-loader workers included) before the write, and what the write took. The next point
  is pushed back by that write, and later points' wall and CPU seconds leave it out: no checkpoint write
  counts in any budget, and each system writes exactly one per point (OpenNMT-py no periodic ones).
- Each system's seed is its own option (ours `seed`, OpenNMT-py `seed`); every toolkit loads its data its
  default way inside its clock (ours encodes its token cache in the training process; OpenNMT-py
  numericalises its text with its default loader).
- Every checkpoint decodes the whole test set with beam search (the side-by-side run's settings), and
  `seq2seq eval --by-length` scores each system's points (sacrebleu on detokenised text; lengths in
  Moses-tokenised source words).""".splitlines()
