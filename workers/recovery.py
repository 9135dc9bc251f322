"""The sweep's supervisor rules: the archive, not Celery's chord bookkeeping, says when a root is done.

A chord callback can be lost in ways no worker sees: a Redis restart between counting a rank's result
and publishing the reduce, or a dispatch claim that expired on a loaded worker. So ``merge_sweep``
polls from the moment a sweep is planned, and for each root not yet in the archive asks
``next_action``: wait, send the root's reduce again (every rank left its marker long enough ago and no
reduce is running), or fail the root loudly (a task of it failed in the service, not on the data).
``root_lock`` makes the reduce safe to send twice: whoever holds it first moves the root into the
archive, and everyone after finds nothing left to do.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from npuprof.pipeline import io, schema
from npuprof.pipeline.errors import EXIT_INTERNAL, NoSpace, NpuprofError, UsageError
from npuprof.pipeline.sources.discovery import is_npuprof_output

MARKERS = ".ranks"
RUNNING_STATES = ("STARTED", "RETRY", "PROGRESS")
Action = Literal["wait", "resend_reduce", "fail"]


WORK_MARKER = "work.json"  # in MARKERS: written by the plan; says the dir is a root's work dir, and for which output


class NotOurWorkDir(UsageError):
    """A task names a work or output dir that no plan of this service made: nothing is touched."""


def mark_work_dir(work: Path, final: Path, key: str) -> None:
    """Make ``work`` as the plan of one root (its output dir ``final``), with the marker that lets the
    rank and reduce tasks act on it: a task message alone (a crafted one, say) can name no other dir. A
    link planted at its name (derived from the root) is removed, never followed."""
    if work.is_symlink():
        work.unlink()
    (work / MARKERS).mkdir(parents=True, exist_ok=True)
    io.write_json(work / MARKERS / WORK_MARKER, {"final_dir": str(final), "key": key})


def check_work_dir(work: Path, final: Path | None = None) -> None:
    """Refuse (NotOurWorkDir) a work dir the plan did not mark, or whose marker names another output dir
    than ``final``; and an output dir beside it that holds anything but an npuprof output."""
    marker = work / MARKERS / WORK_MARKER
    try:
        planned = io.read_json(marker) if marker.is_file() and not marker.is_symlink() else None
    except NpuprofError:
        planned = None
    if not isinstance(planned, dict) or not work.name.startswith(".") or work.is_symlink():
        raise NotOurWorkDir(f"refused: {work} is not a work dir an npuprof plan made (no {MARKERS}/{WORK_MARKER})")
    if final is None:
        return
    if Path(planned.get("final_dir", "")) != final or final.parent != work.parent:
        raise NotOurWorkDir(f"refused: the work dir {work} was planned for {planned.get('final_dir')}, not {final}")
    if final.is_symlink() or (final.exists() and not replaceable_output(final)):
        raise NotOurWorkDir(f"refused: {final} exists and is not an npuprof output: it is not replaced")


def replaceable_output(path: Path) -> bool:
    """A dir a finished root may replace: an npuprof output, a failed root's failure.json, or nothing."""
    return path.is_dir() and (
        is_npuprof_output(path) or (path / schema.FAILURE_JSON).is_file() or not any(path.iterdir())
    )


def marker_path(work: Path, rank_id: int) -> Path:
    """Where a rank task leaves its marker (finished, or why it failed) inside the root's work dir."""
    return work / MARKERS / f"rank_{rank_id}.json"


@contextlib.contextmanager
def root_lock(work: Path) -> Iterator[bool]:
    """Held while one root's work dir is reduced, failed or moved into the archive.

    Yields whether the work dir is still there to act on (False: another holder finished the root).
    The lock is a file beside the work dir (``flock``: released when its holder dies, also on NFS);
    each holder removes it on release, so a waiter that wakes on a removed file takes the new one.
    """
    path = work.with_name(work.name + ".lock")
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield work.is_dir()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)


def newest_marker_time(work: Path, rank_ids: list[int]) -> float | None:
    """The mtime of the newest rank marker, or None while any rank has not left one."""
    times = []
    for rank_id in rank_ids:
        try:
            times.append(marker_path(work, rank_id).stat().st_mtime)
        except FileNotFoundError:
            return None
    return max(times, default=0.0)


def next_action(
    work: Path,
    rank_ids: list[int],
    reduce_state: str,
    reduce_error: str | None,
    failed_rank_tasks: Callable[[], list[tuple[str, BaseException]]],
    *,
    recover_after: float,
    now: float,
) -> tuple[Action, dict | None]:
    """What the supervisor does about one root that is not in the archive yet, and, to fail it, the
    failure object (phase ``service``) to write.

    ``reduce_error`` is the error of a reduce task in state FAILURE; a ChordError there is the chord
    failing to call it (a lost callback), not the reduce failing. ``failed_rank_tasks`` — (task id,
    error) of rank tasks that failed for good — is asked only when a marker is missing (it costs one
    result lookup per rank).
    """
    if not work.is_dir() or reduce_state in RUNNING_STATES:
        return "wait", None
    if reduce_state == "FAILURE" and reduce_error and "ChordError" not in reduce_error:
        return "fail", _service_failure(f"reduce task failed in the service, not on the data: {reduce_error}")
    newest = newest_marker_time(work, rank_ids)
    if newest is None:
        lost = failed_rank_tasks()
        full = [error for _, error in lost if type(error).__name__ == NoSpace.__name__]
        if full:  # the archive filled up under a rank: the root fails as the local sweep's would
            return "fail", {**_service_failure(str(full[0])), "kind": NoSpace.kind, "exit_code": NoSpace.exit_code}
        if lost:
            ids = ", ".join(task_id for task_id, _ in lost)
            return "fail", _service_failure(f"rank tasks failed in the service, not on the data: {ids}")
        return "wait", None
    if now - newest < recover_after:
        return "wait", None  # the chord's callback is normally on its way: give it time
    return "resend_reduce", None


def _service_failure(error: str) -> dict:
    return {"phase": "service", "kind": "service_error", "error": error, "exit_code": EXIT_INTERNAL}
