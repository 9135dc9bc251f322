"""Benchmark: ``npuprof analyze`` against the vendor's ``msprof-analyze cluster -m all --export_type
text`` on the same synthetic root (≥ 4 ranks × 200 k kernels), wall time of each CLI, in one run.

npuprof does strictly more (steps, layers, blocks, classes, operators, communication, findings,
report); the target (issue: memory and speed) is npuprof ≥ 3× faster. The vendor tool runs from its
own venv (created on first use, as the peer tests do).
``--no-trace`` builds the root without host traces (``trace_view.json``), which the vendor's ``cluster -m all``
does not read and npuprof does: the same comparison on the files both read.

The runs are interleaved (npuprof, vendor, npuprof, vendor …, ``--repeat`` pairs, 3 by default), so a
machine that slows down mid-run slows both sides alike; the speedup is the median of the pairs' ratios,
in wall and in CPU (each tool's whole process tree under ``perf stat``: npuprof's pool workers and the
vendor's counted, which time and farm-bench miss).
Each run's outputs are checked — npuprof's status and event count, the vendor's step trace and
communication tables non-empty — so a tool that fails fast is not timed as a fast one.
Usage: ``python bench/peer.py [--ranks 4] [--steps 800] [--repeat 3] [--no-trace]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))
from _measure import run_measured  # noqa: E402
from peer_tool import peer_executable  # noqa: E402

from npuprof.synth import generate  # noqa: E402

TARGET = 3.0
NPUPROF = shutil.which("npuprof") or str(Path(sys.executable).parent / "npuprof")  # the installed CLI


def check_npuprof(out: Path) -> None:
    """npuprof's run went through to its report with events: its summary says ok and the events are counted."""
    status = json.loads((out / "report" / "analysis_summary.json").read_text())["status"]
    events = json.loads((out / "normalize_manifest.json").read_text())["event_count"]
    if status not in ("ok", "partial") or not events:
        raise RuntimeError(f"npuprof's run is not complete: status {status}, {events} events")


def check_vendor(vendor_out: Path) -> None:
    """The vendor's run wrote what ``cluster -m all --export_type text`` writes: its step trace and
    communication tables, not empty."""
    wanted = [vendor_out / "cluster_step_trace_time.csv", vendor_out / "cluster_communication.json"]
    missing = [path.name for path in wanted if not path.exists() or path.stat().st_size == 0]
    if missing:
        raise RuntimeError(f"msprof-analyze wrote no {', '.join(missing)} under {vendor_out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="interleaved pairs of runs (default 3)")
    parser.add_argument("--trace", action=argparse.BooleanOptionalAction, default=True, help="host traces in the root")
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "out")
    args = parser.parse_args()
    root = args.work / f"peer_root_{args.ranks}x{args.steps}x{args.layers}{'' if args.trace else '_no_trace'}"
    if not (root / "ground_truth.json").exists():
        shape = {"ranks": args.ranks, "steps": args.steps, "layers": args.layers}
        generate(root, "clean", **shape, trace=args.trace, overwrite=True)
    exe = peer_executable()
    out = args.work / "peer_npuprof_out"
    vendor_out = root / "cluster_analysis_output"

    def npuprof_run() -> dict:
        shutil.rmtree(out, ignore_errors=True)
        run = run_measured([NPUPROF, "analyze", str(root), "-o", str(out), "--progress", "none"])
        check_npuprof(out)
        return run

    def vendor_run() -> dict:
        shutil.rmtree(vendor_out, ignore_errors=True)
        # as tests/peer_tool.run_cluster runs it, from the root's parent
        command = [str(exe), "cluster", "-d", str(root), "-m", "all", "--export_type", "text"]
        run = run_measured(command, cwd=root.parent)
        check_vendor(vendor_out)
        return run

    runs = [(npuprof_run(), vendor_run()) for _ in range(args.repeat)]
    pairs = [(n["seconds"], v["seconds"]) for n, v in runs]
    cpu_pairs = [(n["cpu_s"], v["cpu_s"]) for n, v in runs]
    npuprof_s = statistics.median(n for n, _ in pairs)
    vendor_s = statistics.median(v for _, v in pairs)
    events = json.loads((out / "normalize_manifest.json").read_text())["event_count"]
    print(
        json.dumps(
            {
                "ranks": args.ranks,
                "events": events,
                "events_per_rank": events // args.ranks,
                "host_traces": args.trace,
                "npuprof_analyze_s": round(npuprof_s, 3),
                "msprof_analyze_cluster_all_s": round(vendor_s, 3),
                "speedup": round(statistics.median(v / n for n, v in pairs), 2),
                "pair_speedups": [round(v / n, 2) for n, v in pairs],
                "npuprof_analyze_cpu_s": round(statistics.median(n for n, _ in cpu_pairs), 3),
                "msprof_analyze_cluster_all_cpu_s": round(statistics.median(v for _, v in cpu_pairs), 3),
                "cpu_speedup": round(statistics.median(v / n for n, v in cpu_pairs), 2),
                "cpu_counted_by": runs[0][0]["cpu_counted_by"],
                "target_speedup": f">= {TARGET}",
                "repeat": args.repeat,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
