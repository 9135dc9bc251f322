"""``npuprof synth`` (a synthetic root with planted faults) and ``npuprof demo`` (one, analyzed)."""

from __future__ import annotations

import argparse
from pathlib import Path

from npuprof.api.cli.options import add_json, add_progress, print_json, require_positive
from npuprof.pipeline.errors import UsageError
from npuprof.synth.scenarios import SCENARIOS


def add_parsers(commands) -> None:
    synth = commands.add_parser(
        "synth",
        help="generate a synthetic profiling root with planted faults",
        description="Generate a realistic synthetic profiling root (torch_npu text export) with planted faults "
        "and OUT/ground_truth.json. Deterministic for a seed. Scenarios: "
        + ", ".join(f"{n} ({s.description})" for n, s in SCENARIOS.items()),
    )
    synth.add_argument("out", help="directory to create (refused if non-empty, unless --overwrite)")
    synth.add_argument("--scenario", default="clean", choices=sorted(SCENARIOS), metavar="NAME", help="scenario name")
    synth.add_argument("--ranks", type=int, help="number of ranks (default: the scenario's)")
    synth.add_argument("--steps", type=int, help="steps captured per rank")
    synth.add_argument("--layers", type=int, help="decoder layers")
    synth.add_argument("--scale", type=float, default=1.0, help="multiply tokens per step (and so kernel durations)")
    synth.add_argument(
        "--export",
        choices=("text", "db", "both"),
        default="text",
        help="text files, profiler dbs (schema 1.0.0 + analysis.db), or both (default: text)",
    )
    synth.add_argument("--seed", type=int, default=0, help="random seed (same seed, same bytes)")
    synth.add_argument(
        "--host", help="the machine the ranks ran on, written where CANN writes it (8 cards per host; default: unsaid)"
    )
    synth.add_argument(
        "--serving",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write it as a serving capture without profiler steps (vLLM-Ascend's /start_profile: no Step Id, "
        "an empty Step in step_trace_time.csv, no ProfilerStep spans; text export only), or with them "
        "(--no-serving); default: as the scenario is captured (the serving scenarios without steps)",
    )
    synth.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT")

    planted = commands.add_parser(
        "synth-sweep",
        help="generate a 32-root sweep with planted fleet, outlier and trend truth",
        description="Generate the planted sweep of npuprof.synth.sweep under OUT: 32 small roots in three cohorts, "
        "a card (node-b, device 2) slow in every capture it appears in, a decoy card slow once, an operator "
        "outlier, and a regression from build 7 on in the train-build-NNN series; OUT/sweep_truth.json says "
        "which. Then: npuprof sweep --search-root OUT -o ARCHIVE --series-key 'build-(\\d+)'.",
    )
    planted.add_argument("out", help="directory to create (refused if non-empty, unless --overwrite)")
    planted.add_argument("--jobs", type=int, default=None, help="roots written at once (default: CPU cores)")
    planted.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT")

    demo = commands.add_parser(
        "demo",
        help="generate a small 4-rank root with two planted faults and analyze it",
        description="Generate the 'demo' scenario (4 ranks, a slow rank and a host bubble planted) and run "
        "npuprof analyze on it with every stage; prints where the outputs are.",
    )
    demo.add_argument("--dir", default="npuprof-demo", help="working directory (default: ./npuprof-demo)")
    add_progress(demo)
    add_json(demo)


def run_synth(args: argparse.Namespace) -> int:
    from npuprof.synth import generate

    require_positive(args, "ranks", "steps", "layers")
    if args.scale <= 0:
        raise UsageError("--scale must be positive")
    try:
        result = generate(
            args.out,
            args.scenario,
            ranks=args.ranks,
            steps=args.steps,
            layers=args.layers,
            scale=args.scale,
            seed=args.seed,
            export=args.export,
            host=args.host,
            overwrite=args.overwrite,
            serving=args.serving,
        )
    except (ValueError, FileExistsError) as exc:
        raise UsageError(f"npuprof synth: {exc}") from None
    print_json(result)
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from npuprof.api.terminal import print_result
    from npuprof.api.workflows import run_demo as demo
    from npuprof.pipeline.progress import make_progress

    result = demo(Path(args.dir), make_progress(args.progress))
    print_result("demo", result, args.json)
    return 0


def run_synth_sweep(args: argparse.Namespace) -> int:
    from npuprof.synth.sweep import generate_sweep

    require_positive(args, "jobs")
    try:
        truth = generate_sweep(args.out, jobs=args.jobs, overwrite=args.overwrite)
    except FileExistsError as exc:
        raise UsageError(f"npuprof synth-sweep: {exc}") from None
    print_json({"status": "ok", "out": str(Path(args.out).resolve()), **{k: truth[k] for k in truth if k != "roots"}})
    return 0


HANDLERS = {"synth": run_synth, "synth-sweep": run_synth_sweep, "demo": run_demo}
