#!/usr/bin/env bash
# The GPU measurements of docs/gpu.md, each one command of at most 7.5 minutes that brings back two files.
#
#   scripts/gpu_measure.sh MEASUREMENT OUT_DIR [--device cuda|cpu] [--quick] [--corpus DIR] [--set KEY=VALUE]...
#
# Measurements (profile and batches: a `python -m benchmarks.bench_step` run per row of work below):
#   profile   where an update's time goes: small_rnnsearch (vocabularies 4,000) and rnnsearch50 (30,000) at
#             the paper's batch of 80, fp32 and bf16, the update and the beam-5 search step eager and
#             replayed from CUDA graphs;
#             under torch.profiler, the kernels per update and per search step, the host's launch calls,
#             the GPU's busy fraction and the top kernels by time; then the demo's RNNsearch trained alone
#             for DEMO_S seconds, graphs off and on: its updates per second (demo.md)
#   batches   what fills the card: rnnsearch50's update (vocabularies 30,000, no search) in fp32, tf32 and
#             bf16, eager and in CUDA graphs, at batches of 80, 256 and 1,024 sentences of 30 + 30 tokens
#             and at token batches of 6,000 and 24,000 padded positions of 50 + 50-token sentences (60 and
#             240 sentences): sentences/s, target tokens/s and the peak GPU memory
#   paper     Fig. 2 at the paper's sizes: RNNsearch-50 and RNNencdec-50 (configs/rnnsearch50.yaml and
#             rnnencdec50.yaml, the paper's recipe) trained side by side on one GPU on the line-aligned
#             corpus in --corpus DIR ({train,valid,test}.{en,fr}, each plain or .gz; default data/enfr, a
#             copy of ../shared/corpora/en-fr that the device call carries), for what the time limit leaves
#             after the data, the vocabularies and the test set's translation (PAPER_FIXED_S); then the
#             test set translated with each run's best checkpoint and scored by length
#             (scripts/reproduce.py). The paper's 50-word limit is applied to the training pairs as
#             whitespace words (data.clean.max_words); the vocabularies are 30,000 BPE pieces per side,
#             not the paper's Moses words (the device image has no sacremoses); train.max_len 210 pieces
#             keeps every pair of up to 50 words (en-fr's longest: 203 pieces); the test set's buckets
#             count whitespace words, as the CPU run's report does; no length-ratio rule (the paper had
#             none); the test set searched with EOS forced at the maximum length (GroundHog's retries
#             could outlast the call) in batches of 16,000 tokens. Brings back the report (by_length.*,
#             curve.png, summary.md), each system's test translations (test.LABEL.hyp.gz) and training
#             logs.
#   recipe    which batch, precision and learning rate train RNNsearch-50 (configs/rnnsearch50.yaml) to the
#             lowest dev loss in equal GPU time, for configs/rnnsearch50_gpu.yaml: the corpus and
#             vocabularies as `paper`'s, prepared once; then each variant of RECIPES (below) trained alone
#             on the GPU, from the same start, for an equal share of the time; recipe.md tables each one's
#             updates, target tokens/s and dev loss (the whole dev set, per target piece) at its end.
# OUT_DIR gets MEASUREMENT.md (every table, after the GPU, driver, CUDA and torch) and MEASUREMENT.tar.gz
# (the same tables, their JSON, the environment and every log). A run that hits the time limit is killed
# and the archive holds what the finished ones wrote; status.txt in it says which.
#
# Nothing is installed: the code runs in place (PYTHONPATH = the repository) with $PYTHON (default python3).
# --device cpu --quick runs the same commands at tiny sizes in seconds (tests/test_gpu_check.py), so that
# the script runs on every machine the way it runs on a GPU; without a GPU there are no CUDA graphs.
set -uo pipefail

TOTAL_S=450  # under the 8 minutes a device run is sized to, the start and the transfers aside

usage() {
    echo "usage: $(sed -n '4s/^# *//p' "$0")" >&2
    exit 2
}

MEASUREMENT=${1:-}
OUT=${2:-}
[[ $MEASUREMENT =~ ^(profile|batches|paper|recipe)$ ]] && [[ -n $OUT ]] || usage
shift 2
DEVICE=cuda
QUICK=0
CORPUS=
EXTRA=()  # --set: config overrides for every training of `paper` and `recipe`, after their own
while (($#)); do
    case $1 in
        --device) DEVICE=${2:-}; shift 2 || usage ;;
        --quick) QUICK=1; shift ;;
        --corpus) CORPUS=${2:-}; shift 2 || usage ;;
        --set) [[ ${2:-} == *=* ]] || usage; EXTRA+=("$2"); shift 2 ;;
        *) echo "gpu_measure: unknown option $1" >&2; usage ;;
    esac
