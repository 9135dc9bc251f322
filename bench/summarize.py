"""Benchmark: summarize on the 8-rank × 250 k-event root of bench/normalize.py vs a bare
``pyarrow.csv.read_csv`` of its kernel_details files (target ≤ 1.5×, one run).

Builds (or reuses) the root, runs normalize → classify once, then times the summarize stage alone.
Usage: ``python bench/summarize.py [--ranks 8] [--rows 250000] [--work DIR]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from normalize import bare_read_seconds, build_root  # noqa: E402

from npuprof.pipeline.runner import StageWindow, analyze  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--rows", type=int, default=250_000)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "out")
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    args = parser.parse_args()
    root = build_root(args.work, args.ranks, args.rows)
    files = sorted(root.rglob("kernel_details.csv"))
    out = args.work / "summarize_out"
    analyze(root, out, jobs=args.jobs, overwrite=True, window=StageWindow(to_stage="classify"))
    bare_read_seconds(files)  # warm the page cache
    gc.collect()
    bare = bare_read_seconds(files)
    started = time.perf_counter()
    analyze(None, out, jobs=args.jobs, window=StageWindow(only_stage="summarize"))
    summarize_s = time.perf_counter() - started
    print(
        json.dumps(
            {
                "ranks": args.ranks,
                "rows_per_rank": args.rows,
                "bare_read_s": round(bare, 3),
                "summarize_s": round(summarize_s, 3),
                "summarize_over_bare_read": round(summarize_s / bare, 3),
                "jobs": args.jobs,
                "target": "<= 1.5",
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
