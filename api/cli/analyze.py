"""``npuprof analyze`` (one root) and ``npuprof compare`` (two captures, or a sweep against a baseline)."""

from __future__ import annotations

import argparse
from pathlib import Path

from npuprof.api.cli.options import (
    add_analyze_options,
    add_command,
    add_json,
    add_progress,
    analyze_options,
    print_json,
    require_positive,
)
from npuprof.pipeline.errors import EXIT_DEGRADED, UsageError
from npuprof.pipeline.stage_order import STAGE_NAMES


def add_parsers(commands) -> None:
    run = add_command(
        commands,
        "analyze",
        help="analyze one profiling root",
        description=(
            "Analyze one profiling root: a cluster root (one dir per rank), one rank dir, an "
            "ASCEND_PROFILER_OUTPUT dir, or a collection manifest.json. Stages: " + " → ".join(STAGE_NAMES) + "."
        ),
    )
    run.add_argument(
        "root", nargs="?", help="profiling root (not needed with --from-stage/--only-stage past normalize)"
    )
    run.add_argument(
        "-o", "--output", required=True, help="output directory (refused if non-empty, unless --overwrite or resuming)"
    )
    run.add_argument("--from-stage", choices=STAGE_NAMES, help="start at this stage, reusing earlier artifacts")
    run.add_argument("--to-stage", choices=STAGE_NAMES, help="stop after this stage")
    run.add_argument("--only-stage", choices=STAGE_NAMES, help="run just this stage on existing artifacts")
    add_progress(run)
    add_json(run)
    run.add_argument("--jobs", type=int, default=None, help="processes for rank-local stages (default: CPU cores)")
    add_analyze_options(run)
    run.add_argument(
        "--overwrite", action="store_true", help="replace the artifacts of an earlier run in the output dir"
    )
    _add_compare(commands)
    _add_diagnose(commands)


def _add_diagnose(commands) -> None:
    diagnose = add_command(
        commands,
        "diagnose",
        help="ask a finished analysis again: its detectors re-run over its tables, with other thresholds",
        description="Re-run the diagnostics stage of an npuprof output dir over the tables on disk, in seconds (the "
        "capture is not read again, no earlier stage is rewritten). --set changes a diagnosis rule "
        "(knowledge/diagnosis_rules.yaml, each detector's knowledge/detectors/<topic>/rules.yaml) for this run. "
        "In place (the default) diagnostics and the report are "
        "rewritten, each file atomically; -o DIR writes the diagnostics outputs there and leaves the analysis as "
        "it was; --dry-run writes nothing. diagnosis_findings.json records the rules it was asked with "
        "(rules_overridden).",
    )
    diagnose.add_argument("analysis", metavar="OUT", help="an npuprof output dir (npuprof analyze ROOT -o OUT)")
    diagnose.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a rule for this run: FINDING_TYPE.KEY=VALUE (slow_rank_suspected.robust_z_min=3), or a dotted path "
        "from the file's top (evidence_sample=3); VALUE is read as YAML (3, 0.5, true, [a, b]); repeatable",
    )
    diagnose.add_argument(
        "--detector",
        action="append",
        default=[],
        metavar="NAME",
        help="show only the findings of this detector or finding type (repeatable; every detector still runs, "
        "so the step ledger and the findings together stay whole)",
    )
    diagnose.add_argument("-o", "--output", metavar="DIR", help="write the diagnostics outputs here (new or empty)")
    diagnose.add_argument("--dry-run", action="store_true", help="write nothing; print the findings")
    add_json(diagnose)


