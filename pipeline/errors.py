"""Typed errors raised deep in the pipeline and turned into one line + exit code at the edge.

Each error knows its exit code and renders itself as a single line that says what and where.
"""

from __future__ import annotations

import errno
from pathlib import Path

# Exit codes are part of the CLI contract (README "Exit codes").
EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_BAD_INPUT = 3
EXIT_MANIFEST_NOT_OK = 4
EXIT_MISSING_PREREQUISITES = 5
EXIT_SERVICE_UNAVAILABLE = 6
EXIT_PARTIAL = 7  # a sweep finished, but some roots failed (each with its error in the rollup)
EXIT_DEGRADED = 8  # the analysis finished, but the root is degraded (segmentation errors, unresolvable evidence)
EXIT_REMOTE = 9  # a remote host: cannot connect, unknown host key, or a command there failed
EXIT_NO_SPACE = 10  # the output's filesystem is full (free space and run again: nothing half-written stays)
EXIT_NO_MEMORY = 11  # a rank's estimated working set is more than the machine has available


class NpuprofError(Exception):
    """Base class of every error npuprof reports to users."""

    exit_code = EXIT_INTERNAL
    kind = "internal_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def one_line(self) -> str:
        """The error as one line for people (no newlines, no traceback)."""
        return " ".join(self.message.split())

    def as_dict(self) -> dict:
        return {"kind": self.kind, "error": self.one_line()}


class UsageError(NpuprofError):
    """The command line asks for something impossible (bad flag, refused output dir)."""

    exit_code = EXIT_USAGE
    kind = "usage_error"


class BrokenEvidence(NpuprofError):
    """A finding cites an id that resolves nowhere: a bug in a detector, never a data problem."""

    kind = "broken_evidence"


class BadInput(NpuprofError):
    """Input profiling data that cannot be read: says which file and, where known, where in it.

    ``line`` is a 1-based line of a text file (the header is line 1); ``row`` a row key of a db.
    """

    exit_code = EXIT_BAD_INPUT
    kind = "bad_input"

    def __init__(
        self,
        path: str | Path,
        reason: str,
        *,
        line: int | None = None,
        row: int | None = None,
        column: str | None = None,
    ) -> None:
        self.path = str(path)
        self.line = line
        self.row = row
        self.column = column
        self.reason = reason
        where = self.path
        if line is not None:
            where += f" line {line}"
        if row is not None:
            where += f" row {row}"
        if column is not None:
            where += f" column {column!r}"
        super().__init__(f"{where}: {reason}")

    def __reduce__(self):  # errors cross process boundaries (pool workers, Celery)
        return (_rebuild_bad_input, (self.path, self.reason, self.line, self.row, self.column))

    def as_dict(self) -> dict:
        out = super().as_dict()
        out.update({"path": self.path, "line": self.line, "row": self.row, "column": self.column})
        return out


class ManifestNotOk(NpuprofError):
    """A collection manifest.json whose analysis_status is not ``ok``."""

    exit_code = EXIT_MANIFEST_NOT_OK
    kind = "manifest_not_ok"

    def __init__(self, path: str | Path, status: object, reason: str | None = None) -> None:
        self.path = str(path)
        self.status = status
        self.reason = reason
        what = reason or f"collection analysis_status is {status!r}, not 'ok'"
        super().__init__(f"{path}: {what}; refusing to analyze")

    def __reduce__(self):
        return (_rebuild_manifest_not_ok, (self.path, self.status, self.reason))

    def as_dict(self) -> dict:
        return {**super().as_dict(), "path": self.path}


class MissingPrerequisites(NpuprofError):
    """A stage range was asked for, but artifacts of earlier stages are missing."""

    exit_code = EXIT_MISSING_PREREQUISITES
    kind = "missing_prerequisites"

    def __init__(self, stage: str, missing: list[str]) -> None:
        self.stage = stage
        self.missing = missing
        super().__init__(
            f"stage {stage!r} needs artifacts that are missing: {', '.join(missing)} (run the earlier stages first)"
        )

    def __reduce__(self):
        return (MissingPrerequisites, (self.stage, self.missing))


class ServiceUnavailable(NpuprofError):
    """The service's broker (Redis) cannot be reached, or the service extra is not installed."""

    exit_code = EXIT_SERVICE_UNAVAILABLE
    kind = "service_unavailable"


class NoSpace(NpuprofError):
    """The filesystem the output is written to is full (or over quota)."""

    exit_code = EXIT_NO_SPACE
    kind = "no_space"


class NotEnoughMemory(NpuprofError):
    """A rank would need more memory than the machine (or its cgroup) has available."""

    exit_code = EXIT_NO_MEMORY
    kind = "not_enough_memory"


def no_space(exc: OSError) -> bool:
    """Whether ``exc`` says the filesystem is full or over quota (Python's, or Arrow's I/O errors)."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT) or "[errno 28]" in str(exc).lower()


class WorkerLost(NpuprofError):
    """A rank task killed its worker process every time it ran (the service gave the rank up)."""

    kind = "worker_lost"


class RemoteError(NpuprofError):
    """A remote host (deploy, fetch over SFTP): connection, host key, or a remote command failed."""

    exit_code = EXIT_REMOTE
    kind = "remote_error"

    def __init__(self, host: str, message: str) -> None:
        super().__init__(f"{host}: {message}")
        self.host = host
        self.phase = f"remote {host}"

    def __reduce__(self):
        return (RemoteError, (self.host, self.message.removeprefix(f"{self.host}: ")))


class StageFailed(NpuprofError):
    """Wraps an error with the phase (stage, rank) in which it happened."""

    def __init__(self, phase: str, cause: NpuprofError) -> None:
        self.phase = phase
        self.cause = cause
        self.exit_code = cause.exit_code
        self.kind = cause.kind
        super().__init__(cause.message)

    def __reduce__(self):
        return (StageFailed, (self.phase, self.cause))

    def as_dict(self) -> dict:
        return self.cause.as_dict()


def full_disk(where: Path | str) -> NoSpace:
    """A full output filesystem, naming the dir that could not be written (a stage knows only that it
    could not write)."""
    return NoSpace(f"no space left on device writing {where}")


def naming_full_disk(exc: NpuprofError, where: Path | str) -> NpuprofError:
    """``exc``, or, when it is a stage that found the disk full, the same stage naming ``where``."""
    if isinstance(exc, StageFailed) and isinstance(exc.cause, NoSpace):
        return StageFailed(exc.phase, full_disk(where))
    return exc


def _rebuild_manifest_not_ok(path: str, status: object, reason: str | None) -> ManifestNotOk:
    return ManifestNotOk(path, status, reason=reason)


def _rebuild_bad_input(path: str, reason: str, line: int | None, row: int | None, column: str | None) -> BadInput:
    return BadInput(path, reason, line=line, row=row, column=column)


def failure_object(exc: NpuprofError) -> dict:
    """The one JSON object that reports ``exc``: printed on stdout, stored in failure.json and in
    service markers. Its ``phase`` says where (``normalize (rank 2)``, ``setup``, ``discover``)."""
    phase = exc.phase if isinstance(exc, StageFailed) else getattr(exc, "phase", "setup")
    return {"status": "failed", "phase": phase, "exit_code": exc.exit_code, **exc.as_dict()}


def traceback_of(exc: NpuprofError) -> str | None:
    """The traceback an internal error carries (kept for failure.json, never printed)."""
    return getattr(getattr(exc, "cause", exc), "traceback", None)
