"""The command lines that start npuprof's Celery worker and Flower, and Flower's auth policy.

Plain functions of plain values (no Celery import): ``npuprof worker`` / ``npuprof flower`` exec
what these return.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from npuprof.pipeline.errors import UsageError

LOOPBACK_ADDRESSES = ("127.0.0.1", "::1", "localhost")


def _celery() -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "npuprof.workers.app"]


def worker_command(queues: str | None, concurrency: int | None, passthrough: list[str]) -> list[str]:
    """``celery worker`` with npuprof's app; Celery's own worker options in ``passthrough`` go through
    unchanged (INFO logging unless they set a level)."""
    command = _celery() + ["worker"]
    if not any(a in ("-l", "--loglevel") or a.startswith(("--loglevel=", "-l")) for a in passthrough):
        command += ["--loglevel", "INFO"]
    if queues:
        command += ["-Q", queues]
    if concurrency:
        command += ["-c", str(concurrency)]
    return command + [a for a in passthrough if a != "--"]


def storage_env(dirs: list[str]) -> dict:
    """NPUPROF_STORAGE_ROOTS with ``dirs`` (``--storage``) added; refused when the worker would serve no
    storage at all (its tasks would all be refused) or a dir does not exist."""
    from npuprof.workers import settings

    for directory in dirs:
        if not Path(directory).is_dir():
            raise UsageError(f"--storage {directory}: no such directory")
    roots = os.pathsep.join(dict.fromkeys(settings.storage_roots() + [str(Path(d).resolve()) for d in dirs]))
    if not roots and not settings.storage_map():
        raise UsageError(
            "a worker serves only the storage it is given, and this one was given none: "
            "npuprof worker --storage DIR (repeatable) or NPUPROF_STORAGE_MAP=name=/mount"
        )
    return {"NPUPROF_STORAGE_ROOTS": roots}


def flower_command(port: int, address: str) -> list[str]:
    """``celery flower`` with npuprof's app on ``address:port``."""
    return _celery() + ["flower", f"--port={port}", f"--address={address}"]


def flower_auth_env(address: str, basic_auth_file: str | None) -> dict:
    """Flower's basic auth (FLOWER_BASIC_AUTH, never on the command line); refused without it off loopback."""
    users = os.environ.get("NPUPROF_FLOWER_BASIC_AUTH", "")
    if basic_auth_file:
        path = Path(basic_auth_file)
        if not path.is_file():
            raise UsageError(f"--basic-auth-file {path} does not exist")
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not lines or not all(":" in line and "," not in line for line in lines):
            raise UsageError(f"--basic-auth-file {path}: one user:password per line (no commas)")
        users = ",".join(lines)
    if not users and address not in LOOPBACK_ADDRESSES:
        raise UsageError(
            f"flower --address {address} would serve the cluster to the network without a password: "
            "give --basic-auth-file (or NPUPROF_FLOWER_BASIC_AUTH=user:password)"
        )
    return {"FLOWER_BASIC_AUTH": users} if users else {}


def broker_env(url: str, given: str | None, broker_file: str | None) -> dict[str, str | None]:
    """How the worker or Flower process finds its broker (None: the variable is removed). A URL read
    from a file stays in it: the process, and each pool child it forks to analyze untrusted captures,
    gets the file's path, never the password in its environment; a URL given on the command line (ps
    shows it anyway) or already in NPUPROF_BROKER_URL is passed on as it is."""
    if broker_file:
        return {"NPUPROF_BROKER_URL": None, "NPUPROF_BROKER_URL_FILE": os.path.abspath(broker_file)}
    if given or os.environ.get("NPUPROF_BROKER_URL"):
        return {"NPUPROF_BROKER_URL": url}
    return {}  # NPUPROF_BROKER_URL_FILE, or the local default: the child finds it as this process did
