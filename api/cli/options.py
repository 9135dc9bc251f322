"""What several commands share: the parser class, the exit-code table, and each option group defined
once (the analyze options, --broker, the SSH options, --progress) with the one way to read it back.

Imports here stay light (no pandas, no pipeline stages): ``npuprof --help`` builds every parser.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING

from npuprof.pipeline.errors import (
    EXIT_BAD_INPUT,
    EXIT_DEGRADED,
    EXIT_INTERNAL,
    EXIT_MANIFEST_NOT_OK,
    EXIT_MISSING_PREREQUISITES,
    EXIT_NO_MEMORY,
    EXIT_NO_SPACE,
    EXIT_PARTIAL,
    EXIT_REMOTE,
    EXIT_SERVICE_UNAVAILABLE,
    EXIT_USAGE,
    UsageError,
)

if TYPE_CHECKING:
    from npuprof.deploy.ssh import Target
    from npuprof.pipeline.options import AnalyzeOptions

EXIT_CODES_HELP = f"""exit codes:
  0   success
  {EXIT_INTERNAL}   internal error (a bug: failure.json in the output dir holds the traceback)
  {EXIT_USAGE}   usage error (bad flags, an unknown stage, non-empty output dir without --overwrite)
  {EXIT_BAD_INPUT}   bad input data (unreadable, truncated or malformed profiling files)
  {EXIT_MANIFEST_NOT_OK}   collection manifest.json whose analysis_status is not "ok"
  {EXIT_MISSING_PREREQUISITES}   a stage range needs artifacts of earlier stages that are missing
  {EXIT_SERVICE_UNAVAILABLE}   the service's broker (Redis) cannot be reached, or the service extra is not installed
  {EXIT_PARTIAL}   a sweep finished, but some roots failed (sweep, status --watch; each error is in the rollup)
  {EXIT_DEGRADED}   the analysis finished but the root is degraded (segmentation errors or unresolvable evidence;
      report.md and analysis_summary.json open with the reasons)
  {EXIT_REMOTE}   a remote host (deploy, fetch --via): cannot connect, unknown host key, or a command there failed
  {EXIT_NO_SPACE}  no space left on the output's filesystem (nothing half-written is left; free space, run again)
  {EXIT_NO_MEMORY}  a rank needs more memory than the machine has available (run it where there is more, or
      with fewer --jobs; NPUPROF_MEMORY_FACTOR=0 turns the check off)
"""
PROGRESS_CHOICES = ("auto", "bar", "json", "none")
SWEEP_ID_HELP = "the sweep's id, as `npuprof submit` printed it"


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing and exiting, so failures stay one JSON object."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def add_command(
    commands, name: str, help: str, description: str, epilog: str = EXIT_CODES_HELP, **kwargs
) -> argparse.ArgumentParser:
    """A subcommand whose --help ends with its exit-code table (npuprof's whole table by default)."""
    return commands.add_parser(
        name,
        help=help,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,
    )


def add_progress(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--progress",
        choices=PROGRESS_CHOICES,
        default="auto",
        help="progress on stderr: a bar on a TTY (auto), JSON lines, or nothing",
    )


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the result's JSON on stdout also at a terminal (a pipe always gets it, and only it)",
    )


def add_broker(parser: argparse.ArgumentParser) -> None:
    """--broker, the same everywhere: which Redis the command talks to."""
    parser.add_argument(
        "--broker",
        help="Redis URL of the service (default: NPUPROF_BROKER_URL, else the file NPUPROF_BROKER_URL_FILE names, "
        "else redis://127.0.0.1:6379/0); a password here is shown by ps: prefer --broker-file",
    )
    parser.add_argument(
        "--broker-file",
        metavar="FILE",
        help="a file (mode 0600) whose first line is the Redis URL: its password stays off the command line",
    )


def resolve_broker(args: argparse.Namespace) -> None:
    """``args.broker`` from --broker-file when given; a warning on stderr when --broker carries a password
    (every user of the machine can read a command line)."""
    if getattr(args, "broker_file", None):
        if args.broker:
            raise UsageError("give --broker or --broker-file, not both")
        from npuprof.workers.settings import broker_url_from_file

        args.broker = broker_url_from_file(args.broker_file)
    elif getattr(args, "broker", None):
        from npuprof.workers.settings import has_password

        if has_password(args.broker):
            sys.stderr.write(
                "npuprof: warning: --broker carries a password, readable by every user in ps: "
                "use --broker-file or NPUPROF_BROKER_URL\n"
            )