done
[[ $DEVICE == cuda || $DEVICE == cpu ]] || { echo "gpu_measure: --device must be cuda or cpu" >&2; exit 2; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CORPUS=${CORPUS:-$ROOT/data/enfr}
if [[ $MEASUREMENT == paper || $MEASUREMENT == recipe ]]; then
    [[ -d $CORPUS ]] || { echo "gpu_measure: --corpus: no folder $CORPUS" >&2; exit 2; }
    CORPUS=$(cd "$CORPUS" && pwd)
fi
PYTHON=${PYTHON:-$(command -v python3 || command -v python)}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
[[ $DEVICE == cpu ]] && export CUDA_VISIBLE_DEVICES=""
cd "$ROOT" || exit 2
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
FOLDER=$OUT/$MEASUREMENT
rm -rf "$FOLDER" && mkdir -p "$FOLDER/env" || exit 2
START=$(date +%s)
FAILED=0

run() {  # run NAME COMMAND...: COMMAND within the time left, its output in FOLDER/NAME.log
    local name=$1 limit=$((START + TOTAL_S - $(date +%s)))
    shift
    if ((limit < 15)); then
        echo "$name: skipped (no time left of ${TOTAL_S} s)" | tee -a "$FOLDER/status.txt" >&2
        FAILED=1
        return
    fi
    echo "gpu_measure: $name (at most $limit s): $*" >&2
    timeout --kill-after=10 "$limit" "$@" >"$FOLDER/$name.log" 2>&1
    local rc=$?
    echo "$name: exit code $rc after $(($(date +%s) - START)) s" | tee -a "$FOLDER/status.txt" >&2
    ((rc == 0)) || FAILED=1
}

# what machine this is
if command -v nvidia-smi >/dev/null; then nvidia-smi >"$FOLDER/env/nvidia-smi.txt" 2>&1; fi
run env "$PYTHON" scripts/gpu_check.py env "$FOLDER/env" "$DEVICE"

BENCH=("$PYTHON" -m benchmarks.bench_step --device "$DEVICE")
GRAPHS=(--cuda-graphs off,on)
[[ $DEVICE == cpu ]] && GRAPHS=()  # CUDA graphs need a GPU
# --quick: tiny models and batches, the commands rather than the sizes
QUICK_MODEL=(model.src_embed_dim=16 model.tgt_embed_dim=16 model.hidden_size=32 model.decoder_hidden_size=32
    model.attention_dim=32 model.maxout_dim=16)
if ((QUICK)); then
    for setting in "${QUICK_MODEL[@]}"; do BENCH+=(--set "$setting"); done
    BENCH+=(--warmup 1 --reps 1)
fi
size() {  # size FULL QUICK: the full-size arguments, or with --quick the tiny ones
    if ((QUICK)); then echo "$2"; else echo "$1"; fi
}

PAPER_FIXED_S=240  # the paper run's time besides training: data, vocabularies, the test set's translation
corpus_file() {  # corpus_file NAME: CORPUS/NAME or CORPUS/NAME.gz, whichever exists
    local file
    for file in "$CORPUS/$1" "$CORPUS/$1.gz"; do
        [[ -f $file ]] && { echo "$file"; return 0; }
    done
    echo "gpu_measure: the corpus $CORPUS has no $1 or $1.gz" >&2
    return 1
}
corpus_sets() {  # corpus_sets WORK: into SETS, the settings that read CORPUS as the paper's pairs, data in WORK
    local split side file
    # eval.words: buckets of whitespace words, as the CPU run's report (docs/results/enfr) counts them
    # data.clean: the paper's 50-word limit on the training pairs, and no length-ratio rule (it had none)
    SETS=(data.source=local "data.dir=$1/data" data.tokenize=none data.clean.max_words=50 data.clean.max_ratio=0
        vocab.type=bpe eval.words=whitespace "train.device=$DEVICE")
    for split in train valid test; do
        for side in src:en tgt:fr; do
            file=$(corpus_file "$split.${side#*:}") || return 1
            SETS+=("data.local.$split.${side%%:*}=$file")
        done
    done
    if ((QUICK)); then
        SETS+=("${QUICK_MODEL[@]}" vocab.size=200 train.max_len=60)
    else
        SETS+=(vocab.size=30000 train.max_len=210)
    fi
}
as_options() {  # as_options SETTING...: each as `--set SETTING`
    local setting
    for setting in "$@"; do printf -- '--set\n%s\n' "$setting"; done
}
keep_runs() {  # keep_runs WORK: each run's config and training log into FOLDER/runs/NAME
    local run
    for run in "$1"/runs/*/; do
        [[ -d $run ]] || continue
        mkdir -p "$FOLDER/runs/$(basename "$run")"
        cp "$run"/{config.yaml,metrics.jsonl,train.log,provenance.json} "$FOLDER/runs/$(basename "$run")/" 2>/dev/null
    done
}
minutes_left() {  # minutes_left SECONDS_KEPT [SHARE]: of the time left, less SECONDS_KEPT, the SHARE-th part
    awk -v s=$((START + TOTAL_S - $(date +%s) - $1)) -v n="${2:-1}" 'BEGIN { printf "%.2f", (s > 30 * n ? s / n : 30) / 60 }'
}
paper() {  # the `paper` measurement (above): reproduce.py on the corpus, then its outputs into FOLDER
    local work options=()
    work=$(mktemp -d) || { FAILED=1; return; }
    corpus_sets "$work" || { echo "paper: the corpus $CORPUS lacks a file" >>"$FOLDER/status.txt"; FAILED=1; return; }
    # the test set searched with EOS forced at the maximum length (GroundHog's retries with doubled beams
    # could outlast the call) and in batches of 16,000 tokens: fewer sequential steps
    # validation: the dev loss alone (the best checkpoint is chosen on it), every 1,000 updates, a few
    # seconds each; dev BLEU's search would take a large share of a few minutes' training
    SETS+=(train.validate_every=1000 train.valid_bleu=false decode.at_max_len=force_eos
        decode.batch_tokens=16000)
    if ((QUICK)); then
        SETS+=(train.max_minutes=0 train.max_steps=10 train.validate_every=10 train.valid_max_sentences=10
            decode.beam_size=2)
    else
        SETS+=("train.max_minutes=$(minutes_left "$PAPER_FIXED_S")")
    fi
    SETS+=("${EXTRA[@]}")
    mapfile -t options < <(as_options "${SETS[@]}")
    run paper "$PYTHON" scripts/reproduce.py --out "$FOLDER/report" --runs "$work/runs" --parallel --heatmaps 0 \
        "${options[@]}" --label RNNsearch-50 --label RNNencdec-50 configs/rnnsearch50.yaml configs/rnnencdec50.yaml
    keep_runs "$work"
    cp "$FOLDER/report/summary.md" "$FOLDER/summary.md" 2>/dev/null  # its tables go into paper.md
    # each system's test translations, from the report, to re-score
    "$PYTHON" - "$FOLDER/report/by_length.json" "$FOLDER" <<'PY' || FAILED=1
import gzip, json, sys
from pathlib import Path
for system in json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))["systems"]:
    with gzip.open(Path(sys.argv[2]) / f"test.{system['label']}.hyp.gz", "wb") as out:
        out.write(Path(system["hypotheses"]).read_bytes())
PY
    rm -rf "$work"
}
DEMO_S=45  # each demo training of `profile`
demo_alone() {  # the demo's RNNsearch trained alone, graphs off and on: its updates per second, demo.md
    local work graphs settings=() options=()
    work=$(mktemp -d) || { FAILED=1; return; }
    for graphs in off $([[ $DEVICE == cuda ]] && echo on); do
        settings=("train.device=$DEVICE" "train.cuda_graphs=$graphs" train.validate_every=1000000
            "train.run_dir=$work/runs/demo_graphs_$graphs" "data.dir=$work/data")
        if ((QUICK)); then
            settings+=(data.synthetic.train_size=300 data.synthetic.valid_size=20 data.synthetic.test_size=40
                vocab.size=200 "${QUICK_MODEL[@]}" train.max_steps=20 train.log_every=5)
        else
            settings+=("train.max_minutes=$(awk -v s=$DEMO_S 'BEGIN { printf "%.2f", s / 60 }')")
        fi
        mapfile -t options < <(as_options "${settings[@]}")
        run "demo_graphs_$graphs" "$PYTHON" -m seq2seq_attn train configs/demo_rnnsearch.yaml "${options[@]}"
    done
    keep_runs "$work"
    "$PYTHON" - "$FOLDER" <<'PY' || FAILED=1
import json, sys
from pathlib import Path
folder = Path(sys.argv[1])
lines = [
    "# The demo's RNNsearch alone (`seq2seq train configs/demo_rnnsearch.yaml`)",
    "",
    "Trained alone on the device, without validation until its budget ends; updates per second over the",
    "second half of its training log (past the start-up and most of the graphs' captures).",
    "",
    "| train.cuda_graphs | updates | seconds | updates/s | target tokens/s |",
    "|---|--:|--:|--:|--:|",
]
for log in sorted(folder.glob("runs/demo_graphs_*/metrics.jsonl")):
    logged = [r for r in map(json.loads, log.read_text(encoding="utf-8").splitlines()) if "tokens_per_s" in r]
    later = logged[len(logged) // 2 :]  # the second half: past the start-up and most graph captures
    if len(later) < 2:
        continue
    first, last = later[0], later[-1]
    updates, seconds = last["step"] - first["step"], last["time"] - first["time"]
    tokens = sum(r["tokens_per_s"] for r in later[1:]) / (len(later) - 1)
    graphs = log.parent.name.rsplit("_", 1)[1]
    lines.append(f"| {graphs} | {updates:,} | {seconds:.1f} | {updates / seconds:.1f} | {tokens:,.0f} |")
(folder / "demo.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
PY
    rm -rf "$work"
}
# The `recipe` variants, NAME:SETTING,SETTING... (none: configs/rnnsearch50.yaml as it is); RECIPES in the
# environment replaces them (space-separated).
RECIPES=${RECIPES:-"paper: paper-tf32:train.precision=tf32 \
adam-256-tf32:train.batch_size=256,train.optimizer=adam,train.learning_rate=0.001,train.precision=tf32 \
adam-1024-bf16:train.batch_size=1024,train.optimizer=adam,train.learning_rate=0.002,train.precision=bf16"}
RECIPE_FIXED_S=40  # a recipe run's time besides training: start-up, the last log window, validation, saving
recipe() {  # the `recipe` measurement (above): each variant trained alone for an equal time, its dev loss
    local work options=() extra=() variants variant name settings minutes
    work=$(mktemp -d) || { FAILED=1; return; }
    corpus_sets "$work" || { echo "recipe: the corpus $CORPUS lacks a file" >>"$FOLDER/status.txt"; FAILED=1; return; }
    SETS+=(train.validate_every=1000000 train.valid_bleu=false train.keep_best=1 train.log_every=20 "${EXTRA[@]}")
    mapfile -t options < <(as_options "${SETS[@]}")
    run data bash -c '"$1" -m seq2seq_attn data prepare "${@:2}" && "$1" -m seq2seq_attn vocab "${@:2}"' _ \
        "$PYTHON" configs/rnnsearch50.yaml "${options[@]}"
    read -r -a variants <<<"$RECIPES"
    # one equal share each, of what is left after the data
    minutes=$(minutes_left $((${#variants[@]} * RECIPE_FIXED_S)) ${#variants[@]})
    for variant in "${variants[@]}"; do
        name=${variant%%:*}
        settings=()
        [[ $variant == *:?* ]] && IFS=, read -r -a settings <<<"${variant#*:}"
        if ((QUICK)); then
            settings+=(train.max_minutes=0 train.max_steps=5 train.log_every=1)
        else
            settings+=("train.max_minutes=$minutes")
        fi
        mapfile -t extra < <(as_options "${settings[@]}" "train.run_dir=$work/runs/$name")
        run "$name" "$PYTHON" -m seq2seq_attn train configs/rnnsearch50.yaml "${options[@]}" "${extra[@]}"
    done
    keep_runs "$work"
    "$PYTHON" - "$FOLDER" "${variants[@]}" <<'PY' || FAILED=1
import json, sys
from pathlib import Path
folder, variants = Path(sys.argv[1]), sys.argv[2:]
rows = []
for variant in variants:
    name, _, settings = variant.partition(":")
    log = folder / "runs" / name / "metrics.jsonl"
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []
    valid = [r for r in records if "valid_loss" in r]
    train = [r for r in records if "tokens_per_s" in r]
    train = train[len(train) // 2 :] or train  # the second half: past the start-up and most graph captures
    rows.append({
        "variant": name,
        "settings": settings.split(",") if settings else [],
        "updates": valid[-1]["step"] if valid else None,
        "seconds": valid[-1]["time"] if valid else None,
        "target_tokens_per_s": round(sum(r["tokens_per_s"] for r in train) / len(train)) if train else None,
        "dev_loss": round(valid[-1]["valid_loss"], 4) if valid else None,
        "dev_ppl": round(valid[-1]["valid_ppl"], 2) if valid else None,
    })
(folder / "recipe.json").write_text(json.dumps({"rows": rows}, indent=2) + "\n", encoding="utf-8")
lines = [
    "# RNNsearch-50: dev loss after equal training time",
    "",
    "Each variant of configs/rnnsearch50.yaml trained alone, from the same data, vocabulary and seed, for an",
    "equal share of the measurement's time; its dev loss (per target piece, the whole dev set) at the end;",
    "target tokens/s over the second half of its training log.",
    "",
    "| variant | settings | updates | training s | target tokens/s | dev loss | dev perplexity |",
    "|---|---|--:|--:|--:|--:|--:|",
]
for r in rows:
    cells = [r["variant"], ", ".join(r["settings"]) or "(the config)"]
    cells += ["-" if r[k] is None else f"{r[k]:,}" for k in ("updates", "seconds", "target_tokens_per_s", "dev_loss", "dev_ppl")]
    lines.append("| " + " | ".join(cells) + " |")
(folder / "recipe.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
PY
    rm -rf "$work"
}

case $MEASUREMENT in
    profile)
        for config in small_rnnsearch:4000 rnnsearch50:30000; do
            name=${config%%:*}
            # shellcheck disable=SC2046  # (size's words are separate arguments)
            run "$name" "${BENCH[@]}" configs/$name.yaml --precision fp32,bf16 "${GRAPHS[@]}" --profile \
                $(size "--batch 80 --vocab ${config##*:}" "--batch 4 --vocab 64 --src-len 6 --tgt-len 5 --beam 2") \
                --out "$FOLDER/$name"
        done
        demo_alone
        ;;
    batches)
        for precision in fp32 tf32 bf16; do
            # shellcheck disable=SC2046
            run "sentences_$precision" "${BENCH[@]}" configs/rnnsearch50.yaml --precision "$precision" \
                "${GRAPHS[@]}" --beam 0 \
                $(size "--batch 80,256,1024 --vocab 30000" "--batch 2,4 --vocab 64 --src-len 6 --tgt-len 5") \
                --out "$FOLDER/sentences_$precision"
            # shellcheck disable=SC2046
            run "tokens_$precision" "${BENCH[@]}" configs/rnnsearch50.yaml --precision "$precision" \
                "${GRAPHS[@]}" --beam 0 --batch "" \
                $(size "--tokens 6000,24000 --src-len 50 --tgt-len 50 --vocab 30000" \
                    "--tokens 40 --vocab 64 --src-len 6 --tgt-len 5") \
                --out "$FOLDER/tokens_$precision"
        done
        ;;
    paper)
        paper
        ;;
    recipe)
        recipe
        ;;
esac

# the tables in one file, the rest in one archive
{
    echo "# scripts/gpu_measure.sh $MEASUREMENT (${DEVICE}$( ((QUICK)) && echo ', quick'))"
    echo
    "$PYTHON" - "$FOLDER/env/torch.json" <<'PY' || echo "(no env/torch.json)"
import json, sys
machine = json.load(open(sys.argv[1], encoding="utf-8"))
gpus = ", ".join(device["name"] for device in machine["devices"]) or "none"
print(f"GPU {gpus}; torch {machine['torch']}, CUDA {machine.get('cuda')}, cuDNN {machine['cudnn']}")
PY
    grep -h "Driver Version" "$FOLDER/env/nvidia-smi.txt" 2>/dev/null | head -1
    echo
    sed 's/^/    /' "$FOLDER/status.txt"
    for table in "$FOLDER"/*.md; do
        [[ -f $table ]] || continue
        echo
        sed 's/^#/##/' "$table"
    done
} >"$OUT/$MEASUREMENT.md"
cp "$OUT/$MEASUREMENT.md" "$FOLDER/"
tar -czf "$OUT/$MEASUREMENT.tar.gz" -C "$OUT" "$MEASUREMENT" && rm -rf "$FOLDER"
echo "gpu_measure: $OUT/$MEASUREMENT.md and $OUT/$MEASUREMENT.tar.gz ($(($(date +%s) - START)) s)" >&2
exit $FAILED
