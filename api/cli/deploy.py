"""``npuprof deploy``: make machines npuprof workers over SSH, show them, or stop them."""

from __future__ import annotations

import argparse
import os
import sys

from npuprof.api.cli.options import add_broker, add_command, add_ssh_options, print_json, require_positive, ssh_target
from npuprof.pipeline.errors import EXIT_REMOTE, NpuprofError, UsageError, failure_object
from npuprof.pipeline.terminal_text import printable


def add_parsers(commands) -> None:
    deploy = add_command(
        commands,
        "deploy",
        help="make machines npuprof workers over SSH (install this version, run a worker, check it answers)",
        description="Upload this npuprof version as a wheel over SFTP, install it into a venv under --install-dir on "
        "each HOST, run a Celery worker there as the connecting user (a systemd user unit, else a supervisor script "
        "with a pid file) and check it answers a ping through the broker. Running it again changes nothing. Host "
        "keys are verified against known_hosts; nothing runs with sudo.",
    )
    deploy.add_argument("hosts", nargs="+", metavar="HOST", help="[user@]host")
    add_ssh_options(deploy)
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
    add_broker(deploy)
    deploy.add_argument(
        "--storage-map",
        help="the worker's NPUPROF_STORAGE_MAP (name=/mount,...): roots it plans go to storage.<name> queues",
    )
    deploy.add_argument(
        "--storage",
        action="append",
        default=[],
        metavar="DIR",
        help="a directory on the host the worker serves besides the --storage-map mounts (an archive, say; "
        "repeatable): its tasks may name no path outside them. Deploying needs one of the two",
    )
    deploy.add_argument(
        "--signing-dir",
        metavar="DIR",
        help="a dir made by npuprof signing-keys: its key, certificate and trusted store are copied to each host "
        "and the worker refuses unsigned messages (this command signs its own ping with them too)",
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


def run_deploy(args: argparse.Namespace) -> int:
    """Deploy, show or stop workers on each host; one host's failure does not stop the others."""
    from npuprof.deploy import install
    from npuprof.deploy.wheel import current_wheel
    from npuprof.workers import settings as service_settings

    require_positive(args, "concurrency")
    worker = install.WorkerSettings(
        broker=service_settings.checked_broker_url(args.broker or service_settings.broker_url()),
        queues=tuple(args.queue or [service_settings.DEFAULT_QUEUE]),
        install_dir=args.install_dir or install.DEFAULT_INSTALL_DIR,
        python=args.python,
        concurrency=args.concurrency,
        storage_map=args.storage_map,
        storage_roots=tuple(args.storage),
        signing_dir=args.signing_dir,
        system_site_packages=args.system_site_packages,
        init=args.init,
        ping_timeout=args.ping_timeout,
    )
    if not (args.status or args.stop or args.storage_map or args.storage):
        raise UsageError(
            "a worker serves only the storage it is given: pass --storage-map name=/mount or --storage DIR"
        )
    if args.signing_dir:  # the ping this command sends must be signed as the worker will expect
        from npuprof.workers import signing

        for name, path in signing.files_in(args.signing_dir).items():
            os.environ.setdefault(name, str(path.resolve()))
    wheel = None if args.status or args.stop else current_wheel(args.wheel)
    action = install.status if args.status else install.stop if args.stop else None
    results, failed = [], 0
    for host in args.hosts:
        target = ssh_target(host, args)
        try:
            results.append(action(target, worker) if action else install.deploy(target, worker, wheel))
        except NpuprofError as exc:
            failed += 1
            sys.stderr.write(f"npuprof: error: {printable(exc.one_line())}\n")
            results.append({"host": target.label, **failure_object(exc)})
    print_json({"status": "ok" if not failed else "failed", "hosts": results})
    return EXIT_REMOTE if failed else 0


HANDLERS = {"deploy": run_deploy}
