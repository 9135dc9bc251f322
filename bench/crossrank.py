"""Benchmark: cross_rank + diagnostics, host-trace streaming, and alignment scaling.

1. cross_rank + diagnostics on the 8-rank × 250 k-event root of bench/normalize.py against a bare
   ``pyarrow.csv.read_csv`` of its kernel_details files (target ≤ 1×).
2. trace_view.json streaming: a trace of ``--trace-mb`` MB built from a real sample's events (target
   ≥ 150 MB/s, peak RSS ≤ 512 MB).
3. alignment scaling: synth roots of 16 and 64 ranks (small ranks); the time per matched collective
   must stay flat (linear in the number of collectives).

Usage: ``python bench/crossrank.py [--ranks 8] [--rows 250000] [--trace-mb 1024] [--work DIR]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from normalize import bare_read_seconds, build_root  # noqa: E402

from npuprof.pipeline import schema  # noqa: E402
from npuprof.pipeline.runner import StageRange, analyze  # noqa: E402
from npuprof.synth import generate  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SAMPLE_TRACE = (
    REPO.parent
    / "shared/samples/msinsight/test/data/pytorch/text/level2/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"
)


def stages_over_read(work: Path, ranks: int, rows: int, jobs: int) -> dict:
    root = build_root(work, ranks, rows)
    files = sorted(root.rglob("kernel_details.csv"))
    out = work / "crossrank_out"
    analyze(root, out, jobs=jobs, overwrite=True, stage_range=StageRange(to_stage="model"))
    bare_read_seconds(files)
    gc.collect()
    bare = bare_read_seconds(files)
    started = time.perf_counter()
    analyze(None, out, jobs=jobs, stage_range=StageRange(from_stage="cross_rank", to_stage="diagnostics"))
    seconds = time.perf_counter() - started
    return {
        "bare_read_s": round(bare, 3),
        "cross_rank_diagnostics_s": round(seconds, 3),
        "over_bare_read": round(seconds / bare, 3),
        "target": "<= 1",
    }


def build_trace(work: Path, megabytes: int) -> Path:
    """A trace of about ``megabytes`` MB: the sample's events repeated, as one JSON array."""
    target = work / f"trace_{megabytes}mb.json"
    if target.exists():
        return target
    body = SAMPLE_TRACE.read_bytes().strip()[1:-1].strip()  # the events, without the brackets
    with open(target, "wb") as handle:
        handle.write(b"[")
        written, first = 0, True
        while written < megabytes * 1_000_000:
            handle.write(body if first else b"," + body)
            written += len(body)
            first = False
        handle.write(b"]")
    return target


# the peak is VmHWM, the high-water mark of this process's own memory: ru_maxrss would also count
# what the benchmark process held when it forked the child (Linux keeps it across exec)
# the cap is the product's default (evidence_rules.yaml), so the figure is what an analysis streams
STREAM_CHILD = """
import json, sys, time
from npuprof import knowledge
from npuprof.pipeline.stages.evidence.host_trace import read_host_events
cap = int(knowledge.load("evidence_rules")["host_trace"]["max_events_per_rank"])
started = time.perf_counter()
found = read_host_events(sys.argv[1], 0.0, float("inf"), cap)
seconds = time.perf_counter() - started
peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "kept": len(found.events), "cap": cap, "peak_rss_mb": peak_kb / 1024}))
"""


def trace_streaming(work: Path, megabytes: int) -> dict:
    """Streamed in a fresh process, so its peak RSS is the parse's own (imports included)."""
    trace = build_trace(work, megabytes)
    run = subprocess.run([sys.executable, "-c", STREAM_CHILD, str(trace)], capture_output=True, text=True, check=True)
    child = json.loads(run.stdout)
    size = trace.stat().st_size
    return {
        "trace_mb": round(size / 1e6, 1),
        "seconds": round(child["seconds"], 2),
        "mb_per_s": round(size / 1e6 / child["seconds"], 1),
        "peak_rss_mb": round(child["peak_rss_mb"], 1),
        "host_events_kept": child["kept"],
        "host_event_cap": child["cap"],
        "target": ">= 150 MB/s, <= 512 MB",
    }


def alignment_scaling(work: Path) -> dict:
    per_collective = {}
    for ranks in (16, 64):
        root = Path(
            generate(
                work / f"align_{ranks}",
                "clean_inference",
                ranks=ranks,
                steps=4,
                layers=4,
                scale=0.2,
                trace=False,
                overwrite=True,
            )["root"]
        )
        out = work / f"align_{ranks}_out"
        analyze(root, out, jobs=os.cpu_count(), overwrite=True, stage_range=StageRange(to_stage="model"))
        started = time.perf_counter()
        analyze(None, out, jobs=1, stage_range=StageRange(only_stage="cross_rank"))
        seconds = time.perf_counter() - started
        manifest = json.loads((out / schema.stage_manifest_name("cross_rank")).read_text())
        rows = manifest["collective_instances"] * ranks
        per_collective[ranks] = {
            "seconds": round(seconds, 3),
            "instance_rank_rows": rows,
            "us_per_row": round(seconds / rows * 1e6, 2),
        }
    ratio = per_collective[64]["us_per_row"] / per_collective[16]["us_per_row"]
    return {
        **{f"{k}_ranks": v for k, v in per_collective.items()},
        "cost_per_row_64_over_16": round(ratio, 2),
        "target": "about 1 (linear)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--rows", type=int, default=250_000)
    parser.add_argument("--trace-mb", type=int, default=1024)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "out")
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    report = {
        "cross_rank_diagnostics": stages_over_read(args.work, args.ranks, args.rows, args.jobs),
        "trace_streaming": trace_streaming(args.work, args.trace_mb),
        "alignment_scaling": alignment_scaling(args.work),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
