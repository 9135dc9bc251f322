"""The file by which a service sweep says, in the archive itself, that it is writing it.

A local sweep holds the archive with ``runner.run_lock`` for as long as its process lives; a service
sweep lives across many worker processes, so it leaves this file instead (written when it is planned,
removed when it is merged). Each kind writes its own claim before it looks for the other's, so two
sweeps that start at once cannot both miss each other.
"""

from __future__ import annotations

import time
from pathlib import Path

from npuprof.pipeline import io, schema
from npuprof.pipeline.errors import UsageError


def read_mark(archive: Path) -> dict | None:
    """The service sweep that marked ``archive`` (sweep_id, broker, planned_at), or None."""
    return io.read_json_or_empty(archive / schema.SERVICE_SWEEP_MARK) or None


def write_mark(archive: Path, sweep_id: str, broker: str) -> None:
    """Mark ``archive`` as written by service sweep ``sweep_id`` (``broker`` with its password masked)."""
    io.write_json(
        archive / schema.SERVICE_SWEEP_MARK, {"sweep_id": sweep_id, "broker": broker, "planned_at": time.time()}
    )


def clear_mark(archive: Path, sweep_id: str) -> None:
    """Remove the mark when it is ``sweep_id``'s (a newer sweep's mark stays)."""
    mark = read_mark(archive)
    if mark is not None and mark.get("sweep_id") == sweep_id:
        (archive / schema.SERVICE_SWEEP_MARK).unlink(missing_ok=True)


def refuse_if_marked(archive: Path) -> None:
    """UsageError when a service sweep is writing ``archive`` (the local sweep calls this under its lock)."""
    mark = read_mark(archive)
    if mark is None:
        return
    sweep_id = mark.get("sweep_id", "?")
    raise UsageError(
        f"archive {archive} is being written by service sweep {sweep_id} (broker {mark.get('broker', '?')}): wait "
        f"for it (npuprof status {sweep_id} --watch) or give another -o; if that sweep was cancelled, remove "
        f"{archive / schema.SERVICE_SWEEP_MARK}"
    )
