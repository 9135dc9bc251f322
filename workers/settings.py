"""Service settings from the environment (one place, read by the app, the client and the tests)."""

from __future__ import annotations

import os
import re
from pathlib import Path

DEFAULT_BROKER = "redis://127.0.0.1:6379/0"
DEFAULT_QUEUE = "npuprof"
KEY_PREFIX = "npuprof:"  # of every Redis key: sweep records, queues, task results, chord counters


def redacted(text: str) -> str:
    """``text`` with the password of any URL in it masked (``redis://:***@host``): it never goes to output."""
    return re.sub(r"(//[^:/@\s]*:)[^@\s]*@", r"\1***@", text)


def checked_broker_url(url: str) -> str:
    """``url`` when it parses as a redis:// URL; a usage error (password masked) otherwise."""
    from urllib.parse import urlsplit

    from npuprof.pipeline.errors import UsageError

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a malformed netloc)
    except ValueError as exc:
        raise UsageError(
            f"broker URL {redacted(url)} does not parse ({redacted(str(exc))}): percent-encode special characters "
            "of the password (e.g. ';' as %3B)"
        ) from None
    if ";" in url:
        raise UsageError(
            f"broker URL {redacted(url)}: ';' separates failover URLs for Celery; percent-encode it in a password (%3B)"
        )
    if parts.scheme not in ("redis", "rediss") or not parts.hostname:
        raise UsageError(f"broker URL {redacted(url)}: expected redis://[:password@]host[:port]/db")
    return url


def broker_url() -> str:
    """The broker's URL: NPUPROF_BROKER_URL, else the first line of the file NPUPROF_BROKER_URL_FILE names
    (a password kept in a 0600 file, out of the environment of every child), else the local default."""
    if os.environ.get("NPUPROF_BROKER_URL"):
        return os.environ["NPUPROF_BROKER_URL"]
    if os.environ.get("NPUPROF_BROKER_URL_FILE"):
        return broker_url_from_file(os.environ["NPUPROF_BROKER_URL_FILE"])
    return DEFAULT_BROKER


def broker_url_from_file(path: str) -> str:
    """The first non-empty line of ``path``: a broker URL kept off the command line (and out of ``ps``)."""
    from npuprof.pipeline.errors import UsageError

    try:
        lines = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"broker URL file {path}: cannot read it ({exc.__class__.__name__})") from None
    if not lines:
        raise UsageError(f"broker URL file {path} is empty: write redis://:password@host:port/db in it")
    return lines[0]


def has_password(url: str) -> bool:
    """Whether ``url`` carries a password (``redis://:pw@host``): shown in ``ps`` when given as an argument."""
    return redacted(url) != url


def _seconds(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def visibility_timeout() -> int:
    """Seconds before an unacknowledged message (its worker died) is delivered again: above the longest task."""
    return _seconds("NPUPROF_VISIBILITY_TIMEOUT", 6 * 3600)


def restore_sweep_seconds() -> int:
    """Seconds between two scans of the broker for messages whose visibility timeout ran out.

    Kombu's own cadence is about 100 s whatever the timeout, so a dead worker's rank could wait that
    long after its timeout; a quarter of the timeout (1 s to 60 s) keeps the wait in proportion."""
    return _seconds("NPUPROF_RESTORE_SWEEP_SECONDS", min(60, max(1, visibility_timeout() // 4)))


def record_days() -> int:
    """Days a sweep's record (and its task results: ``result_expires``) stay in Redis after its last
    change; ``npuprof forget`` drops one sooner. The archive keeps the outputs either way."""
    return int(os.environ.get("NPUPROF_SWEEP_RECORD_DAYS", "30"))


def max_rank_retries() -> int:
    """Times a rank task whose worker process died is run again before its root fails (a poison rank:
    out of memory, a crash in a native library) — counted across workers, in the archive."""
    return int(os.environ.get("NPUPROF_MAX_RANK_RETRIES", "2"))


def supervise_seconds() -> int:
    """Seconds between two looks of a sweep's supervisor (``merge_sweep``) at each missing root: is
    its reduce lost, did a task of it fail in the service (one result lookup per root: spaced out)."""
    return max(_seconds("NPUPROF_SUPERVISE_SECONDS", 10), 1)


def merge_stale_seconds() -> int:
    """Seconds without a look of a running sweep's supervisor (``merge_sweep``) after which it is taken
    for lost and sent again: its next-look message can vanish in a broker restart, which no worker sees."""
    return max(_seconds("NPUPROF_MERGE_STALE_SECONDS", 120), 1)


def recover_after() -> int:
    """Seconds after a root's last rank finished before its reduce is sent again when none is running
    (its chord callback was lost); a reduce sent twice does the work once (``recovery.root_lock``)."""
    return _seconds("NPUPROF_RECOVER_AFTER", 60)


def soft_time_limit() -> int:
    return _seconds("NPUPROF_SOFT_TIME_LIMIT", 4 * 3600)


def hard_time_limit() -> int:
    return _seconds("NPUPROF_TIME_LIMIT", 5 * 3600)


def storage_map() -> list[tuple[str, str]]:
    """(path prefix, storage name) pairs from NPUPROF_STORAGE_MAP='name=/mnt/a,other=/mnt/b', longest prefix first."""
    pairs = []
    for item in filter(None, os.environ.get("NPUPROF_STORAGE_MAP", "").split(",")):
        name, _, prefix = item.partition("=")
        if name and prefix:
            pairs.append((str(Path(prefix)), name.strip()))
    return sorted(pairs, key=lambda pair: len(pair[0]), reverse=True)


def storage_roots() -> list[str]:
    """The dirs of NPUPROF_STORAGE_ROOTS (``npuprof worker --storage DIR``): served beside the map's."""
    return [item for item in os.environ.get("NPUPROF_STORAGE_ROOTS", "").split(os.pathsep) if item]


def served_storage() -> list[Path]:
    """The directories a worker serves, resolved: the prefixes of NPUPROF_STORAGE_MAP and the dirs of
    NPUPROF_STORAGE_ROOTS (``npuprof worker --storage DIR``, an archive say). A task naming any path
    outside them is refused (``workers.storage``); a worker that serves none runs no task on a path."""
    prefixes = [prefix for prefix, _ in storage_map()] + storage_roots()
    return [Path(os.path.realpath(prefix)) for prefix in dict.fromkeys(prefixes)]


def queue_for(path: str | Path) -> str:
    """The queue of the storage that holds ``path`` (``storage.<name>``), or the default queue."""
    text = str(Path(path))
    for prefix, name in storage_map():
        if text == prefix or text.startswith(prefix.rstrip("/") + "/"):
            return f"storage.{name}"
    return DEFAULT_QUEUE
