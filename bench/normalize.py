"""Benchmark: normalize on a large root vs a bare ``pyarrow.csv.read_csv`` of the same files.

Builds (once, cached in --work) a root of R ranks × N kernel_details rows by replicating the real
Qwen3 training rows (shared/samples) with shifted timestamps, then measures in one run:
  * bare read: ``pyarrow.csv.read_csv`` of every rank's file (warm cache, type inference),
  * normalize: ``npuprof analyze --to-stage normalize`` through the pipeline API,
and reports rows/s, the time ratio (target ≤ 2×) and peak RSS of the process tree / input bytes
(target ≤ 1.5×). Usage: ``python bench/normalize.py [--ranks 8] [--rows 250000] [--work DIR]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import peak_rss  # noqa: E402

from npuprof.pipeline.runner import StageRange, analyze  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SAMPLE_RANK = REPO.parent / "shared" / "samples" / "msinsight" / "test" / "st" / "level2" / "rank_0_ascend_pt"


def _format_start(start_ns: pa.Array) -> pa.Array:
    """int ns → the exporter's text: µs with exactly 3 decimals and the trailing TAB."""
    whole = pc.cast(pc.divide(start_ns, 1000), pa.string())
    frac = pc.utf8_lpad(
        pc.cast(pc.subtract(start_ns, pc.multiply(pc.divide(start_ns, 1000), 1000)), pa.string()), width=3, padding="0"
    )
    return pc.binary_join_element_wise(pc.binary_join_element_wise(whole, frac, "."), "\t", "")


def build_root(work: Path, ranks: int, rows: int) -> Path:
    """A root of ``ranks`` rank dirs with ``rows`` kernel rows each (reused when it exists)."""
    root = work / f"root_{ranks}x{rows}"
    marker = root / ".complete"
    if marker.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    source = SAMPLE_RANK / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    header = source.read_text(encoding="utf-8").split("\n", 1)[0].split(",")
    sample = pacsv.read_csv(
        source,
        convert_options=pacsv.ConvertOptions(column_types={h: pa.string() for h in header}, strings_can_be_null=False),
    )
    start_ns = pc.cast(
        pc.multiply(pc.cast(pc.utf8_trim(sample.column("Start Time(us)"), characters="\t"), pa.float64()), 1000.0),
        pa.int64(),
    ).to_numpy()
    span = int(start_ns.max() - start_ns.min()) + 1_000_000
    reps = -(-rows // sample.num_rows)
    take = np.tile(np.arange(sample.num_rows), reps)[:rows]
    shift = np.repeat(np.arange(reps, dtype=np.int64) * span, sample.num_rows)[:rows]
    for rank in range(ranks):
        rank_dir = root / f"rank_{rank}_ascend_pt"
        (rank_dir / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
        shutil.copy(SAMPLE_RANK / "profiler_info_0.json", rank_dir / f"profiler_info_{rank}.json")
        table = sample.take(pa.array(take))
        starts = pa.array(start_ns[take] + shift + rank * 37_000)
        table = table.set_column(header.index("Start Time(us)"), "Start Time(us)", _format_start(starts))
        pacsv.write_csv(
            table,
            rank_dir / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv",
            pacsv.WriteOptions(quoting_style="needed"),
        )
    marker.write_text("ok")
    return root


def bench_root(description: str, extra=None, root_of=None) -> tuple[argparse.Namespace, Path, list[Path]]:
    """The benchmarks' common arguments (--ranks, --rows, --work, --jobs, and any ``extra`` adds), the
    root they name (built once, reused; ``root_of(args)`` when given, else the tiled Qwen3 root) and its
    kernel_details files."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--rows", type=int, default=250_000)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "out")
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    if extra is not None:
        extra(parser)
    args = parser.parse_args()
    root = root_of(args) if root_of is not None else build_root(args.work, args.ranks, args.rows)
    return args, root, sorted(root.rglob("kernel_details.csv"))


def bare_read_seconds(files: list[Path]) -> float:
    started = time.perf_counter()
    for path in files:
        table = pacsv.read_csv(path)
        del table
    return time.perf_counter() - started


def main() -> None:
    args, root, files = bench_root(__doc__)
    input_bytes = sum(f.stat().st_size for f in files)
    bare_read_seconds(files)  # warm the page cache
    gc.collect()
    with peak_rss() as bare:
        bare_read_seconds(files)
    out = args.work / "normalize_out"
    gc.collect()
    with peak_rss() as run:
        result = analyze(root, out, jobs=args.jobs, overwrite=True, stage_range=StageRange(to_stage="normalize"))
    rows = result["event_count"]
    report = {
        "ranks": args.ranks,
        "rows": rows,
        "input_mb": round(input_bytes / 1e6, 1),
        "bare_read_s": round(bare["seconds"], 3),
        "bare_read_rows_per_s": round(rows / bare["seconds"]),
        "bare_read_mb_per_s": round(input_bytes / 1e6 / bare["seconds"], 1),
        "normalize_s": round(run["seconds"], 3),
        "normalize_rows_per_s": round(rows / run["seconds"]),
        "normalize_over_bare_read": round(run["seconds"] / bare["seconds"], 3),
        "normalize_peak_rss_mb": round(run["peak"] / 1e6, 1),
        "peak_rss_over_input": round(run["peak"] / input_bytes, 3),
        "jobs": args.jobs,
        "targets": {"normalize_over_bare_read": "<= 2.0", "peak_rss_over_input": "<= 1.5"},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