def _add_compare(commands) -> None:
    compare = add_command(
        commands,
        "compare",
        help="what changed between two captures: classes, operators, collectives, findings",
        description="Compare a baseline and a new capture. Each may be an npuprof output dir or a profiling root "
        "(analyzed first into OUT/baseline or OUT/new). Steps, layers and blocks are matched by class (the same "
        "kernels and shapes), operators by name + shapes, collectives by kind + parallel role; a delta is a change "
        "only when a Mann-Whitney U test and the step-to-step spread of both sides agree. Writes compare_*.csv, "
        "compare_findings.json, compare_summary.json and compare.md. Captures of different models are refused.",
    )
    compare.add_argument("baseline", nargs="?", help="baseline: an npuprof output dir or a profiling root")
    compare.add_argument("new", nargs="?", help="new capture: an npuprof output dir or a profiling root")
    compare.add_argument("-o", "--output", required=True, help="directory for the comparison")
    compare.add_argument(
        "--sweep",
        metavar="ARCHIVE",
        help="compare every root of a sweep archive (local or service) against --baseline: compare_series.csv "
        "and sweep_class_rollup.csv with delta columns",
    )
    compare.add_argument("--baseline", dest="sweep_baseline", metavar="ROOT", help="with --sweep: path, slug or name")
    add_progress(compare)
    add_json(compare)


def run_analyze(args: argparse.Namespace) -> int:
    from npuprof.api.terminal import print_result
    from npuprof.pipeline.progress import make_progress
    from npuprof.pipeline.runner import StageRange, analyze

    require_positive(args, "jobs")
    stage_range = StageRange(args.from_stage, args.to_stage, args.only_stage)
    if args.root is None and (
        stage_range.from_stage in (None, "normalize") and stage_range.only_stage in (None, "normalize")
    ):
        raise UsageError(
            "npuprof analyze: a profiling ROOT is required (it may be omitted only when resuming past normalize)"
        )
    result = analyze(
        args.root,
        args.output,
        options=analyze_options(args),
        stage_range=stage_range,
        jobs=args.jobs,
        overwrite=args.overwrite,
        progress=make_progress(args.progress),
    )
    print_result("analyze", result, args.json)
    return EXIT_DEGRADED if result["status"] == "degraded" else 0


def run_compare(args: argparse.Namespace) -> int:
    from npuprof.api.terminal import print_result
    from npuprof.api.workflows import analyzed_output
    from npuprof.pipeline.compare.run import compare
    from npuprof.pipeline.compare.series import compare_series
    from npuprof.pipeline.progress import make_progress

    out = Path(args.output)
    if args.sweep:
        if args.baseline or args.new or not args.sweep_baseline:
            raise UsageError("npuprof compare --sweep ARCHIVE takes --baseline ROOT and no positional captures")
        print_json(compare_series(args.sweep, args.sweep_baseline, out))
        return 0
    if not (args.baseline and args.new):
        raise UsageError("npuprof compare: give BASELINE and NEW, or --sweep ARCHIVE --baseline ROOT")
    progress = make_progress(args.progress)
    baseline = analyzed_output(args.baseline, out, "baseline", progress)
    new = analyzed_output(args.new, out, "new", progress)
    result = compare(baseline, new, out)
    print_result("compare", result, args.json)
    return 0


def run_diagnose(args: argparse.Namespace) -> int:
    from npuprof import knowledge
    from npuprof.api.terminal import print_result
    from npuprof.pipeline.rediagnose import diagnose_result

    settings = {}
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"npuprof diagnose --set {item!r}: give KEY=VALUE (slow_rank_suspected.robust_z_min=3)")
        try:
            settings[key.strip()] = knowledge.load_setting(value)
        except knowledge.OverrideError as exc:
            raise UsageError(f"npuprof diagnose --set {item!r}: {exc}") from None
        except Exception as exc:  # the YAML parser's own errors: one line is enough
            raise UsageError(f"npuprof diagnose --set {item!r}: VALUE is not YAML ({type(exc).__name__})") from None
    if args.dry_run and args.output:
        raise UsageError("npuprof diagnose: --dry-run writes nothing; drop -o or --dry-run")
    result = diagnose_result(args.analysis, settings, args.detector, args.output, write=not args.dry_run)
    print_result("diagnose", result, args.json)
    return 0


HANDLERS = {"analyze": run_analyze, "compare": run_compare, "diagnose": run_diagnose}
