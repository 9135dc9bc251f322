"""The service's commands: ``submit``, ``status``, ``fetch``, ``cancel``, ``forget`` talk to the broker;
``worker`` and ``flower`` hand over to Celery with npuprof's app."""

from __future__ import annotations

import argparse
import os
import sys

from npuprof.api.cli.options import (
    SWEEP_ID_HELP,
    add_analyze_options,
    add_broker,
    add_series_key,
    add_ssh_options,
    analyze_options,
    check_series_key,
    print_json,
    require_positive,
    ssh_target,
)
from npuprof.pipeline.errors import EXIT_PARTIAL
from npuprof.pipeline.terminal_text import printable


def add_parsers(commands) -> None:
    submit = commands.add_parser(
        "submit",
        help="send a sweep to the service (Celery workers on a Redis queue)",
        description='Send a sweep to the workers; prints {"sweep_id": ...}. The same sweep (roots, archive, options, '
        "npuprof version) gets the same id: resubmitting it reuses finished roots and never runs a root twice. The "
        "analyze options apply to every root; paths in them (--model-config, --hardware-profile) are read on the "
        "workers.",
    )
    submit.add_argument(
        "--search-root", action="append", required=True, help="directory to search on the workers' storage (repeatable)"
    )
    submit.add_argument(
        "-o",
        "--output",
        required=True,
        help="archive directory (on the shared storage) for per-root outputs and the rollup",
    )
    submit.add_argument(
        "--queue", help="queue to plan on (default: storage.<name> from NPUPROF_STORAGE_MAP, else 'npuprof')"
    )
    add_series_key(submit)
    add_broker(submit)
    add_analyze_options(submit)

    status_cmd = commands.add_parser("status", help="per-root state and progress of a sweep")
    status_cmd.add_argument("sweep_id", help=SWEEP_ID_HELP)
    status_cmd.add_argument("--json", action="store_true", help="print only the JSON object (no table on stderr)")
    status_cmd.add_argument("--watch", action="store_true", help="poll until the sweep is done")
    status_cmd.add_argument("--interval", type=float, default=2.0, help="seconds between polls with --watch")
    add_broker(status_cmd)

    fetch_cmd = commands.add_parser(
        "fetch",
        help="copy a sweep's rollup, cohort / outlier / fleet / trend tables, sweep_report.html and datasets "
        "(and a root's summaries) from the archive",
    )
    fetch_cmd.add_argument("sweep_id", help=SWEEP_ID_HELP)
    fetch_cmd.add_argument("--root", help="also copy this root's summary files (root path, slug or dir name)")
    fetch_cmd.add_argument("-o", "--output", required=True, help="destination directory")
    add_broker(fetch_cmd)
    fetch_cmd.add_argument(
        "--via", help="ssh://[user@]host[:port] of a machine that mounts the archive: copy over SFTP from there"
    )
    add_ssh_options(fetch_cmd)

    cancel_cmd = commands.add_parser("cancel", help="revoke a sweep's pending tasks")
    cancel_cmd.add_argument("sweep_id", help=SWEEP_ID_HELP)
    add_broker(cancel_cmd)

    forget_cmd = commands.add_parser(
        "forget",
        help="drop a finished sweep's record and task results from Redis (the archive stays)",
        description="Records and results expire by themselves NPUPROF_SWEEP_RECORD_DAYS (default 30) after a "
        "sweep's last change; forget drops one now. A sweep still planning or running is refused: cancel it first.",
    )
    forget_cmd.add_argument("sweep_id", help=SWEEP_ID_HELP)
    add_broker(forget_cmd)
    _add_worker_and_flower(commands)
    _add_signing_keys(commands)


def _add_signing_keys(commands) -> None:
    keys = commands.add_parser(
        "signing-keys",
        help="make the cluster's message-signing key, certificate and trusted store in DIR",
        description="Write an RSA key (mode 0600), its self-signed certificate and a store trusting it into DIR, "
        "and print the three NPUPROF_SIGNING_* settings. Give them to every client, worker and Flower (npuprof "
        "deploy --signing-dir DIR copies them to workers): workers then refuse any task or control message that "
        "is unsigned or signed by a key the store does not hold. Existing files are never replaced.",
    )
    keys.add_argument("directory", metavar="DIR", help="where to write the files (created when missing)")


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
    worker.add_argument(
        "--storage",
        action="append",
        default=[],
        metavar="DIR",
        help="a directory this worker serves (repeatable; added to NPUPROF_STORAGE_ROOTS and the prefixes of "
        "NPUPROF_STORAGE_MAP): a task naming a search root, archive or file outside them is refused",
    )
    add_broker(worker)

    flower = commands.add_parser(
        "flower",
        help="start Flower (the Celery web monitor) for npuprof's app",
        description="Flower listens on 127.0.0.1 unless --address says otherwise; any other address needs basic "
        "auth (--basic-auth-file or NPUPROF_FLOWER_BASIC_AUTH=user:password).",
    )
    flower.add_argument("--port", type=int, default=5555)
    flower.add_argument("--address", default="127.0.0.1")
    add_broker(flower)
    flower.add_argument(
        "--basic-auth-file",
        help="a file holding user:password lines for HTTP basic auth (kept off the command line and out of ps)",
    )


