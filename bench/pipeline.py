"""Benchmark: every built stage of ``npuprof analyze`` (fast mode) on an 8-rank × 250 k-event root
against a bare ``pyarrow.csv.read_csv`` of its kernel_details files, in one run.

The root (``--root full``, the default) is a whole capture as torch_npu writes it: a synthetic
training root (``npuprof.synth``) of about ``--rows`` kernels per rank with every reader's input —
kernel_details.csv, trace_view.json (the host trace), communication.json, communication_matrix.json,
step_trace_time.csv and the profiler info files. ``--root kernels`` is the older root of
bench/normalize.py: the real Qwen3 rank's kernel rows tiled, kernel files only (no host trace, no
communication files), kept to compare with earlier runs.

Targets (issue: speed): normalize ≤ 1.5×, segment + classify together ≤ 1.5×, the whole analysis ≤ 5×
the bare read, in wall and in CPU (the analysis's whole process tree under ``perf stat``, a pool's
workers counted, against the bare read's threads); peak RSS of the process tree ≤ 1.5× the input bytes
it holds (the host traces, parsed as a stream, are left out of that denominator; the ratio over all
input is printed beside it). Its peak PSS is printed too: the tree's physical memory, each page its
forked workers share with the main process counted once.
First the whole analysis as a user runs it (one ``npuprof analyze`` process and its workers, measured
alone: every rank's stages in one worker, each table handed to the next stage in memory), then each
stage alone (``--only-stage``, reading its inputs from disk) after the previous one, so its time is
its own.
Usage: ``python bench/pipeline.py [--root full|kernels] [--ranks 8] [--rows 250000] [--work DIR] [--jobs N]``.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import peak_rss, run_measured  # noqa: E402
from normalize import bare_read_seconds, bench_root, build_root  # noqa: E402

from npuprof.pipeline.runner import StageRange, analyze  # noqa: E402
from npuprof.pipeline.stages import STAGES  # noqa: E402
from npuprof.synth import generate  # noqa: E402

NPUPROF = [sys.executable, "-c", "import sys; from npuprof.api.cli import main; sys.exit(main())"]
TARGETS = {"normalize": 1.5, "segment+classify": 1.5, "total": 5.0, "total_cpu": 5.0, "peak_rss_over_held_input": 1.5}
# read as a stream, never held whole: the host trace's bytes would flatter a ratio of memory over input
STREAMED = ("trace_view.json",)


def stage_seconds(root: Path, out: Path, jobs: int) -> tuple[dict[str, float], dict[str, int]]:
    """Run every built stage alone, in order; returns seconds and the peak tree RSS per stage."""
    seconds: dict[str, float] = {}
    peaks: dict[str, int] = {}
    for position, stage in enumerate(STAGES):
        gc.collect()
        stage_range = StageRange(to_stage=stage.name) if position == 0 else StageRange(only_stage=stage.name)
        with peak_rss() as run:
            analyze(root if position == 0 else None, out, jobs=jobs, overwrite=position == 0, stage_range=stage_range)
        seconds[stage.name] = round(run["seconds"], 3)
        peaks[stage.name] = run["peak"]
    return seconds, peaks


RANK_CHAIN = """
import json, sys
from pathlib import Path
def rss(field):
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(field))
from npuprof.pipeline.execution import run_rank_chain
from npuprof.pipeline.memory import rank_input_bytes
from npuprof.pipeline.sources.discovery import discover
from npuprof.pipeline.stages import STAGES
from npuprof.pipeline.options import AnalyzeOptions
rank = max(discover(sys.argv[1]).ranks, key=rank_input_bytes)
stages = [s.name for s in STAGES if s.map_rank is not None]
baseline = rss("VmRSS:")
run_rank_chain(sys.argv[2], vars(rank), AnalyzeOptions().to_dict(), stages)
print(json.dumps({"working_set": rss("VmHWM:") - baseline, "input": rank_input_bytes(rank)}))
"""


def rank_working_set_over_input(root: Path, out: Path) -> float:
    """Peak RSS of one rank's chain of stages (in a fresh process, less its interpreter and imports) over
    the rank's kernel source bytes: the factor ``pipeline/memory.py`` estimates a rank's needs with."""
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", RANK_CHAIN, str(root), str(out)], capture_output=True, text=True)
    measured = json.loads(done.stdout)
    return round(measured["working_set"] / measured["input"], 3)


KERNELS_PER_STEP = 276  # a 4-layer synthetic training step's kernels per rank (clean scenario, 2 micro-batches)


def full_root(work: Path, ranks: int, rows: int) -> Path:
    """A synthetic capture with every reader's input, about ``rows`` kernels per rank (built once)."""
    steps = max(rows // KERNELS_PER_STEP, 1)
    root = work / f"full_root_{ranks}x{steps}"
    if not (root / "ground_truth.json").exists():
        generate(root, "clean", ranks=ranks, steps=steps, layers=4, overwrite=True)
    return root


def _root_option(parser) -> None:
    parser.add_argument("--root", choices=("full", "kernels"), default="full", help="the root's kind (see above)")


def _root_of(args) -> Path:
    if args.root == "full":
        return full_root(args.work, args.ranks, args.rows)
    return build_root(args.work, args.ranks, args.rows)


def main() -> None:
    args, root, files = bench_root(__doc__, extra=_root_option, root_of=_root_of)
    input_bytes = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    streamed_bytes = sum(f.stat().st_size for f in root.rglob("*") if f.is_file() and f.name in STREAMED)
    held_bytes = input_bytes - streamed_bytes  # what the analysis reads whole: the peak is measured on it
    kernel_bytes = sum(f.stat().st_size for f in files)
    bare_read_seconds(files)  # warm the page cache
    gc.collect()
    cpu_before = os.times()
    bare = bare_read_seconds(files)
    bare_cpu = sum(os.times()[:2]) - sum(cpu_before[:2])  # this process's threads: Arrow's reader included
    # as a user runs it: its own process (interpreter start and imports included)
    whole = run_measured(
        [*NPUPROF, "analyze", str(root), "-o", str(args.work / "whole_out"), "--overwrite"]
        + ["--progress", "none", "--jobs", str(args.jobs)]
    )
    total, peak, peak_pss, peak_bound = whole["seconds"], whole["peak"], whole["peak_pss"], whole["peak_bound"]
    gc.collect()
    seconds, peaks = stage_seconds(root, args.work / "pipeline_out", args.jobs)
    factor = rank_working_set_over_input(root, args.work / "rank_chain_out")
    ratios = {name: round(s / bare, 3) for name, s in seconds.items()}
    measured = {
        "normalize": ratios.get("normalize"),
        "segment+classify": round((seconds.get("segment", 0) + seconds.get("classify", 0)) / bare, 3),
        "total": round(total / bare, 3),
        "total_cpu": round(whole["cpu_s"] / bare_cpu, 3),
        "peak_rss_over_held_input": round(peak / held_bytes, 3),
    }
    report = {
        "root": args.root,
        "root_files": sorted({f.name for f in root.rglob("*") if f.is_file() and f.parent != root}),
        "ranks": args.ranks,
        "rows_per_rank": args.rows,
        "input_mb": round(input_bytes / 1e6, 1),
        "streamed_input_mb": round(streamed_bytes / 1e6, 1),  # host traces, parsed as a stream
        "peak_rss_over_input": round(peak / input_bytes, 3),
        "kernel_files_mb": round(kernel_bytes / 1e6, 1),
        "bare_read_s": round(bare, 3),
        "stage_s": seconds,
        "stage_over_bare_read": ratios,
        "total_s": round(total, 3),
        "bare_read_cpu_s": round(bare_cpu, 3),
        "total_cpu_s": round(whole["cpu_s"], 3),  # the whole tree's: every worker of the pool counted
        "total_cpu_counted_by": whole["cpu_counted_by"],
        "stages_alone_total_s": round(sum(seconds.values()), 3),
        "peak_pss_over_input": round(peak_pss / input_bytes, 3),
        "peak_bound_over_input": round(peak_bound / input_bytes, 3),  # every process's VmHWM, added up
        "stage_peak_rss_over_input": {name: round(p / input_bytes, 3) for name, p in peaks.items()},
        "rank_working_set_over_input": factor,
        "measured": measured,
        "targets": TARGETS,
        "met": {k: measured[k] is not None and measured[k] <= v for k, v in TARGETS.items()},
        "jobs": args.jobs,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
