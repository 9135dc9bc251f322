"""Benchmark: the CPU one small root costs a sweep worker, fixed costs included.

Generates ``--roots`` synthetic 4-rank training roots (about 5 MB each) and analyzes them one after
another in this process, as one sweep worker does (``sweep.local.analyze_into``): the first root pays
the imports and the knowledge files, the others show what every further root costs. Target (issue:
memory and speed): ≤ 0.25 s of CPU per root after the first.
Usage: ``python bench/small_roots.py [--roots 10] [--work DIR]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_CPU_S = 0.25


def cpu_seconds() -> float:
    """CPU of this process and its waited-for children, user + system."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--roots", type=int, default=10)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "out" / "small_roots")
    args = parser.parse_args()
    started = cpu_seconds()
    from npuprof.pipeline.options import AnalyzeOptions
    from npuprof.pipeline.sweep.local import analyze_into
    from npuprof.synth import generate

    import_cpu = cpu_seconds() - started
    roots = []
    for index in range(args.roots):
        place = args.work / "roots" / f"root_{index:03d}"
        if not place.exists():
            generate(place, "clean", seed=index)
        roots.append(place)
    input_bytes = sum(f.stat().st_size for f in roots[0].rglob("*") if f.is_file())
    shutil.rmtree(args.work / "archive", ignore_errors=True)
    options = AnalyzeOptions().to_dict()
    per_root, walls = [], []
    for index, root in enumerate(roots):
        cpu, wall = cpu_seconds(), time.perf_counter()
        result = analyze_into(str(root), str(args.work / "archive" / root.name), options)
        assert result["status"] == "ok", result
        per_root.append(cpu_seconds() - cpu)
        walls.append(time.perf_counter() - wall)
    further = per_root[1:] or per_root
    report = {
        "roots": args.roots,
        "root_mb": round(input_bytes / 1e6, 1),
        "import_cpu_s": round(import_cpu, 3),
        "first_root_cpu_s": round(per_root[0], 3),
        "further_root_cpu_s": {"median": round(statistics.median(further), 3), "max": round(max(further), 3)},
        "further_root_wall_s_median": round(statistics.median(walls[1:] or walls), 3),
        "target_cpu_s": TARGET_CPU_S,
        "met": statistics.median(further) <= TARGET_CPU_S,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