def run_service(args: argparse.Namespace) -> int:
    """submit, status, fetch or cancel; the result names the broker it asked (password masked)."""
    from npuprof.api import service
    from npuprof.workers.settings import broker_url, redacted

    if args.command == "submit":
        options = analyze_options(args)
        check_series_key(args.series_key)
        result = service.submit(
            args.search_root,
            args.output,
            options=options,
            queue=args.queue,
            broker=args.broker,
            series_key=args.series_key,
        )
    elif args.command == "status":
        result = _status(args)
    elif args.command == "fetch":
        via = ssh_target(args.via, args) if args.via else None
        result = service.fetch(args.sweep_id, args.output, root=args.root, broker=args.broker, via=via)
    elif args.command == "forget":
        result = service.forget(args.sweep_id, broker=args.broker)
    else:
        result = service.cancel(args.sweep_id, broker=args.broker)
    result["broker"] = redacted(args.broker or broker_url())
    print_json(result)
    if args.command == "status" and args.watch and result["state"] == "failed":  # refused, or the rollup did not fit
        return int(result.get("exit_code", EXIT_PARTIAL))
    if args.command == "status" and args.watch and result["state"] == "done" and result["totals"].get("FAILURE"):
        return EXIT_PARTIAL
    return 0


def _status(args: argparse.Namespace) -> dict:
    from npuprof.api import service

    def show(current: dict) -> None:
        if not args.json:
            _status_table(current)

    if args.watch:  # with --json nothing is shown while waiting: only the sweep record is read per poll
        on_poll = None if args.json else show
        return service.wait(
            args.sweep_id, poll=args.interval, broker=args.broker, on_poll=on_poll, timeout=7 * 24 * 3600
        )
    result = service.status(args.sweep_id, broker=args.broker)
    show(result)
    return result


def _status_table(current: dict) -> None:
    totals = ", ".join(f"{k.lower()} {v}" for k, v in sorted(current["totals"].items()))
    sys.stderr.write(f"sweep {current['sweep_id']}: {current['state']} ({totals}); merge {current['merge'].lower()}\n")
    if current.get("error"):
        sys.stderr.write(f"  {printable(current['error'])}\n")
    for row in current["roots"]:
        extra = f" {row['percent']:5.1f}%" if "percent" in row else ""
        error = f"  {row['error']}" if row.get("error") else ""
        sys.stderr.write(f"  {row['state']:<9}{extra} {printable(row['root'])}{printable(error)}\n")


def run_celery(args: argparse.Namespace, passthrough: list[str]) -> int:
    """Hand over to Celery with npuprof's app (exec: signals and exit codes are Celery's)."""
    from npuprof.api.service import require_service_extra
    from npuprof.workers import launch, signing
    from npuprof.workers.settings import broker_url, checked_broker_url, redacted

    require_service_extra("celery", "redis", *(["flower"] if args.command == "flower" else []))
    require_positive(args, *(["concurrency"] if args.command == "worker" else []))
    env = dict(os.environ)
    signing.signing_files()  # a half-configured signing setup is named here, not in Celery's traceback
    url = checked_broker_url(args.broker or broker_url())
    env.update(launch.broker_env(url, args.broker, getattr(args, "broker_file", None)))
    for name in [name for name, value in env.items() if value is None]:
        del env[name]
    if args.command == "flower":
        env.update(launch.flower_auth_env(args.address, args.basic_auth_file))
        command = launch.flower_command(args.port, args.address)
    else:
        env.update(launch.storage_env(args.storage))
        command = launch.worker_command(args.queues, args.concurrency, passthrough)
    # the one line that says which cluster this process joins, before Celery's own banner
    sys.stderr.write(f"npuprof {args.command}: broker {redacted(url)}\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(command[0], command, env)
    return 0  # not reached


def run_signing_keys(args: argparse.Namespace) -> int:
    """Write a signing key, certificate and store; print the settings that turn signing on."""
    from pathlib import Path

    from npuprof.api.service import require_service_extra
    from npuprof.workers.signing import write_signing_files

    require_service_extra("cryptography")
    print_json({"status": "ok", **write_signing_files(Path(args.directory))})
    return 0


HANDLERS = {name: run_service for name in ("submit", "status", "fetch", "cancel", "forget")}
HANDLERS["signing-keys"] = run_signing_keys
