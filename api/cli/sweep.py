"""``npuprof sweep``: every profiling root under search roots, analyzed in a local process pool."""

from __future__ import annotations

import argparse
from pathlib import Path

from npuprof.api.cli.options import (
    add_analyze_options,
    add_command,
    add_progress,
    analyze_options,
    print_json,
    require_positive,
)
from npuprof.pipeline.errors import EXIT_PARTIAL, UsageError


def add_parsers(commands) -> None:
    sweep = add_command(
        commands,
        "sweep",
        help="analyze every profiling root under search roots and compare them in one table",
        description="Discover profiling roots (dirs with kernel_details.csv, a profiler db or op_summary csvs; rank "
        "dirs fold into their case root), analyze each into OUT/<root-slug>/ in a local process pool, and write "
        "OUT/sweep_summary.json and OUT/sweep_class_rollup.csv. A failing root never stops the sweep. The analyze "
        "options apply to every root.",
    )
    sweep.add_argument("--search-root", action="append", required=True, help="directory to search (repeatable)")
    sweep.add_argument("-o", "--output", required=True, help="archive directory for per-root outputs and the rollup")
    sweep.add_argument("--jobs", type=int, default=None, help="roots analyzed at once (default: CPU cores)")
    sweep.add_argument(
        "--reuse-existing",
        action="store_true",
        help="skip roots whose output is complete for this npuprof version and options",
    )
    sweep.add_argument("--limit", type=int, default=None, help="analyze at most N roots")
    add_analyze_options(sweep)
    add_progress(sweep)


def run_sweep(args: argparse.Namespace) -> int:
    from npuprof.api.terminal import print_summary
    from npuprof.pipeline.progress import make_progress
    from npuprof.pipeline.sweep.local import run_sweep as sweep_roots

    require_positive(args, "jobs", "limit")
    missing = [s for s in args.search_root if not Path(s).is_dir()]
    if missing:
        raise UsageError(f"--search-root {missing[0]} is not a directory")
    summary = sweep_roots(
        args.search_root,
        args.output,
        jobs=args.jobs,
        reuse_existing=args.reuse_existing,
        limit=args.limit,
        progress=make_progress(args.progress),
        options=analyze_options(args),
    )
    incomplete = summary["failed_roots"] or summary["missing_roots"]
    result = {"status": "partial" if incomplete else "ok", **summary}
    print_json(result)
    print_summary("sweep", result)
    return EXIT_PARTIAL if incomplete else 0


HANDLERS = {"sweep": run_sweep}
