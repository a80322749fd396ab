"""Run a toolkit's module or script in this interpreter and record its peak memory at exit.

With any toolkit's own python: `python launch.py -m MODULE [ARGS...]` or `python launch.py SCRIPT [ARGS...]`.
The peaks go to the JSON file named by $BENCH_STATS_FILE: the process's resident high-water mark (VmHWM of
/proc/self/status, which exec starts afresh: the kernel's ru_maxrss that `wait4` reports would also count
the harness's memory at the fork) and `torch.cuda.max_memory_allocated()` (null when CUDA was never used).
SIGTERM ends the process through SystemExit, so that the record is written then too (a toolkit that
handles SIGTERM itself keeps its handler). Standard library only: it runs inside the peers' virtual
environments too. With
$BENCH_SNAPSHOT_HOOK set it first hooks the toolkit's training loop so that SIGUSR1 writes a checkpoint
(bench_snapshots.py: the points of `bench --curves`).

Its folder holds only what runs inside a toolkit's interpreter (this, bench_snapshots.py and
opennmt_translate.py): Python puts a script's folder first on the import path, and there no module of the
harness can shadow one the toolkit imports (and their names are none of a toolkit's modules).
"""

import atexit
import json
import os
import runpy
import signal
import sys


def _record() -> None:
    torch = sys.modules.get("torch")
    used = torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()
    peak = torch.cuda.max_memory_allocated() if used else None
    path = os.environ.get("BENCH_STATS_FILE")
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"cuda_max_memory_allocated": peak, "vm_hwm_kib": _resident_peak_kib()}, handle)


def _resident_peak_kib():
    """This process's peak resident memory in KiB (Linux), None where /proc does not say."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _terminated(signum, frame):
    sys.exit(128 + signum)


def main() -> None:
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    atexit.register(_record)
    # The benchmark stops training with SIGINT at the budget. A process started in the background of a
    # non-interactive shell (`nohup make bench &`) inherits SIGINT ignored, and Python then installs no
    # KeyboardInterrupt handler: the toolkit would train on to the SIGTERM that follows.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminated)
    if os.environ.get("BENCH_SNAPSHOT_HOOK"):
        import bench_snapshots

        bench_snapshots.install(os.environ["BENCH_SNAPSHOT_HOOK"])
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main()
