"""Benchmark: generate a large synthetic root (default 8 ranks × ~250 k kernel rows) and report
time, rows/s, bytes on disk and peak RSS (target: ≤ 60 s, little memory).

Usage: ``python bench/synth.py [--ranks 8] [--layers 28] [--steps 146] [--work DIR]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import peak_rss  # noqa: E402

from npuprof.synth import generate  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--steps", type=int, default=146)  # ≈ 250 k rows per rank for dense training
    parser.add_argument("--scenario", default="clean")
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "out")
    args = parser.parse_args()
    root = args.work / "synth_root"
    shutil.rmtree(root, ignore_errors=True)
    with peak_rss() as measured:
        result = generate(root, args.scenario, ranks=args.ranks, layers=args.layers, steps=args.steps)
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    print(
        json.dumps(
            {
                "scenario": args.scenario,
                "ranks": args.ranks,
                "rows": result["rows"],
                "rows_per_rank": result["rows"] // args.ranks,
                "seconds": round(measured["seconds"], 2),
                "rows_per_s": round(result["rows"] / measured["seconds"]),
                "disk_mb": round(size / 1e6, 1),
                "peak_rss_mb": round(measured["peak"] / 1e6, 1),
                "target_seconds": 60,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
