"""Benchmark: how long ``npuprof --help`` takes, as a user's shell starts it (a new process, imports
included), over ``--repeat`` runs; and ``npuprof analyze --help`` beside it.

Target: < 0.3 s (the median; min and max printed beside it).
Usage: ``python bench/cli_start.py [--repeat 15]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 0.3
NPUPROF = shutil.which("npuprof") or str(Path(sys.executable).parent / "npuprof")  # the installed CLI


def timed(argv: list[str], repeat: int) -> dict:
    """min / median / max seconds of ``argv`` run ``repeat`` times (after one warm-up run)."""
    subprocess.run(argv, check=True, capture_output=True)
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        seconds.append(time.perf_counter() - started)
    return {
        "min_s": round(min(seconds), 3),
        "median_s": round(statistics.median(seconds), 3),
        "max_s": round(max(seconds), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    top = timed([NPUPROF, "--help"], args.repeat)
    report = {
        "npuprof --help": top,
        "npuprof analyze --help": timed([NPUPROF, "analyze", "--help"], args.repeat),
        "python -c pass": timed([sys.executable, "-c", "pass"], args.repeat),  # the interpreter's own start
        "target": f"median < {TARGET_S} s",
        "met": top["median_s"] < TARGET_S,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
