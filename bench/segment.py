"""Benchmark: segment (+ classify, once built) on ~1 M events vs normalize of the same root.

Generates a synthetic dense-training root (default 4 ranks × ~250 k events, 28 layers), runs
normalize, then the later rank-local stages, and reports their times and the ratio to normalize
(target: segment + classify ≤ 10 s for 1 M events on this machine).
Usage: ``python bench/segment.py [--ranks 4] [--steps 146] [--work DIR]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from npuprof.pipeline.runner import StageWindow, analyze
from npuprof.pipeline.stages import STAGES
from npuprof.synth import generate

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--steps", type=int, default=146)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "out")
    args = parser.parse_args()
    root = args.work / f"segment_root_{args.ranks}x{args.steps}"
    if not (root / "ground_truth.json").exists():
        shutil.rmtree(root, ignore_errors=True)
        generate(root, "clean", ranks=args.ranks, layers=args.layers, steps=args.steps, trace=False)
    out = args.work / "segment_out"
    started = time.perf_counter()
    result = analyze(root, out, overwrite=True, window=StageWindow(to_stage="normalize"))
    normalize_s = time.perf_counter() - started
    later = [s.name for s in STAGES if s.built and s.name in ("segment", "classify")]
    timings = {}
    for name in later:
        started = time.perf_counter()
        analyze(None, out, window=StageWindow(only_stage=name))
        timings[name] = round(time.perf_counter() - started, 3)
    total = sum(timings.values())
    print(
        json.dumps(
            {
                "ranks": args.ranks,
                "events": result["event_count"],
                "normalize_s": round(normalize_s, 3),
                "stage_s": timings,
                "segment_classify_s": round(total, 3),
                "ratio_to_normalize": round(total / normalize_s, 3),
                "events_per_s": round(result["event_count"] / total),
                "target_s_per_1M": 10,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
