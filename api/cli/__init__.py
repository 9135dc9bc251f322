"""The ``npuprof`` command line: one module per command group, the shared option groups in
``options``. Parsers import nothing heavy, so ``npuprof --help`` answers before pandas would load;
each command imports what it runs when it runs.

Stdout carries exactly one JSON object per command (the result, or ``{"status": "failed", ...}``);
everything meant for people (progress, one-line errors, the terminal summary) goes to stderr.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Sequence

from npuprof.api.cli import analyze, deploy, service, sweep, synth
from npuprof.api.cli.options import EXIT_CODES_HELP, Parser, print_json, resolve_broker
from npuprof.pipeline import __version__
from npuprof.pipeline.errors import NpuprofError, UsageError, failure_object
from npuprof.pipeline.progress import end_open_bar
from npuprof.pipeline.terminal_text import printable

COMMAND_GROUPS = (analyze, sweep, service, deploy, synth)
HANDLERS = {name: run for group in COMMAND_GROUPS for name, run in group.HANDLERS.items()}


def build_parser() -> argparse.ArgumentParser:
    """The parser of every npuprof command."""
    parser = Parser(
        prog="npuprof",
        description="Analyze Ascend NPU profiling roots (torch_npu / CANN) into traceable answers.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"npuprof {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for group in COMMAND_GROUPS:
        group.add_parsers(commands)
    return parser


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM stops a run as Ctrl-C does: pools stopped, temp dirs removed


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``npuprof`` console script; returns the exit code."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args, passthrough = parser.parse_known_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            raise UsageError("npuprof: a COMMAND is required (see npuprof --help)")
        resolve_broker(args)
        if args.command == "worker":  # Celery's own worker options pass through
            return service.run_celery(args, passthrough)
        if passthrough:
            raise UsageError(f"npuprof {args.command}: unrecognized arguments: {' '.join(passthrough)}")
        if args.command == "flower":
            return service.run_celery(args, [])
        return HANDLERS[args.command](args)
    except NpuprofError as exc:
        failure = failure_object(exc)
        end_open_bar()
        sys.stderr.write(f"npuprof: error [{failure['phase']}]: {printable(exc.one_line())}\n")
        if _wants_json(argv):
            print_json(failure)
        return exc.exit_code
    except KeyboardInterrupt:
        end_open_bar()
        sys.stderr.write("npuprof: interrupted\n")
        if _wants_json(argv):
            print_json(
                {"status": "failed", "phase": "interrupted", "kind": "interrupted", "error": "interrupted by user"}
            )
        return 130


def _wants_json(argv: Sequence[str] | None) -> bool:
    """A failure's JSON goes to a pipe, or to a terminal asked for it (``--json``): a person at a
    terminal reads the one line on stderr."""
    return not sys.stdout.isatty() or "--json" in (sys.argv[1:] if argv is None else argv)