def add_analyze_options(parser: argparse.ArgumentParser) -> None:
    """Every option that changes what the analysis of a root computes (an AnalyzeOptions field);
    analyze, sweep and submit take the same set."""
    parser.add_argument(
        "--source",
        choices=("auto", "csv", "db"),
        default="auto",
        help="kernel source: auto prefers a profiler db that passes the schema probe, else CSV",
    )
    _add_model_options(parser)
    _add_report_options(parser)
    parser.add_argument(
        "--hash-sources",
        action="store_true",
        help="record each input file's sha256 in manifest.json (reads every byte)",
    )


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    """What the model and hardware context compare against: a config, a catalog model, an NPU."""
    parser.add_argument(
        "--model-config",
        help="the model's config.json: num_hidden_layers sets the expected layer count (default: ROOT/config.json)",
    )
    parser.add_argument(
        "--model-id",
        help="a model of knowledge/model_catalog.yaml (e.g. Qwen3-0.6B), used when there is no config.json; "
        "a family name (e.g. qwen3) lets the profile's fingerprint pick the variant",
    )
    parser.add_argument(
        "--hardware-model",
        help="the NPU the captures ran on (e.g. Ascend910B3; see knowledge/hardware_profiles.yaml): sets the peaks "
        "for MFU and roofline (default: each capture's own device name when it names one SoC)",
    )
    parser.add_argument(
        "--hardware-profile",
        help='a JSON file of peaks: {"name": ..., "cube_tflops": {"bf16": 313.0}, "vector_tflops": ..., '
        '"hbm_gbps": ..., "sustained_factors": {"bf16": 0.9}} (overrides --hardware-model)',
    )
    parser.add_argument(
        "--no-cann-hardware-scan",
        action="store_true",
        help="do not read peaks from this host's CANN platform_config/*.ini (else used for the chosen SoC)",
    )


def _add_report_options(parser: argparse.ArgumentParser) -> None:
    """What the later stages produce: report mode, the single-file HTML, host-trace labels."""
    parser.add_argument(
        "--mode",
        choices=("fast", "full"),
        default="fast",
        help="fast: analysis_summary.json, report.md; full: also trace.json, report.xlsx, report.html (default: fast)",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="with --mode fast: write the Perfetto trace.json too (full mode always does; it is large on a big root)",
    )
    parser.add_argument(
        "--html-single-file",
        action="store_true",
        help="with --mode full: inline the HTML report's data into report.html itself, one file to mail (larger)",
    )
    parser.add_argument(
        "--no-host-trace",
        action="store_true",
        help="do not stream trace_view.json to label idle windows with candidate host causes (faster on GB traces)",
    )


def analyze_options(args: argparse.Namespace) -> "AnalyzeOptions":
    """The AnalyzeOptions that ``add_analyze_options`` parsed, after checking the hardware model."""
    from npuprof.pipeline.modelinfo.hardware import check_hardware_model
    from npuprof.pipeline.options import AnalyzeOptions

    check_hardware_model(args.hardware_model)
    return AnalyzeOptions(
        source=args.source,
        hash_sources=args.hash_sources,
        model_config=args.model_config,
        model_id=args.model_id,
        host_trace=not args.no_host_trace,
        mode=args.mode,
        trace=args.trace,
        html_single_file=args.html_single_file,
        hardware_model=args.hardware_model,
        hardware_profile=args.hardware_profile,
        cann_hardware_scan=not args.no_cann_hardware_scan,
    )


def add_ssh_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--user", help="ssh user (default: the local user / ssh config)")
    parser.add_argument("--key", help="private key file (default: ssh-agent and ~/.ssh keys)")
    parser.add_argument("--port", type=int, default=None, help="ssh port (default: 22)")
    parser.add_argument("--known-hosts", help="known_hosts file (default: ~/.ssh/known_hosts)")
    parser.add_argument(
        "--accept-new-host-key",
        action="store_true",
        help="trust a host key that known_hosts does not hold yet and record it (default: refuse)",
    )


def ssh_target(host: str, args: argparse.Namespace) -> "Target":
    """An SSH target from ``[user@]host`` or ``ssh://[user@]host[:port]`` and the ssh options."""
    from npuprof.deploy.ssh import Target

    options = {"key_file": args.key, "known_hosts": args.known_hosts, "accept_new_host_key": args.accept_new_host_key}
    target = Target.parse(host, **options)
    overrides = {"user": args.user or target.user, "port": args.port or target.port}
    return Target(**{**vars(target), **overrides})


def require_positive(args: argparse.Namespace, *flags: str) -> None:
    for flag in flags:
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UsageError(f"--{flag} must be at least 1")


def print_json(payload: dict) -> None:
    """The command's one JSON object on stdout."""
    from npuprof.pipeline.json_text import json_text

    sys.stdout.write(json_text(payload) + "\n")
    sys.stdout.flush()


def add_series_key(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--series-key",
        metavar="REGEX",
        help="order the roots of a series by a number or text taken from each root's path: the regular "
        "expression's first group, or its whole match (e.g. 'build-(\\d+)' or '(\\d{8})' for a date); "
        "default: capture time. Trends (sweep_trends.csv) follow this order",
    )


def check_series_key(series_key: str | None) -> None:
    """A --series-key that does not compile is a usage error, before any root is analyzed."""
    if series_key is None:
        return
    try:
        re.compile(series_key)
    except re.error as exc:
        raise UsageError(f"--series-key {series_key!r} is not a regular expression: {exc}") from None
