"""Benchmark: ``npuprof compare`` of two 8-rank × 250 k-event outputs vs a bare ``pyarrow.csv.read_csv``
of one root's kernel_details files (target ≤ 1×, one run).

Builds (or reuses) the root of bench/normalize.py, analyzes it through the model stage once, copies the
output as the "new" side, then times the comparison alone.
Usage: ``python bench/compare.py [--ranks 8] [--rows 250000] [--work DIR]``.
"""

from __future__ import annotations

import gc
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from normalize import bare_read_seconds, bench_root  # noqa: E402

from npuprof.pipeline import schema  # noqa: E402
from npuprof.pipeline.compare.run import compare  # noqa: E402
from npuprof.pipeline.runner import StageRange, analyze  # noqa: E402


def main() -> None:
    args, root, files = bench_root(__doc__)
    base = args.work / "compare_base"
    if not (base / schema.stage_manifest_name("model")).exists():
        analyze(root, base, jobs=args.jobs, overwrite=True, stage_range=StageRange(to_stage="model"))
    new = args.work / "compare_new"
    if not new.exists():
        shutil.copytree(base, new)
    bare_read_seconds(files)  # warm the page cache
    gc.collect()
    bare = bare_read_seconds(files)
    started = time.perf_counter()
    result = compare(base, new, args.work / "compare_out")
    compare_s = time.perf_counter() - started
    print(
        json.dumps(
            {
                "ranks": args.ranks,
                "rows_per_rank": args.rows,
                "bare_read_s": round(bare, 3),
                "compare_s": round(compare_s, 3),
                "compare_over_bare_read": round(compare_s / bare, 3),
                "significant_changes": result["significant_changes"],
                "target": "<= 1.0",
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
