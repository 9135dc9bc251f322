"""Benchmark: how analysis time and memory grow with the capture, in one run.

Generates synthetic training roots at 1×, 4× and 16× the steps (same ranks and layers) and an
inference root with ≥ 20,000 decode steps, analyzes each (fast mode, every built stage, each stage
timed alone) and reports per stage the time ratio between consecutive sizes against the event
ratio (target: 4× events → ≤ 4.4× time), plus the peak RSS of the whole process tree (pool workers
included) of one whole ``npuprof analyze`` over the input bytes (target ≤ 1.5×), its PSS beside it.
Usage: ``python bench/scaling.py [--ranks 2] [--steps 400] [--layers 4] [--decode-steps 20000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import run_measured  # noqa: E402

from npuprof.synth import generate  # noqa: E402
from pipeline import NPUPROF, stage_seconds  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LINEAR_SLACK = 1.1  # time may grow at most 10 % faster than the events


def _root(work: Path, scenario: str, ranks: int, steps: int, layers: int) -> Path:
    root = work / f"scaling_{scenario}_{ranks}x{steps}x{layers}"
    if not (root / "ground_truth.json").exists():
        generate(root, scenario, ranks=ranks, steps=steps, layers=layers, trace=False, overwrite=True)
    return root


def _input_bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def measure(work: Path, scenario: str, ranks: int, steps: int, layers: int, jobs: int) -> dict:
    """Stage seconds, events and peak RSS over input bytes of one analyzed synthetic root."""
    root = _root(work, scenario, ranks, steps, layers)
    out = work / f"{root.name}_out"
    seconds, _ = stage_seconds(root, out, jobs)
    # memory as a user's run takes it: one analyze process and its workers, measured alone
    argv = [*NPUPROF, "analyze", str(root), "-o", str(work / f"{root.name}_whole"), "--overwrite"]
    whole = run_measured([*argv, "--progress", "none", "--jobs", str(jobs)])
    events = json.loads((out / "normalize_manifest.json").read_text())["event_count"]
    input_bytes = _input_bytes(root)
    return {
        "scenario": scenario,
        "steps": steps,
        "events": events,
        "input_mb": round(input_bytes / 1e6, 1),
        "stage_s": seconds,
        "total_s": round(sum(seconds.values()), 3),  # the stages run alone, each reading from disk
        "whole_s": round(whole["seconds"], 3),
        "peak_rss_over_input": round(whole["peak"] / input_bytes, 3),
        "peak_pss_over_input": round(whole["peak_pss"] / input_bytes, 3),
        "peak_bound_over_input": round(whole["peak_bound"] / input_bytes, 3),
    }


def growth(smaller: dict, larger: dict) -> dict:
    """Per stage: time ratio / event ratio (≤ LINEAR_SLACK is linear enough)."""
    event_ratio = larger["events"] / smaller["events"]
    per_stage = {
        name: round((larger["stage_s"][name] / smaller["stage_s"][name]) / event_ratio, 3)
        for name in larger["stage_s"]
        if smaller["stage_s"].get(name)
    }
    per_stage["stages_alone_total"] = round((larger["total_s"] / smaller["total_s"]) / event_ratio, 3)
    # the whole run as a user starts it (one process and its workers), not the sum of stages run alone
    per_stage["whole"] = round((larger["whole_s"] / smaller["whole_s"]) / event_ratio, 3)
    return {"event_ratio": round(event_ratio, 2), "time_ratio_over_event_ratio": per_stage}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--decode-steps", type=int, default=20_000)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "out")
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    args = parser.parse_args()
    runs = [measure(args.work, "clean", args.ranks, args.steps * f, args.layers, args.jobs) for f in (1, 4, 16)]
    inference = measure(args.work, "clean_inference", args.ranks, args.decode_steps, 2, args.jobs)
    growths = [growth(a, b) for a, b in zip(runs, runs[1:])]
    worst = max(v for g in growths for v in g["time_ratio_over_event_ratio"].values())
    report = {
        "training": runs,
        "growth": growths,
        "inference": inference,
        "worst_time_ratio_over_event_ratio": worst,
        "worst_peak_rss_over_input": max(r["peak_rss_over_input"] for r in [*runs, inference]),
        "worst_peak_pss_over_input": max(r["peak_pss_over_input"] for r in [*runs, inference]),
        "targets": {"time_ratio_over_event_ratio": f"<= {LINEAR_SLACK}", "peak_rss_over_input": "<= 1.5"},
        "jobs": args.jobs,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
