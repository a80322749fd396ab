#!/usr/bin/env bash
# Every GPU path of seq2seq-attn in one command of at most 10 minutes; what it saw goes into one folder.
#
#   scripts/gpu_check.sh OUT_DIR [--device cuda|cpu] [--quick] [--work DIR] [--only STAGE[,STAGE...]]
#
# Stages, in this order, each with its own time limit (below) so that the whole check ends within TOTAL_S;
# a stage that fails or runs out of time does not stop the next one:
#   env          nvidia-smi, torch / CUDA / cuDNN / NCCL versions, packages, lscpu   -> OUT/env/
#   tests        tests/test_cuda.py with pytest                                     -> OUT/tests/junit.xml
#   bench-small  the model micro-benchmark (BENCH_STEP) of the small configs        -> OUT/bench/CONFIG.{json,md}
#   bench-paper  the same for rnnsearch50 at the paper's batch of 80, vocab 30k     -> OUT/bench/rnnsearch50.*
#                (both in fp32 and bf16, eager and with compiled attention, and on CUDA the update and the
#                search step replayed from CUDA graphs against them run eagerly; one run per config, so that
#                a stage that runs out of time keeps the configs it finished)
#   demo         `make demo`'s two models for a shorter budget, via reproduce.py    -> OUT/demo/ (curve, summary)
# then OUT/summary.md and OUT/summary.json (scripts/gpu_check.py): each stage's status (passed, failed, timeout, skipped), duration
# and log (OUT/logs/STAGE.log). Exit code 0 when no stage failed or timed out.
#
# --only runs the stages named (e.g. `--only env,demo` to run a failed stage again); the others are recorded as
# `deselected`, and the summary expects only the outputs of the stages that ran.
#
# --quick shrinks every stage (tiny shapes, no compile, a demo of a few updates on a tiny corpus) so that the
# same commands run on a CPU in a minute or two: `make test-e2e` runs `--device cpu --quick`. --device cpu also
# hides any GPU. Nothing is installed: the code runs in place (PYTHONPATH=the repository) with $PYTHON
# (default python3, else python); pytest is used when present. Data and checkpoints go to --work (default: a
# temporary folder, removed at the end).
set -uo pipefail

BENCH_STEP=benchmarks.bench_step  # the model micro-benchmark, a module run from the repository root
STAGE_NAMES=(env tests bench-small bench-paper demo)

# Time limits in seconds. The stages' sum exceeds TOTAL_S: a stage that ends early leaves its time to the
# next ones, and each stage gets at most what is left of TOTAL_S.
TOTAL_S=560
ENV_S=30
TESTS_S=240
BENCH_SMALL_S=110
BENCH_PAPER_S=130
DEMO_S=220
DEMO_FIXED_S=100  # the demo's time outside training: data, vocabulary, start-up, test-set search, heat maps
SUMMARY_S=10      # kept back for the summary

usage() {
    echo "usage: $(sed -n '4s/^# *//p' "$0")" >&2
    exit 2
}

OUT=""
DEVICE=cuda
QUICK=0
WORK=""
ONLY=""
while (($#)); do
    case $1 in
        --device) DEVICE=${2:-}; shift 2 || usage ;;
        --quick) QUICK=1; shift ;;
        --work) WORK=${2:-}; shift 2 || usage ;;
        --only) ONLY=${2:-}; shift 2 || usage ;;
        -h | --help) usage ;;
        -*) echo "gpu_check: unknown option $1" >&2; usage ;;
        *) [[ -z $OUT ]] || usage; OUT=$1; shift ;;
    esac
