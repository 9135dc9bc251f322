"""Everything the suite needs beside the repository, declared once.

Under ``CI=true`` (``.ci/run`` exports it) a missing prerequisite stops the run before collection with
its name and how to get it. Elsewhere, the tests that need it skip with that reason, and the rest run.
Binaries are looked up on ``PATH`` only (``.ci/run`` puts ``/usr/sbin`` on it for ``sshd``), so a test
can hide one by narrowing ``PATH``."""

from __future__ import annotations

import importlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PEER_VERSION = "26.2.0"


def samples_dir() -> Path:
    """The real sample captures: ``NPUPROF_SAMPLES``, else ``shared/samples`` beside the repository."""
    return Path(os.environ.get("NPUPROF_SAMPLES", REPO.parent / "shared" / "samples")).resolve()


def peer_venv() -> Path:
    """The vendor analyzer's own venv: ``NPUPROF_PEER_VENV``, else under ``~/.cache/npuprof``."""
    default = Path.home() / ".cache" / "npuprof" / f"msprof-analyze-{PEER_VERSION}"
    return Path(os.environ.get("NPUPROF_PEER_VENV", default))


def binary(name: str) -> str | None:
    """``name``'s path on ``PATH``, or None."""
    return shutil.which(name)


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class Prerequisite:
    """One thing the suite needs: what it is, which tests need it, and how to get it."""

    name: str
    kind: str  # "package", "binary", "samples" or "peer"
    needed_by: str
    how: str

    def present(self) -> bool:
        if self.kind == "package":
            return _importable(self.name)
        if self.kind == "binary":
            return binary(self.name) is not None
        if self.kind == "samples":
            return samples_dir().is_dir()
        return (peer_venv() / "bin" / "msprof-analyze").exists()

    def reason(self) -> str:
        """One line: what is missing, who needs it, how to get it."""
        where = {"samples": f" at {samples_dir()}", "peer": f" at {peer_venv()}"}.get(self.kind, "")
        return f"{self.kind} {self.name!r} is missing{where} (needed by {self.needed_by}): {self.how}"


EXTRAS = "pip install -e '.[service,test]'"
PREREQUISITES = (
    Prerequisite("selenium", "package", "the browser tests", EXTRAS),
    Prerequisite("celery", "package", "the service tests", EXTRAS),
    Prerequisite("redis", "package", "the service tests", EXTRAS),
    Prerequisite("flower", "package", "the service tests", EXTRAS),
    Prerequisite("paramiko", "package", "the deploy tests", EXTRAS),
    Prerequisite("chromium", "binary", "the browser tests", "apt-get install chromium chromium-driver"),
    Prerequisite("chromedriver", "binary", "the browser tests", "apt-get install chromium chromium-driver"),
    Prerequisite("redis-server", "binary", "the service tests", "apt-get install redis-server"),
    Prerequisite("sshd", "binary", "the deploy tests", "apt-get install openssh-server; /usr/sbin on PATH"),
    Prerequisite(
        "shared/samples",
        "samples",
        "the tests on real captures",
        "set NPUPROF_SAMPLES to the samples dir (the shared/samples folder beside this repository)",
    ),
    Prerequisite(
        f"msprof-analyze {PEER_VERSION}",
        "peer",
        "the peer tests",
        f"python -m venv $NPUPROF_PEER_VENV && $NPUPROF_PEER_VENV/bin/pip install msprof-analyze=={PEER_VERSION}",
    ),
)
BY_NAME = {p.name: p for p in PREREQUISITES}


def missing(names: tuple[str, ...] | None = None) -> list[Prerequisite]:
    """The prerequisites (all, or those named) that this machine lacks."""
    chosen = PREREQUISITES if names is None else tuple(BY_NAME[n] for n in names)
    return [p for p in chosen if not p.present()]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def require(*names: str) -> None:
    """At a test module's import: skip the module when a prerequisite is missing (under CI the run has
    already stopped before collection, naming it)."""
    import pytest

    lacking = missing(names)
    if lacking:
        pytest.skip("; ".join(p.reason() for p in lacking), allow_module_level=True)
