"""The benchmark harness behind `scripts/bench.py` (issue 8): ours side by side with JoeyNMT and OpenNMT-py.

measure.py      run one process and measure it: wall time, peak RSS, peak GPU memory, budget by SIGINT
launch.py       started in each toolkit's own venv: runs its module, records torch's peak GPU memory
logs.py         read throughput, decoding time and parameter counts out of each toolkit's logs
toolkits.py     ours, JoeyNMT and OpenNMT-py behind one interface: install, train, decode
ours_decode.py  our timed decoder: the translate pipeline with the clock around the search only
report.py       medians, ratios ours/peer, the targets of issue 8, docs/PERFORMANCE.md and .json
peers/          the peers' configs, with @KEY@ placeholders filled in per run
"""
