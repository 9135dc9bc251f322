"""The ``npuprof`` command line.

Stdout carries exactly one JSON object per command (the result, or ``{"status": "failed", ...}``);
everything meant for people (progress, one-line errors) goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from npuprof.api.terminal import print_summary
from npuprof.pipeline import __version__, io, schema
from npuprof.pipeline.errors import (
    EXIT_BAD_INPUT,
    EXIT_DEGRADED,
    EXIT_INTERNAL,
    EXIT_MANIFEST_NOT_OK,
    EXIT_MISSING_PREREQUISITES,
    EXIT_PARTIAL,
    EXIT_REMOTE,
    EXIT_SERVICE_UNAVAILABLE,
    EXIT_USAGE,
    NpuprofError,
    ServiceUnavailable,
    UsageError,
    failure_object,
)
from npuprof.pipeline.modelinfo.hardware import check_hardware_model
from npuprof.pipeline.progress import make_progress
from npuprof.pipeline.runner import StageWindow, analyze
from npuprof.pipeline.stages import STAGE_NAMES
from npuprof.pipeline.stages.base import AnalyzeOptions
from npuprof.synth import SCENARIOS, generate

EXIT_CODES_HELP = f"""exit codes:
  0   success
  {EXIT_INTERNAL}   internal error (a bug: failure.json in the output dir holds the traceback)
  {EXIT_USAGE}   usage error (bad flags, an unknown stage, non-empty output dir without --overwrite)
  {EXIT_BAD_INPUT}   bad input data (unreadable, truncated or malformed profiling files)
  {EXIT_MANIFEST_NOT_OK}   collection manifest.json whose analysis_status is not "ok"
  {EXIT_MISSING_PREREQUISITES}   a stage window needs artifacts of earlier stages that are missing
  {EXIT_SERVICE_UNAVAILABLE}   the service's broker (Redis) cannot be reached, or the service extra is not installed
  {EXIT_PARTIAL}   a sweep finished, but some roots failed (sweep, status --watch; each error is in the rollup)
  {EXIT_DEGRADED}   the analysis finished but the root is degraded (segmentation errors or unresolvable evidence;
      report.md and analysis_summary.json open with the reasons)
  {EXIT_REMOTE}   a remote host (deploy, fetch --via): cannot connect, unknown host key, or a command there failed
