"""Benchmark: the CPU one small root costs a sweep worker, fixed costs included.

Generates ``--roots`` synthetic 4-rank training roots (about 5 MB each) and analyzes them one after
another in this process, as one sweep worker does (``sweep.local.analyze_into``): the first root pays
the imports and the knowledge files, the others show what every further root costs. Target (issue:
memory and speed): ≤ 0.25 s of CPU per root after the first.

Beside them, in turn with them, two shapes that bound what a redesign could reach: ``one_frame``, the
same events as one rank (1 rank × 4× the steps: what running each rank stage once over all a root's
ranks, rank as a column, would cost at best), and ``one_rank``, one rank of the root alone (the fixed
cost of an analysis, whatever its ranks).
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
    from npuprof.synth.scenarios import scenario

    import_cpu = cpu_seconds() - started
    clean = scenario("clean")
    shapes = {
        "root": {"ranks": clean.ranks, "steps": clean.steps},
        "one_frame": {"ranks": 1, "steps": clean.ranks * clean.steps},
        "one_rank": {"ranks": 1, "steps": clean.steps},
    }
    roots: dict[str, list[Path]] = {shape: [] for shape in shapes}
    for index in range(args.roots):
        for shape, size in shapes.items():
            place = args.work / "roots" / f"{shape}_{index:03d}"
            if not place.exists():
                generate(place, "clean", seed=index, **size)
            roots[shape].append(place)
    input_bytes = sum(f.stat().st_size for f in roots["root"][0].rglob("*") if f.is_file())
    shutil.rmtree(args.work / "archive", ignore_errors=True)
    options = AnalyzeOptions().to_dict()
    cpu_of: dict[str, list[float]] = {shape: [] for shape in shapes}
    walls = []
    for index in range(args.roots):  # the shapes in turn: a drift of the machine's speed moves them alike
        for shape in shapes:
            root = roots[shape][index]
            cpu, wall = cpu_seconds(), time.perf_counter()
            result = analyze_into(str(root), str(args.work / "archive" / root.name), options)
            assert result["status"] == "ok", result
            cpu_of[shape].append(cpu_seconds() - cpu)
            if shape == "root":
                walls.append(time.perf_counter() - wall)
    further = {shape: spent[1:] or spent for shape, spent in cpu_of.items()}
    report = {
        "roots": args.roots,
        "root_mb": round(input_bytes / 1e6, 1),
        "import_cpu_s": round(import_cpu, 3),
        "first_root_cpu_s": round(cpu_of["root"][0], 3),
        "further_root_cpu_s": {
            "median": round(statistics.median(further["root"]), 3),
            "max": round(max(further["root"]), 3),
        },
        "further_root_wall_s_median": round(statistics.median(walls[1:] or walls), 3),
        # the bounds: the root's events as one rank, and one rank of it alone (medians after the first)
        "one_frame_cpu_s": round(statistics.median(further["one_frame"]), 3),
        "one_rank_cpu_s": round(statistics.median(further["one_rank"]), 3),
        "target_cpu_s": TARGET_CPU_S,
        "met": statistics.median(further["root"]) <= TARGET_CPU_S,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
