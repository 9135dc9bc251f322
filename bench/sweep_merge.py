"""Benchmark: merging a 1,000-root sweep (rollup, cohorts, outliers, fleet, trends, datasets, report).

Analyzes the planted sweep (``npuprof.synth.sweep``, 40 roots), then builds an archive of N finished
roots by giving each of them a copy of one analyzed root's manifest and cached rollup row (what the
merge reads of a finished root), and times ``merge_sweep`` over it. Target: ≤ 10 s for 1,000 roots.
Usage: ``python bench/sweep_merge.py [--roots 1000] [--work DIR]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from npuprof.pipeline import schema  # noqa: E402
from npuprof.pipeline.sweep.local import run_sweep  # noqa: E402
from npuprof.pipeline.sweep.rollup import merge_sweep  # noqa: E402
from npuprof.synth.sweep import generate_sweep  # noqa: E402


def build_archive(analyzed: Path, archive: Path, count: int) -> list[tuple[str, str]]:
    """``count`` finished roots in ``archive``, each a copy of one of ``analyzed``'s roots (cycled)."""
    sources = sorted(p for p in analyzed.iterdir() if (p / schema.ROLLUP_ROW_CACHE).exists())
    roots = []
    for index in range(count):
        source = sources[index % len(sources)]
        slug = f"{source.name}-copy{index:04d}"
        target = archive / slug
        target.mkdir(parents=True)
        shutil.copy2(source / schema.TOP_MANIFEST, target / schema.TOP_MANIFEST)
        cache = json.loads((source / schema.ROLLUP_ROW_CACHE).read_text())
        root = f"/captures/{slug}"
        cache["row"].update(root=root, slug=slug)
        (target / schema.ROLLUP_ROW_CACHE).write_text(json.dumps(cache))
        roots.append((root, slug))
    return roots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--roots", type=int, default=1000)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "out" / "sweep_merge")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    generate_sweep(args.work / "captures")
    started = time.perf_counter()
    run_sweep([str(args.work / "captures")], args.work / "analyzed", series_key=r"build-(\d+)")
    analyzed_s = time.perf_counter() - started
    roots = build_archive(args.work / "analyzed", args.work / "archive", args.roots)
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        summary = merge_sweep(args.work / "archive", roots, {"mode": "bench", "series_key": None})
        runs.append(time.perf_counter() - started)
    result = {
        "planted_sweep_roots": 32,
        "planted_sweep_analyze_s": round(analyzed_s, 2),
        "merge_roots": args.roots,
        "merge_s": [round(r, 2) for r in runs],
        "target_s": 10.0,
        "cohorts": summary["cohort_count"],
        "outlier_roots": len(summary["outlier_roots"]),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    sys.exit(main())