done
[[ -n $OUT ]] || usage
[[ $DEVICE == cuda || $DEVICE == cpu ]] || { echo "gpu_check: --device must be cuda or cpu, got '$DEVICE'" >&2; exit 2; }
for name in ${ONLY//,/ }; do
    [[ " ${STAGE_NAMES[*]} " == *" $name "* ]] ||
        { echo "gpu_check: --only: unknown stage '$name' (stages: ${STAGE_NAMES[*]})" >&2; exit 2; }
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$OUT/logs" || exit 2
OUT=$(cd "$OUT" && pwd)
if [[ -z $WORK ]]; then
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
    trap 'rm -rf "$WORK"' EXIT
fi
mkdir -p "$WORK" && WORK=$(cd "$WORK" && pwd)
PYTHON=${PYTHON:-$(command -v python3 || command -v python)}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
[[ $DEVICE == cpu ]] && export CUDA_VISIBLE_DEVICES=""
cd "$ROOT" || exit 2

STAGES=$OUT/logs/stages.tsv  # name, status, seconds, limit, note: one line per stage
: >"$STAGES"
START=$(date +%s)
DEADLINE=$((START + TOTAL_S - SUMMARY_S))

now_ms() { date +%s%3N; }

record() {  # record NAME STATUS SECONDS LIMIT NOTE
    printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$STAGES"
    echo "gpu_check: $1: $2 ($3 s) $5" >&2
}

left() { echo $((DEADLINE - $(date +%s))); }

selected() {  # selected NAME: true unless --only leaves stage NAME out
    [[ -z $ONLY || ",$ONLY," == *",$1,"* ]]
}

stage() {  # stage NAME LIMIT_S COMMAND...: run COMMAND under the smaller of LIMIT_S and the time left
    local name=$1 limit=$2
    shift 2
    if ! selected "$name"; then
        record "$name" deselected 0 0 "not in --only $ONLY"
        return
    fi
    ((limit > $(left))) && limit=$(left)
    if ((limit < 5)); then
        record "$name" skipped 0 0 "no time left of the check's ${TOTAL_S} s"
        return
    fi
    echo "gpu_check: $name (at most $limit s): $*" >&2
    local start
    start=$(now_ms)
    timeout --kill-after=10 "$limit" "$@" >"$OUT/logs/$name.log" 2>&1
    local rc=$? status=failed
    ((rc == 0)) && status=passed
    ((rc == 124 || rc == 137)) && status=timeout
    record "$name" "$status" "$(awk -v ms=$(($(now_ms) - start)) 'BEGIN { printf "%.1f", ms / 1000 }')" \
        "$limit" "exit code $rc"
}

# -- env: what machine this is --------------------------------------------------------------------------

collect_env() {  # collect_env FOLDER DEVICE
    local folder=$1 device=$2
    mkdir -p "$folder"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi >"$folder/nvidia-smi.txt" 2>&1
        nvidia-smi -q >"$folder/nvidia-smi-q.txt" 2>&1
    else
        echo "nvidia-smi: not found" >"$folder/nvidia-smi.txt"
    fi
    lscpu >"$folder/lscpu.txt" 2>&1 || echo "lscpu: not found" >"$folder/lscpu.txt"
    "$PYTHON" scripts/gpu_check.py env "$folder" "$device"
}

bench_each() {  # bench_each FOLDER CONFIG... -- BENCH_STEP_COMMAND...: one run per config, FOLDER/CONFIG.*
    local folder=$1 configs=() config failed=0
    shift
    while [[ $1 != -- ]]; do
        configs+=("$1")
        shift
    done
    shift
    for config in "${configs[@]}"; do
        "$@" --out "$folder/$(basename "$config" .yaml)" "$config" || failed=1
    done
    return $failed
}

export -f collect_env bench_each
export PYTHON

# -- the stages -----------------------------------------------------------------------------------------

stage env "$ENV_S" bash -c 'collect_env "$@"' _ "$OUT/env" "$DEVICE"

mkdir -p "$OUT/tests"
if selected tests && ! "$PYTHON" -c "import pytest" 2>/dev/null; then
    record tests skipped 0 0 "pytest is not installed: no test ran"
else
    # quick: only the `cuda` tests (skipped on a CPU); the file's other tests run in `make test` anyway
    stage tests "$TESTS_S" "$PYTHON" -m pytest -p no:cacheprovider -rA tests/test_cuda.py \
        --junitxml="$OUT/tests/junit.xml" $( ((QUICK)) && echo "-m cuda")
fi

# --quick: every model at this size, and tiny batches (what changes is sizes, not code paths)
QUICK_MODEL=(model.src_embed_dim=16 model.tgt_embed_dim=16 model.hidden_size=32 model.decoder_hidden_size=32
    model.attention_dim=32 model.maxout_dim=16)
if ((QUICK)); then
    SHAPES=(--batch 4 --src-len 6 --tgt-len 5 --vocab 64 --warmup 1 --reps 1 --beam 2)
    for setting in "${QUICK_MODEL[@]}"; do SHAPES+=(--set "$setting"); done
    PAPER_SHAPES=("${SHAPES[@]}")
    COMPILE=()  # compiling takes minutes on a small CPU; tests/test_fused.py covers the compiled kernels
else
    SHAPES=()
    PAPER_SHAPES=(--batch 80 --vocab 30000)
    COMPILE=(--compile)
fi
BENCH=("$PYTHON" -m "$BENCH_STEP" --device "$DEVICE" --precision fp32,bf16 "${COMPILE[@]}")
mkdir -p "$OUT/bench"
# the eager-only configs first (Luong's score and RNNencdec have nothing to compile)
stage bench-small "$BENCH_SMALL_S" bash -c 'bench_each "$@"' _ "$OUT/bench" configs/small_rnnencdec.yaml \
    configs/small_luong.yaml configs/small_rnnsearch.yaml -- "${BENCH[@]}" "${SHAPES[@]}"
# the paper's model also with its update and search step replayed from CUDA graphs (train.cuda_graphs,
# decode.cuda_graphs), on a GPU
[[ $DEVICE == cuda ]] && PAPER_SHAPES+=(--cuda-graphs off,on)
stage bench-paper "$BENCH_PAPER_S" bash -c 'bench_each "$@"' _ "$OUT/bench" configs/rnnsearch50.yaml \
    -- "${BENCH[@]}" "${PAPER_SHAPES[@]}"

if ((QUICK)); then
    DEMO_SETS=(
        data.synthetic.train_size=300 data.synthetic.valid_size=20 data.synthetic.test_size=40
        data.synthetic.vocab_size=100 data.synthetic.irregular_words=10 data.synthetic.max_words=20
        vocab.size=200 "${QUICK_MODEL[@]}" train.max_minutes=0 train.max_steps=10 train.validate_every=10
        train.log_every=5 train.valid_max_sentences=10 decode.beam_size=2
    )
    DEMO_ARGS=(--heatmaps 1)
else
    demo_limit=$DEMO_S
    ((demo_limit > $(left))) && demo_limit=$(left)
    DEMO_SETS=("train.max_minutes=$(awk -v s=$((demo_limit - DEMO_FIXED_S)) 'BEGIN { printf "%.2f", (s > 15 ? s : 15) / 60 }')")
    DEMO_ARGS=(--criteria)
fi
DEMO_SETS+=("data.dir=$WORK/demo-data" "train.device=$DEVICE")
for setting in "${DEMO_SETS[@]}"; do DEMO_ARGS+=(--set "$setting"); done
stage demo "$DEMO_S" "$PYTHON" scripts/reproduce.py --out "$OUT/demo" --runs "$WORK/demo-runs" --parallel \
    "${DEMO_ARGS[@]}" \
    --label RNNsearch --label RNNencdec configs/demo_rnnsearch.yaml configs/demo_rnnencdec.yaml
for run in "$WORK"/demo-runs/*/; do  # the training logs (tokens/s, losses) outlive the work folder
    [[ -d $run ]] || continue
    mkdir -p "$OUT/demo/runs/$(basename "$run")"
    cp "$run"/{config.yaml,metrics.jsonl,train.log} "$OUT/demo/runs/$(basename "$run")/" 2>/dev/null
done

# -- summary --------------------------------------------------------------------------------------------

"$PYTHON" scripts/gpu_check.py summary "$OUT" "$DEVICE" "$QUICK" "$(($(date +%s) - START))" --only "$ONLY"
