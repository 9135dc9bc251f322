"""The ``npuprof`` command line.

Stdout carries exactly one JSON object per command (the result, or ``{"status": "failed", ...}``);
everything meant for people (progress, one-line errors) goes to stderr.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Sequence

from npuprof.pipeline import __version__
from npuprof.pipeline.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_MANIFEST_NOT_OK,
    EXIT_MISSING_PREREQUISITES,
    EXIT_USAGE,
    NpuprofError,
    UsageError,
)
from npuprof.pipeline.progress import make_progress
from npuprof.pipeline.runner import StageWindow, analyze, failure_object
from npuprof.pipeline.stages import STAGE_NAMES
from npuprof.pipeline.stages.base import AnalyzeOptions

EXIT_CODES_HELP = f"""exit codes:
  0   success
  {EXIT_INTERNAL}   internal error (a bug: failure.json in the output dir holds the traceback)
  {EXIT_USAGE}   usage error (bad flags, non-empty output dir without --overwrite, stage not built)
  {EXIT_BAD_INPUT}   bad input data (unreadable, truncated or malformed profiling files)
  {EXIT_MANIFEST_NOT_OK}   collection manifest.json whose analysis_status is not "ok"
  {EXIT_MISSING_PREREQUISITES}   a stage window needs artifacts of earlier stages that are missing
"""


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing and exiting, so failures stay one JSON object."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="npuprof",
        description="Analyze Ascend NPU profiling roots (torch_npu / CANN) into traceable answers.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"npuprof {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = commands.add_parser(
        "analyze",
        help="analyze one profiling root",
        description=(
            "Analyze one profiling root: a cluster root (one dir per rank), one rank dir, an "
            "ASCEND_PROFILER_OUTPUT dir, or a collection manifest.json. Stages: " + " → ".join(STAGE_NAMES) + "."
        ),
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("root", nargs="?", help="profiling root (not needed with --from-stage/--only-stage past normalize)")
    run.add_argument("-o", "--output", required=True, help="output directory (refused if non-empty, unless --overwrite or a resume window)")
    run.add_argument("--mode", choices=("fast", "full"), default="fast", help="fast (default) skips xlsx, host-trace attribution and the full HTML")
    run.add_argument("--from-stage", choices=STAGE_NAMES, help="start at this stage, reusing earlier artifacts")
    run.add_argument("--to-stage", choices=STAGE_NAMES, help="stop after this stage")
    run.add_argument("--only-stage", choices=STAGE_NAMES, help="run just this stage on existing artifacts")
    run.add_argument("--source", choices=("auto", "csv", "db"), default="auto", help="kernel source: auto prefers a profiler db that passes the schema probe, else CSV")
    run.add_argument("--progress", choices=("auto", "bar", "json", "none"), default="auto", help="progress on stderr: a bar on a TTY (auto), JSON lines, or nothing")
    run.add_argument("--jobs", type=int, default=None, help="processes for rank-local stages (default: CPU cores)")
    run.add_argument("--hash-sources", action="store_true", help="record each input file's sha256 in manifest.json (reads every byte)")
    run.add_argument("--overwrite", action="store_true", help="replace the artifacts of an earlier run in the output dir")
    return parser


def _print_json(payload: dict) -> None:
    sys.stdout.write(json.dumps(payload, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _cmd_analyze(args: argparse.Namespace) -> int:
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    window = StageWindow(args.from_stage, args.to_stage, args.only_stage)
    if args.root is None and (window.from_stage in (None, "normalize") and window.only_stage in (None, "normalize")):
        raise UsageError("npuprof analyze: a profiling ROOT is required (it may be omitted only when resuming past normalize)")
    result = analyze(
        args.root,
        args.output,
        options=AnalyzeOptions(mode=args.mode, source=args.source, hash_sources=args.hash_sources),
        window=window,
        jobs=args.jobs,
        overwrite=args.overwrite,
        progress=make_progress(args.progress),
    )
    _print_json(result)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``npuprof`` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            raise UsageError("npuprof: a COMMAND is required (see npuprof --help)")
        if args.command == "analyze":
            return _cmd_analyze(args)
        raise UsageError(f"npuprof: unknown command {args.command!r}")
    except NpuprofError as exc:
        failure = failure_object(exc)
        sys.stderr.write(f"npuprof: error [{failure['phase']}]: {exc.one_line()}\n")
        _print_json(failure)
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("npuprof: interrupted\n")
        _print_json({"status": "failed", "phase": "interrupted", "kind": "interrupted", "error": "interrupted by user"})
        return 130


if __name__ == "__main__":
    sys.exit(main())
