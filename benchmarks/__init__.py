"""Benchmarks: ours side by side with JoeyNMT 2.3.0 and OpenNMT-py 3.5.1, and our model alone.

Run from the repository root (see benchmarks/README.md):

bench.py        `python -m benchmarks.bench`: the toolkits on one corpus, same tokens, same budget; with
                `--curves`, quality against time (one training per system and seed, a checkpoint per point)
curves.py       the curves' points (checkpoint writes left out), medians and ranges, report and plot
bench_step.py   `python -m benchmarks.bench_step`: one training update and one beam step of our models
machine.py      what a figure was measured on (CPU model and flags, torch), and the load meanwhile
measure.py      run one process and measure it: wall time, peak RSS, peak GPU memory, budget by SIGINT,
                or checkpoints asked for at fixed points
launcher/       what runs in each toolkit's own venv: launch.py (runs its module, records peak GPU
                memory), bench_snapshots.py (checkpoints on SIGUSR1), opennmt_translate.py (its
                onmt_translate with int8 and counted multiply-adds)
logs.py         read throughput, decoding time, multiply-adds and parameter counts out of each toolkit's logs
toolkits.py     ours, JoeyNMT and OpenNMT-py (matched, and its default model) behind one interface
ours_decode.py  our timed decoder: the translate pipeline with the clock around the search only
report.py       the common throughput window, medians, ratios ours/peer, the speed targets, markdown/JSON
peers/          the peers' configs, with @KEY@ placeholders filled in per run
results/        reports the runs write: side_by_side.md/.json (bench), quality_curves.md/.json/.png
                (bench --curves), step.md/.json (bench_step --out)
"""