"""
SERVICE_EXTRA_HINT = "the service needs its extra: pip install 'npuprof[service]'"
PROGRESS_CHOICES = ("auto", "bar", "json", "none")


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing and exiting, so failures stay one JSON object."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def _add_analyze(commands) -> None:
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
    run.add_argument(
        "root", nargs="?", help="profiling root (not needed with --from-stage/--only-stage past normalize)"
    )
    run.add_argument(
        "-o", "--output", required=True, help="output directory (refused if non-empty, unless --overwrite or resuming)"
    )
    run.add_argument("--from-stage", choices=STAGE_NAMES, help="start at this stage, reusing earlier artifacts")
    run.add_argument("--to-stage", choices=STAGE_NAMES, help="stop after this stage")
    run.add_argument("--only-stage", choices=STAGE_NAMES, help="run just this stage on existing artifacts")
    run.add_argument(
        "--source",
        choices=("auto", "csv", "db"),
        default="auto",
        help="kernel source: auto prefers a profiler db that passes the schema probe, else CSV",
    )
    run.add_argument(
        "--progress",
        choices=PROGRESS_CHOICES,
        default="auto",
        help="progress on stderr: a bar on a TTY (auto), JSON lines, or nothing",
    )
    run.add_argument("--jobs", type=int, default=None, help="processes for rank-local stages (default: CPU cores)")
    _add_model_options(run)
    _add_report_options(run)
    run.add_argument(
        "--hash-sources",
        action="store_true",
        help="record each input file's sha256 in manifest.json (reads every byte)",
    )
    run.add_argument(
        "--overwrite", action="store_true", help="replace the artifacts of an earlier run in the output dir"
    )


def _add_hardware_model(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hardware-model",
        help="the NPU the captures ran on (e.g. Ascend910B3; see knowledge/hardware_profiles.yaml): sets the peaks "
        "for MFU and roofline (default: each capture's own device name when it names one SoC)",
    )


def _add_model_options(run: argparse.ArgumentParser) -> None:
    """What the model and hardware context compare against: a config, a catalog model, an NPU."""
    run.add_argument(
        "--model-config",
        help="the model's config.json: num_hidden_layers sets the expected layer count (default: ROOT/config.json)",
    )
    run.add_argument(
        "--model-id",
        help="a model of knowledge/model_catalog.yaml (e.g. Qwen3-0.6B), used when there is no config.json; "
        "a family name (e.g. qwen3) lets the profile's fingerprint pick the variant",
    )
    _add_hardware_model(run)
    run.add_argument(
        "--hardware-profile",
        help='a JSON file of peaks: {"name": ..., "cube_tflops": {"bf16": 313.0}, "vector_tflops": ..., '
        '"hbm_gbps": ..., "sustained_factors": {"bf16": 0.9}} (overrides --hardware-model)',
    )
    run.add_argument(
        "--no-cann-hardware-scan",
        action="store_true",
        help="do not read peaks from this host's CANN platform_config/*.ini (else used for the chosen SoC)",
    )


def _add_report_options(run: argparse.ArgumentParser) -> None:
    """What the later stages produce: report mode, the single-file HTML, host-trace labels."""
    run.add_argument(
        "--mode",
        choices=("fast", "full"),
        default="fast",
        help="fast: analysis_summary.json, report.md, trace.json; full: also report.xlsx, report.html (default: fast)",
    )
    run.add_argument(
        "--html-single-file",
        action="store_true",
        help="with --mode full: inline the HTML report's data into report.html itself, one file to mail (larger)",
    )
    run.add_argument(
        "--no-host-trace",
        action="store_true",
        help="do not stream trace_view.json to label idle windows with candidate host causes (faster on GB traces)",
    )


def _add_sweep(commands) -> None:
    sweep = commands.add_parser(
        "sweep",
        help="analyze every profiling root under search roots and compare them in one table",
        description="Discover profiling roots (dirs with kernel_details.csv, a profiler db or op_summary csvs; rank "
        "dirs fold into their case root), analyze each into OUT/<root-slug>/ in a local process pool, and write "
        "OUT/sweep_summary.json and OUT/sweep_class_rollup.csv. A failing root never stops the sweep.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    sweep.add_argument(
        "--render-html", action="store_true", help="full report mode for every root: report.xlsx and report.html too"
    )
    _add_hardware_model(sweep)
    sweep.add_argument("--progress", choices=PROGRESS_CHOICES, default="auto")


def _add_service(commands) -> None:
    submit = commands.add_parser(
        "submit",
        help="send a sweep to the service (Celery workers on a Redis queue)",
        description='Send a sweep to the workers; prints {"sweep_id": ...}. The same sweep (roots, archive, options, '
        "npuprof version) gets the same id: resubmitting it reuses finished roots and never runs a root twice.",
    )
    submit.add_argument(
        "--search-root", action="append", required=True, help="directory to search on the workers' storage (repeatable)"
    )
    submit.add_argument(
        "-o",
        "--output",
        required=True,
        help="archive directory (on the shared storage) for per-root outputs and rollup",
    )
    submit.add_argument(
        "--queue", help="queue to plan on (default: storage.<name> from NPUPROF_STORAGE_MAP, else 'npuprof')"
    )
    _add_broker(submit)
    submit.add_argument(
        "--render-html", action="store_true", help="full report mode for every root: report.xlsx and report.html too"
    )
    _add_hardware_model(submit)

    status_cmd = commands.add_parser("status", help="per-root state and progress of a sweep")
    status_cmd.add_argument("sweep_id", help=SWEEP_ID_HELP)
    status_cmd.add_argument("--json", action="store_true", help="print only the JSON object (no table on stderr)")
    status_cmd.add_argument("--watch", action="store_true", help="poll until the sweep is done")
    status_cmd.add_argument("--interval", type=float, default=2.0, help="seconds between polls with --watch")
    _add_broker(status_cmd)

    fetch_cmd = commands.add_parser("fetch", help="copy a sweep's rollup and a root's summaries from the archive")
    fetch_cmd.add_argument("sweep_id", help=SWEEP_ID_HELP)
    fetch_cmd.add_argument("--root", help="also copy this root's summary files (root path, slug or dir name)")
    fetch_cmd.add_argument("-o", "--output", required=True, help="destination directory")
    _add_broker(fetch_cmd)
    fetch_cmd.add_argument(
        "--via", help="ssh://[user@]host[:port] of a machine that mounts the archive: copy over SFTP from there"
    )
    _add_ssh_options(fetch_cmd)

    cancel_cmd = commands.add_parser("cancel", help="revoke a sweep's pending tasks")
    cancel_cmd.add_argument("sweep_id", help=SWEEP_ID_HELP)
    _add_broker(cancel_cmd)

    _add_worker_and_flower(commands)


def _add_worker_and_flower(commands) -> None:
    worker = commands.add_parser(
        "worker",
        help="start a Celery worker with npuprof's app",
        description="Start a Celery worker with npuprof's app. Any other Celery worker option passes through "
        "unchanged (-n/--hostname, -l/--loglevel, --autoscale, --max-tasks-per-child, ...; see celery worker --help).",
        allow_abbrev=False,
    )
    worker.add_argument(
        "-Q", "--queues", default=None, help="comma-separated queues (e.g. storage.lustre); default: npuprof"
    )
    worker.add_argument("-c", "--concurrency", type=int, default=None, help="worker processes (default: CPU cores)")
    _add_broker(worker)

    flower = commands.add_parser(
        "flower",
        help="start Flower (the Celery web monitor) for npuprof's app",
        description="Flower listens on 127.0.0.1 unless --address says otherwise; any other address needs basic "
        "auth (--basic-auth-file or NPUPROF_FLOWER_BASIC_AUTH=user:password).",
    )
    flower.add_argument("--port", type=int, default=5555)
    flower.add_argument("--address", default="127.0.0.1")
    _add_broker(flower)
    flower.add_argument(
        "--basic-auth-file",
        help="a file holding user:password lines for HTTP basic auth (kept off the command line and out of ps)",
    )


def _add_compare(commands) -> None:
    compare = commands.add_parser(
        "compare",
        help="what changed between two captures: classes, operators, collectives, findings",
        description="Compare a baseline and a new capture. Each may be an npuprof output dir or a profiling root "
        "(analyzed first into OUT/baseline or OUT/new). Steps, layers and blocks are matched by class (the same "
        "kernels and shapes), operators by name + shapes, collectives by kind + parallel role; a delta is a change "
        "only when a Mann-Whitney U test and the step-to-step spread of both sides agree. Writes compare_*.csv, "
        "compare_findings.json, compare_summary.json and compare.md. Captures of different models are refused.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    compare.add_argument("--progress", choices=PROGRESS_CHOICES, default="auto")


def _add_ssh_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--user", help="ssh user (default: the local user / ssh config)")
    parser.add_argument("--key", help="private key file (default: ssh-agent and ~/.ssh keys)")
    parser.add_argument("--port", type=int, default=None, help="ssh port (default: 22)")
    parser.add_argument("--known-hosts", help="known_hosts file (default: ~/.ssh/known_hosts)")
    parser.add_argument(
        "--accept-new-host-key",
        action="store_true",
        help="trust a host key that known_hosts does not hold yet and record it (default: refuse)",
    )


def _add_deploy(commands) -> None:
    deploy = commands.add_parser(
        "deploy",
        help="make machines npuprof workers over SSH (install this version, run a worker, check it answers)",
        description="Upload this npuprof version as a wheel over SFTP, install it into a venv under --install-dir on "
        "each HOST, run a Celery worker there as the connecting user (a systemd user unit, else a supervisor script "
        "with a pid file) and check it answers a ping through the broker. Running it again changes nothing. Host "
        "keys are verified against known_hosts; nothing runs with sudo.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    deploy.add_argument("hosts", nargs="+", metavar="HOST", help="[user@]host")
    _add_ssh_options(deploy)
    action = deploy.add_mutually_exclusive_group()
    action.add_argument("--status", action="store_true", help="show what is deployed and whether its worker answers")
    action.add_argument("--stop", action="store_true", help="stop the worker (the install stays)")
    deploy.add_argument(
        "-Q",
        "--queue",
        action="append",
        default=None,
        help="queue the worker listens on (repeatable; default: npuprof)",
    )
    _add_broker(deploy)
    deploy.add_argument(
        "--storage-map",
        help="the worker's NPUPROF_STORAGE_MAP (name=/mount,...): roots it plans go to storage.<name> queues",
    )
    deploy.add_argument("--python", default="python3", help="Python (>= 3.11) on the host for the venv")
    deploy.add_argument("--install-dir", default=None, help="on the host (default: ~/.local/share/npuprof-worker)")
    deploy.add_argument("-c", "--concurrency", type=int, default=None, help="worker processes (default: cores)")
    deploy.add_argument(
        "--system-site-packages",
        action="store_true",
        help="let the venv see the host's site-packages (dependencies already installed there are reused)",
    )
    deploy.add_argument("--init", choices=("auto", "systemd", "supervisor"), default="auto")
    deploy.add_argument("--wheel", help="install this wheel (default: build one from the running source tree)")
    deploy.add_argument("--ping-timeout", type=float, default=90.0, help="seconds to wait for the worker's answer")


SWEEP_ID_HELP = "the sweep's id, as `npuprof submit` printed it"


def _add_broker(parser: argparse.ArgumentParser) -> None:
    """--broker, the same everywhere: which Redis the command talks to."""
    parser.add_argument(
        "--broker",
        help="Redis URL of the service (default: NPUPROF_BROKER_URL, else redis://127.0.0.1:6379/0)",
    )


def _add_synth_and_demo(commands) -> None:
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
    synth.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT")

    demo = commands.add_parser(
        "demo",
        help="generate a small 4-rank root with two planted faults and analyze it",
        description="Generate the 'demo' scenario (4 ranks, a slow rank and a host bubble planted) and run "
        "npuprof analyze on it with every stage; prints where the outputs are.",
    )
    demo.add_argument("--dir", default="npuprof-demo", help="working directory (default: ./npuprof-demo)")
    demo.add_argument("--progress", choices=PROGRESS_CHOICES, default="auto")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every npuprof command."""
    parser = _Parser(
        prog="npuprof",
        description="Analyze Ascend NPU profiling roots (torch_npu / CANN) into traceable answers.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"npuprof {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_analyze(commands)
    _add_sweep(commands)
    _add_service(commands)
    _add_compare(commands)
    _add_deploy(commands)
    _add_synth_and_demo(commands)
    return parser


def _require_positive(args: argparse.Namespace, *flags: str) -> None:
    for flag in flags:
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UsageError(f"--{flag} must be at least 1")


def _cmd_sweep(args: argparse.Namespace) -> int:
    from npuprof.pipeline.sweep.local import run_sweep

    _require_positive(args, "jobs", "limit")
    missing = [s for s in args.search_root if not Path(s).is_dir()]
    if missing:
        raise UsageError(f"--search-root {missing[0]} is not a directory")
    check_hardware_model(args.hardware_model)
    summary = run_sweep(
        args.search_root,
        args.output,
        jobs=args.jobs,
        reuse_existing=args.reuse_existing,
        limit=args.limit,
        progress=make_progress(args.progress),
        options=AnalyzeOptions(mode="full" if args.render_html else "fast", hardware_model=args.hardware_model),
    )
    result = {"status": "ok" if not summary["failed_roots"] else "partial", **summary}
    _print_json(result)
    print_summary("sweep", result)
    return EXIT_PARTIAL if summary["failed_roots"] else 0


def _cmd_service(args: argparse.Namespace) -> int:
    from npuprof.api import service

    if args.command == "submit":
        check_hardware_model(args.hardware_model)
        options = AnalyzeOptions(mode="full" if args.render_html else "fast", hardware_model=args.hardware_model)
        result = service.submit(args.search_root, args.output, options=options, queue=args.queue, broker=args.broker)
    elif args.command == "status":

        def show(current: dict) -> None:
            if not args.json:
                _status_table(current)

        if args.watch:
            result = service.wait(
                args.sweep_id, poll=args.interval, broker=args.broker, on_poll=show, timeout=7 * 24 * 3600
            )
        else:
            result = service.status(args.sweep_id, broker=args.broker)
            show(result)
    elif args.command == "fetch":
        via = _target(args.via, args) if args.via else None
        result = service.fetch(args.sweep_id, args.output, root=args.root, broker=args.broker, via=via)
    else:
        result = service.cancel(args.sweep_id, broker=args.broker)
    from npuprof.workers.settings import broker_url, redacted

    result["broker"] = redacted(args.broker or broker_url())  # which Redis was asked (password masked)
    _print_json(result)
    if args.command == "status" and args.watch and result["state"] == "done" and result["totals"].get("FAILURE"):
        return EXIT_PARTIAL
    return 0


def _analyzed(path: str, out: Path, side: str, progress) -> Path:
    """``path`` if it is an analyzed output dir, else the profiling root analyzed into OUT/<side>."""
    if (Path(path) / schema.stage_manifest_name("summarize")).exists():
        return Path(path)
    if not Path(path).is_dir():
        raise UsageError(f"npuprof compare: {path} is neither an npuprof output dir nor a profiling root")
    target = out / side
    resume = (target / schema.stage_manifest_name("summarize")).exists()
    if not resume:
        analyze(
            path, target, options=AnalyzeOptions(), window=StageWindow(), progress=progress, overwrite=target.exists()
        )
    return target


def _cmd_compare(args: argparse.Namespace) -> int:
    from npuprof.pipeline.compare.run import compare
    from npuprof.pipeline.compare.series import compare_series

    out = Path(args.output)
    if args.sweep:
        if args.baseline or args.new or not args.sweep_baseline:
            raise UsageError("npuprof compare --sweep ARCHIVE takes --baseline ROOT and no positional captures")
        _print_json(compare_series(args.sweep, args.sweep_baseline, out))
        return 0
    if not (args.baseline and args.new):
        raise UsageError("npuprof compare: give BASELINE and NEW, or --sweep ARCHIVE --baseline ROOT")
    progress = make_progress(args.progress)
    baseline = _analyzed(args.baseline, out, "baseline", progress)
    new = _analyzed(args.new, out, "new", progress)
    result = compare(baseline, new, out)
    _print_json(result)
    print_summary("compare", result)
    return 0


def _target(host: str, args: argparse.Namespace):
    """An SSH target from ``[user@]host`` or ``ssh://[user@]host[:port]`` and the ssh options."""
    from npuprof.deploy.ssh import Target

    options = {"key_file": args.key, "known_hosts": args.known_hosts, "accept_new_host_key": args.accept_new_host_key}
    target = Target.parse(host, **options)
    overrides = {"user": args.user or target.user, "port": args.port or target.port}
    return Target(**{**vars(target), **overrides})


def _cmd_deploy(args: argparse.Namespace) -> int:
    """Deploy, show or stop workers on each host; one host's failure does not stop the others."""
    from npuprof.deploy import install
    from npuprof.deploy.wheel import current_wheel
    from npuprof.workers import settings as service_settings

    _require_positive(args, "concurrency")
    worker = install.WorkerSettings(
        broker=service_settings.checked_broker_url(args.broker or service_settings.broker_url()),
        queues=tuple(args.queue or [service_settings.DEFAULT_QUEUE]),
        install_dir=args.install_dir or install.DEFAULT_INSTALL_DIR,
        python=args.python,
        concurrency=args.concurrency,
        storage_map=args.storage_map,
        system_site_packages=args.system_site_packages,
        init=args.init,
        ping_timeout=args.ping_timeout,
    )
    wheel = None if args.status or args.stop else current_wheel(args.wheel)
    results, failed = [], 0
    for host in args.hosts:
        target = _target(host, args)
        try:
            if args.status:
                results.append(install.status(target, worker))
            elif args.stop:
                results.append(install.stop(target, worker))
            else:
                results.append(install.deploy(target, worker, wheel))
        except NpuprofError as exc:
            failed += 1
            sys.stderr.write(f"npuprof: error: {exc.one_line()}\n")
            results.append({"host": target.label, **failure_object(exc)})
    _print_json({"status": "ok" if not failed else "failed", "hosts": results})
    return EXIT_REMOTE if failed else 0


def _status_table(current: dict) -> None:
    totals = ", ".join(f"{k.lower()} {v}" for k, v in sorted(current["totals"].items()))
    sys.stderr.write(f"sweep {current['sweep_id']}: {current['state']} ({totals}); merge {current['merge'].lower()}\n")
    for row in current["roots"]:
        extra = f" {row['percent']:5.1f}%" if "percent" in row else ""
        error = f"  {row['error']}" if row.get("error") else ""
        sys.stderr.write(f"  {row['state']:<9}{extra} {row['root']}{error}\n")


def _require_service_extra(*modules: str) -> None:
    """One clear line instead of a traceback when the service extra is not installed."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ServiceUnavailable(f"{SERVICE_EXTRA_HINT} ({exc})") from None


def celery_command(args: argparse.Namespace, passthrough: list[str]) -> list[str]:
    """The ``celery`` command line for ``npuprof worker`` / ``npuprof flower``; Celery's own worker
    options in ``passthrough`` go through unchanged."""
    base = [sys.executable, "-m", "celery", "-A", "npuprof.workers.app"]
    if args.command == "flower":
        return base + ["flower", f"--port={args.port}", f"--address={args.address}"]
    command = base + ["worker"]
    if not any(a in ("-l", "--loglevel") or a.startswith(("--loglevel=", "-l")) for a in passthrough):
        command += ["--loglevel", "INFO"]
    if args.queues:
        command += ["-Q", args.queues]
    if args.concurrency:
        command += ["-c", str(args.concurrency)]
    return command + [a for a in passthrough if a != "--"]


def flower_auth_env(args: argparse.Namespace) -> dict:
    """Flower's basic auth (FLOWER_BASIC_AUTH, never on the command line); refused without it off loopback."""
    users = os.environ.get("NPUPROF_FLOWER_BASIC_AUTH", "")
    if args.basic_auth_file:
        path = Path(args.basic_auth_file)
        if not path.is_file():
            raise UsageError(f"--basic-auth-file {path} does not exist")
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not lines or not all(":" in line and "," not in line for line in lines):
            raise UsageError(f"--basic-auth-file {path}: one user:password per line (no commas)")
        users = ",".join(lines)
    loopback = args.address in ("127.0.0.1", "::1", "localhost")
    if not users and not loopback:
        raise UsageError(
            f"flower --address {args.address} would serve the cluster to the network without a password: "
            "give --basic-auth-file (or NPUPROF_FLOWER_BASIC_AUTH=user:password)"
        )
    return {"FLOWER_BASIC_AUTH": users} if users else {}


def _cmd_celery(args: argparse.Namespace, passthrough: list[str]) -> int:
    """Hand over to Celery with npuprof's app (exec: signals and exit codes are Celery's)."""
    _require_service_extra("celery", "redis", *(["flower"] if args.command == "flower" else []))
    env = dict(os.environ)
    if args.broker:
        env["NPUPROF_BROKER_URL"] = args.broker
    if args.command == "flower":
        env.update(flower_auth_env(args))
    command = celery_command(args, passthrough)
    sys.stdout.flush()
    os.execvpe(command[0], command, env)
    return 0  # not reached


def _cmd_synth(args: argparse.Namespace) -> int:
    _require_positive(args, "ranks", "steps", "layers")
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
            overwrite=args.overwrite,
        )
    except (ValueError, FileExistsError) as exc:
        raise UsageError(f"npuprof synth: {exc}") from None
    _print_json(result)
    return 0


DEMO_MARKER = ".npuprof-demo"


def _cmd_demo(args: argparse.Namespace) -> int:
    work = Path(args.dir)
    if work.exists() and any(work.iterdir()) and not (work / DEMO_MARKER).exists():
        raise UsageError(f"npuprof demo: {work} exists and is not an earlier demo dir; pass another --dir")
    work.mkdir(parents=True, exist_ok=True)
    (work / DEMO_MARKER).write_text("written by npuprof demo; safe to delete\n")
    root, out = work / "root", work / "analysis"
    progress = make_progress(args.progress)
    progress("synth", 0, 1, "demo scenario")
    generated = generate(root, "demo", overwrite=True)
    progress("synth", 1, 1, f"{generated['rows']} rows")
    result = analyze(root, out, overwrite=True, progress=progress)
    result["demo"] = {
        "root": str(root),
        "ground_truth": str(root / "ground_truth.json"),
        "planted": SCENARIOS["demo"].description,
        "events_parquet": str(out / schema.NORMALIZED_EVENTS),
    }
    _print_json(result)
    print_summary("demo", result)
    return 0


def _print_json(payload: dict) -> None:
    sys.stdout.write(io.json_text(payload) + "\n")
    sys.stdout.flush()


def _cmd_analyze(args: argparse.Namespace) -> int:
    _require_positive(args, "jobs")
    window = StageWindow(args.from_stage, args.to_stage, args.only_stage)
    if args.root is None and (window.from_stage in (None, "normalize") and window.only_stage in (None, "normalize")):
        raise UsageError(
            "npuprof analyze: a profiling ROOT is required (it may be omitted only when resuming past normalize)"
        )
    options = AnalyzeOptions(
        source=args.source,
        hash_sources=args.hash_sources,
        model_config=args.model_config,
        model_id=args.model_id,
        host_trace=not args.no_host_trace,
        mode=args.mode,
        html_single_file=args.html_single_file,
        hardware_model=args.hardware_model,
        hardware_profile=args.hardware_profile,
        cann_hardware_scan=not args.no_cann_hardware_scan,
    )
    result = analyze(
        args.root,
        args.output,
        options=options,
        window=window,
        jobs=args.jobs,
        overwrite=args.overwrite,
        progress=make_progress(args.progress),
    )
    _print_json(result)
    print_summary("analyze", result)
    return EXIT_DEGRADED if result["status"] == "degraded" else 0


_HANDLERS = {
    "analyze": _cmd_analyze,
    "sweep": _cmd_sweep,
    "submit": _cmd_service,
    "status": _cmd_service,
    "fetch": _cmd_service,
    "deploy": _cmd_deploy,
    "compare": _cmd_compare,
    "cancel": _cmd_service,
    "synth": _cmd_synth,
    "demo": _cmd_demo,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``npuprof`` console script; returns the exit code."""
    parser = build_parser()
    try:
        args, passthrough = parser.parse_known_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            raise UsageError("npuprof: a COMMAND is required (see npuprof --help)")
        if args.command == "worker":
            return _cmd_celery(args, passthrough)
        if passthrough:
            raise UsageError(f"npuprof {args.command}: unrecognized arguments: {' '.join(passthrough)}")
        if args.command == "flower":
            return _cmd_celery(args, [])
        return _HANDLERS[args.command](args)
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
