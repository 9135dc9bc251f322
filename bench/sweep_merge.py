"""Benchmark: merging a 10,000-root sweep (rollup, cohorts, outliers, fleet suspects, trends, datasets,
report) from scratch and after a few roots were added, and querying it.

Analyzes the planted sweep (``npuprof.synth.sweep``, 40 roots), then builds an archive of N finished
roots by giving each of them a copy of one analyzed root's manifest and cached rows (what the merge
reads of a finished root), and measures, each merge in its own process as ``npuprof sweep`` runs it
(wall time and the process's peak memory):

- a merge from scratch (no merge state: every root's cached rows are read), 3 runs;
- a merge after adding 10 roots (the last merge's datasets give the rest), 3 times (10 more each);
- ``npuprof query`` over the archive, 3 questions.

Targets (issue 49): from scratch ≤ 30 s and ≤ 2 GB; after adding 10 roots, seconds; a query ≤ 2 s.
Usage: ``python bench/sweep_merge.py [--roots 10000] [--work DIR]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from _measure import run_measured  # noqa: E402

from npuprof.pipeline import schema  # noqa: E402
from npuprof.pipeline.sweep.local import run_sweep  # noqa: E402
from npuprof.synth.sweep import generate_sweep  # noqa: E402

NPUPROF = shutil.which("npuprof") or str(Path(sys.executable).parent / "npuprof")  # the installed CLI
QUESTIONS = (
    "SELECT cohort_id, COUNT(*) AS roots, MEDIAN(step_wall_ms) AS wall FROM roots GROUP BY 1",
    "SELECT r.host_name, r.device_id, COUNT(*) AS flags FROM findings f JOIN ranks r ON r.slug = f.slug "
    "AND f.rank_ids = CAST(r.rank_id AS VARCHAR) GROUP BY 1, 2 ORDER BY flags DESC LIMIT 5",
    "SELECT name, MEDIAN(ms_per_step) AS ms FROM operators GROUP BY 1 ORDER BY ms DESC LIMIT 10",
)


def add_roots(analyzed: Path, archive: Path, first: int, count: int) -> list[tuple[str, str]]:
    """``count`` finished roots in ``archive`` numbered from ``first``, each a copy of one of
    ``analyzed``'s roots (cycled)."""
    sources = sorted(p for p in analyzed.iterdir() if (p / schema.ROLLUP_ROW_CACHE).exists())
    roots = []
    for index in range(first, first + count):
        source = sources[index % len(sources)]
        slug = f"{source.name}-copy{index:05d}"
        target = archive / slug
        target.mkdir(parents=True)
        shutil.copy2(source / schema.TOP_MANIFEST, target / schema.TOP_MANIFEST)
        cache = json.loads((source / schema.ROLLUP_ROW_CACHE).read_text())
        root = f"/captures/{slug}"
        cache["row"].update(root=root, slug=slug)
        (target / schema.ROLLUP_ROW_CACHE).write_text(json.dumps(cache))
        roots.append((root, slug))
    return roots


def merge_child(archive: Path, roots_file: Path, scratch: bool) -> None:
    """One merge, as the sweep runs it (the measured child process)."""
    from npuprof.pipeline.sweep.merge_state import forget_state
    from npuprof.pipeline.sweep.rollup import merge_sweep

    if scratch:
        forget_state(archive)
    roots = [tuple(pair) for pair in json.loads(roots_file.read_text())]
    merge_sweep(archive, roots, {"mode": "bench", "series_key": None})


def measured_merge(archive: Path, roots: list[tuple[str, str]], scratch: bool) -> dict:
    roots_file = archive.parent / "roots.json"
    roots_file.write_text(json.dumps(roots))
    argv = [sys.executable, __file__, "--merge-child", str(archive), str(roots_file)]
    run = run_measured([*argv, "--scratch"] if scratch else argv)
    return {"s": round(run["seconds"], 2), "peak_mb": round(run["peak"] / 2**20)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--roots", type=int, default=10000)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "out" / "sweep_merge")
    parser.add_argument("--merge-child", nargs=2, type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--scratch", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.merge_child:
        merge_child(*args.merge_child, scratch=args.scratch)
        return
    shutil.rmtree(args.work, ignore_errors=True)
    truth = generate_sweep(args.work / "captures")
    started = time.perf_counter()
    run_sweep([str(args.work / "captures")], args.work / "analyzed", series_key=truth["series_key"])
    analyzed_s = time.perf_counter() - started
    archive = args.work / "archive"
    roots = add_roots(args.work / "analyzed", archive, 0, args.roots)
    scratch = [measured_merge(archive, roots, scratch=True) for _ in range(3)]
    grown = []
    for _ in range(3):
        roots += add_roots(args.work / "analyzed", archive, len(roots), 10)
        grown.append({"roots": len(roots), **measured_merge(archive, roots, scratch=False)})
    queries = [round(run_measured([NPUPROF, "query", str(archive), sql])["seconds"], 2) for sql in QUESTIONS]
    summary = json.loads((archive / schema.SWEEP_SUMMARY).read_text())
    result = {
        "planted_sweep_roots": truth["root_count"],
        "planted_sweep_analyze_s": round(analyzed_s, 2),
        "merge_roots": args.roots,
        "from_scratch": scratch,
        "after_adding_10": grown,
        "query_s": queries,
        "targets": {"from_scratch_s": 30, "from_scratch_mb": 2048, "query_s": 2},
        "cohorts": summary["cohort_count"],
        "outlier_roots": len(summary["outlier_roots"]),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    sys.exit(main())
