"""Benchmark: what a rank without device events (communication files only) adds to an analysis.

Builds roots from the real Qwen3 capture (shared/samples): its two ranks with kernels (0 and 2) alone,
and beside them ``--ranks`` copies of its rank 1 — communication.json, communication_matrix.json,
step_trace_time.csv, no kernels — each given its own rank id. Then, in one run, analyzes each root
as a user does (``npuprof analyze``, the product's defaults) ``--repeats`` times and reports the
median seconds of each and their difference per added rank. Target (issue: security and hostile input
IV, item 14): ≤ 10 ms per rank; 1,000 such ranks took 106 s (0.1 s each) before Dec 6.
Usage: ``python bench/eventless_ranks.py [--ranks 1000] [--repeats 3] [--work DIR]``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO.parent / "shared" / "samples" / "msinsight" / "test" / "st" / "level2"
TARGET_MS_PER_RANK = 10.0


def _eventless_copy(rank_id: int, root: Path) -> None:
    """Qwen3's rank 1 as rank ``rank_id``: its files, its id in the info and metadata files."""
    source = SAMPLE / "rank_1_ascend_pt"
    target = root / f"rank_{rank_id}_ascend_pt"
    shutil.copytree(source, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    info = target / "profiler_info_1.json"
    info.rename(target / f"profiler_info_{rank_id}.json")
    text = (target / f"profiler_info_{rank_id}.json").read_text()
    (target / f"profiler_info_{rank_id}.json").write_text(text.replace('"rank_id": "1"', f'"rank_id": "{rank_id}"'))
    metadata = target / "profiler_metadata.json"
    metadata.write_text(re.sub(r'"rank": 1,', f'"rank": {rank_id},', metadata.read_text()))


def build(root: Path, eventless: int) -> Path:
    """The two ranks with kernels and ``eventless`` ranks without (odd ids from 1), built once."""
    if (root / ".complete").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for rank in (0, 2):
        shutil.copytree(SAMPLE / f"rank_{rank}_ascend_pt", root / f"rank_{rank}_ascend_pt")
    for index in range(eventless):
        _eventless_copy(2 * index + 1, root)
    (root / ".complete").touch()
    return root


def seconds(root: Path, out: Path) -> float:
    """One `npuprof analyze` of ``root`` into a new ``out`` as its own process, wall seconds (the last
    run's output removed before, untimed)."""
    shutil.rmtree(out, ignore_errors=True)
    argv = [sys.executable, "-m", "npuprof.api.cli", "analyze", str(root), "-o", str(out)]
    argv += ["--progress", "none", "--hardware-model", "Ascend910B4"]
    started = time.perf_counter()
    run = subprocess.run(argv, capture_output=True, text=True)
    if run.returncode not in (0, 8):
        raise SystemExit(f"analyze {root} failed ({run.returncode}): {run.stderr[-2000:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1000, help="ranks without events to add (default 1000)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "out" / "eventless_ranks")
    args = parser.parse_args()
    base = build(args.work / "roots" / "base", 0)
    wide = build(args.work / "roots" / f"with_{args.ranks}", args.ranks)
    base_runs, wide_runs = [], []
    for _ in range(args.repeats):  # interleaved: a slower minute of this shared VM hits both
        base_runs.append(seconds(base, args.work / "out_base"))
        wide_runs.append(seconds(wide, args.work / "out_wide"))
    per_rank_ms = (statistics.median(wide_runs) - statistics.median(base_runs)) / args.ranks * 1000
    report = {
        "eventless_ranks": args.ranks,
        "base_seconds": [round(s, 2) for s in base_runs],
        "with_eventless_seconds": [round(s, 2) for s in wide_runs],
        "ms_per_eventless_rank": round(per_rank_ms, 1),
        "target_ms_per_rank": TARGET_MS_PER_RANK,
        "met": per_rank_ms <= TARGET_MS_PER_RANK,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
