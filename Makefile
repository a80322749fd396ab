# One command each: `make demo` and `make test` install first when needed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONSTRAINTS ?= constraints.txt
STAMP := $(VENV)/.installed

.PHONY: install test test-e2e test-fast lint format demo reproduce-local reproduce-multi30k reproduce-wmt14 bench gpu-check clean

install: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e ".[dev]"
	touch $(STAMP)

# Every test but the end-to-end runs (marked e2e): what to run before a commit.
test: install
	$(BIN)/python -m pytest -q -n 2 -m "not e2e" tests

# The end-to-end runs (marked e2e; what they are: the marker's description in pyproject.toml). CI runs
# them after `make test`.
test-e2e: install
	$(BIN)/python -m pytest -q -n 2 -m e2e tests

# The inner loop, about a minute: every test but those marked slow (end-to-end runs, training, torch.compile,
# most of those that start processes).
test-fast: install
	$(BIN)/python -m pytest -q -n 2 -m "not slow" tests

lint: install
	$(BIN)/ruff check seq2seq_attn tests scripts benchmarks
	$(BIN)/ruff format --check seq2seq_attn tests scripts benchmarks

format: install
	$(BIN)/ruff check --fix seq2seq_attn tests scripts benchmarks
	$(BIN)/ruff format seq2seq_attn tests scripts benchmarks

# The headline: RNNsearch vs RNNencdec on the offline synthetic corpus, BLEU by length (runs/demo/).
demo: install
	$(BIN)/python scripts/reproduce.py --out runs/demo --parallel --criteria \
		--label RNNsearch --label RNNencdec configs/demo_rnnsearch.yaml configs/demo_rnnencdec.yaml

# Any line-aligned corpus in CORPUS: {train,valid,test}.{$(SRC),$(TGT)}, each plain or .gz. A corpus of one
# file pair (train.* only) gets its dev and test sets held out of it (data.local.hold_out in the configs).
# Defaults fit ../shared/corpora/en-fr. REPRO_ARGS adds overrides for both models, e.g.
# REPRO_ARGS="--set train.max_minutes=20 --set model.hidden_size=256"; the report goes to LOCAL_OUT.
CORPUS ?= ../shared/corpora/en-fr
LOCAL_OUT ?= runs/local
SRC ?= en
TGT ?= fr
corpus_file = $(abspath $(firstword $(wildcard $(CORPUS)/$(1) $(CORPUS)/$(1).gz)))
split_set = $(if $(call corpus_file,$(1).$(SRC))$(call corpus_file,$(1).$(TGT)),--set data.local.$(1).src=$(call corpus_file,$(1).$(SRC)) --set data.local.$(1).tgt=$(call corpus_file,$(1).$(TGT)))
LOCAL_SET = --set data.src_lang=$(SRC) --set data.tgt_lang=$(TGT) \
	$(foreach split,train valid test,$(call split_set,$(split)))

reproduce-local: install
	$(if $(call corpus_file,train.$(SRC)),,$(error CORPUS=$(CORPUS): no train.$(SRC) or train.$(SRC).gz there))
	$(BIN)/python scripts/reproduce.py --out $(LOCAL_OUT) --parallel $(LOCAL_SET) $(REPRO_ARGS) \
		--label RNNsearch --label RNNencdec configs/local_rnnsearch.yaml configs/local_rnnencdec.yaml

# Multi30k task 1: one RNNsearch per direction, en->fr and en->de, one after the other, each with the whole
# machine for its budget (train.max_minutes: 60), its checkpoint picked on val; test_2016_flickr and
# test_2017_flickr translated once and scored with sacrebleu and the task's BLEU. MULTI30K: a folder of the
# official files (default ../shared/corpora/multi30k); MULTI30K_DOWNLOAD=1 downloads them into
# data/multi30k-task1 instead. Every file is checked against its sha256. Runs and reports go to
# MULTI30K_OUT/en-fr and MULTI30K_OUT/en-de; REPRO_ARGS adds overrides, e.g. "--set train.max_minutes=20".
MULTI30K_DOWNLOAD ?=
MULTI30K ?= $(if $(MULTI30K_DOWNLOAD),data/multi30k-task1,../shared/corpora/multi30k)
MULTI30K_OUT ?= runs/multi30k
MULTI30K_SET = --set data.multi30k.dir=$(abspath $(MULTI30K)) $(if $(MULTI30K_DOWNLOAD),--set data.multi30k.download=true)

reproduce-multi30k: install
	$(if $(MULTI30K_DOWNLOAD)$(wildcard $(MULTI30K)/train.en.gz),,$(error MULTI30K=$(MULTI30K): no train.en.gz there; MULTI30K_DOWNLOAD=1 downloads the official files))
	$(BIN)/python scripts/reproduce.py --out $(MULTI30K_OUT)/en-fr --runs $(MULTI30K_OUT)/en-fr $(MULTI30K_SET) \
		$(REPRO_ARGS) configs/multi30k_enfr.yaml
	$(BIN)/python scripts/reproduce.py --out $(MULTI30K_OUT)/en-de --runs $(MULTI30K_OUT)/en-de $(MULTI30K_SET) \
		$(REPRO_ARGS) configs/multi30k_ende.yaml

# The paper's four models on WMT'14 En->Fr from Hugging Face (newstest2014 by length), trained side by side (one
# GPU each where there are four), each to the paper's number of updates. Needs network and GPUs.
reproduce-wmt14: install
	$(BIN)/python scripts/reproduce.py --out runs/wmt14 --parallel $(REPRO_ARGS) \
		--label RNNencdec-30 --label RNNencdec-50 --label RNNsearch-30 --label RNNsearch-50 \
		configs/rnnencdec30.yaml configs/rnnencdec50.yaml configs/rnnsearch30.yaml configs/rnnsearch50.yaml

# Ours side by side with JoeyNMT 2.3.0 and OpenNMT-py 3.5.1; each run writes benchmarks/results/side_by_side.md and .json.
# Peers are pip-installed on first use into .bench/venvs/ (benchmarks/README.md). BENCH_ARGS="--corpus DIR --reps 1"
bench: install
	$(BIN)/python -m benchmarks.bench $(BENCH_ARGS)

# Every GPU path in one command of at most 10 minutes, results in GPU_CHECK_OUT (docs/gpu.md). Installs
# nothing: runs in place with the venv's Python when there is one. On a CPU: GPU_CHECK_ARGS="--device cpu --quick"
GPU_CHECK_OUT ?= runs/gpu-check
gpu-check:
	PYTHON=$(if $(wildcard $(BIN)/python),$(BIN)/python,python3) scripts/gpu_check.sh $(GPU_CHECK_OUT) $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
