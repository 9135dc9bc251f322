"""Everything the suite needs beside the repository, declared once.

Under ``CI=true`` (``.ci/run`` exports it) a missing prerequisite stops the run before collection with
its name and how to get it. Elsewhere, the tests that need it skip with that reason, and the rest run.
Binaries are looked up on ``PATH`` only (``.ci/run`` puts ``/usr/sbin`` on it for ``sshd``), so a test
can hide one by narrowing ``PATH``."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PEER_VERSION = "26.2.0"
# every file of the real samples the suite reads: its path under the samples dir, size and sha256 (a dir
# that exists but is empty, truncated or edited is not the samples the tests' numbers come from)
SAMPLES_MANIFEST = REPO / "tests" / "data" / "samples_manifest.json"


def samples_dir() -> Path:
    """The real sample captures: ``NPUPROF_SAMPLES``, else ``shared/samples`` beside the repository."""
    return Path(os.environ.get("NPUPROF_SAMPLES", REPO.parent / "shared" / "samples")).resolve()


def peer_venv() -> Path:
    """The vendor analyzer's own venv: ``NPUPROF_PEER_VENV``, else under ``~/.cache/npuprof``."""
    default = Path.home() / ".cache" / "npuprof" / f"msprof-analyze-{PEER_VERSION}"
    return Path(os.environ.get("NPUPROF_PEER_VENV", default))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def samples_manifest(root: Path) -> dict[str, dict]:
    """Every file under ``root``: its relative path → size and sha256."""
    return {
        path.relative_to(root).as_posix(): {"bytes": path.stat().st_size, "sha256": _sha256(path)}
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@lru_cache(maxsize=4)
def samples_problem(root: Path) -> str | None:
    """The first way the samples at ``root`` differ from SAMPLES_MANIFEST (a file missing, of another size
    or other bytes), or None when every file the manifest lists is there as recorded."""
    if not root.is_dir():
        return "no such directory"
    expected = json.loads(SAMPLES_MANIFEST.read_text())
    for name, want in expected.items():  # 125 files, 21 MB: hashed in a fraction of a second
        path = root / name
        if not path.is_file():
            return f"{name} is missing ({len(expected)} files expected)"
        if path.stat().st_size != want["bytes"]:
            return f"{name} holds {path.stat().st_size} bytes, not {want['bytes']}"
        if _sha256(path) != want["sha256"]:
            return f"{name} differs from the recorded sample (sha256)"
    return None


@lru_cache(maxsize=4)
def peer_version(venv: Path) -> str | None:
    """The version ``msprof-analyze --version`` of ``venv`` prints (its 'msprof-analyze X.Y.Z' line), or
    None when it does not run or says no version (a stub that exists but is not the tool). The tool takes
    seconds to answer, so its answer is kept beside the venv's default home, keyed by the tool's path,
    size and mtime: each of the suite's pytest runs asks again only when the tool changed."""
    tool = venv / "bin" / "msprof-analyze"
    if not tool.is_file():
        return None
    stat = tool.stat()
    key = f"{tool.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    cache = Path.home() / ".cache" / "npuprof" / "peer-version.json"
    known = json.loads(cache.read_text()) if cache.is_file() else {}
    if key in known:
        return known[key]
    try:
        run = subprocess.run([str(tool), "--version"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    said = [line.split() for line in (run.stdout + run.stderr).splitlines() if line.startswith("msprof-analyze ")]
    version = said[0][1] if run.returncode == 0 and said and len(said[0]) > 1 else None
    cache.parent.mkdir(parents=True, exist_ok=True)
    temporary = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps({**known, key: version}))
    temporary.replace(cache)  # atomic: parallel runs never read half a file
    return version


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
            return samples_problem(samples_dir()) is None
        return peer_version(peer_venv()) == PEER_VERSION

    def reason(self) -> str:
        """One line: what is missing, who needs it, how to get it."""
        where = ""
        if self.kind == "samples":
            where = f" at {samples_dir()} ({samples_problem(samples_dir())})"
        elif self.kind == "peer":
            found = peer_version(peer_venv())
            said = f"msprof-analyze --version says {found}" if found else "no working msprof-analyze"
            where = f" at {peer_venv()} ({said})"
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


if __name__ == "__main__":  # python tests/helpers/prerequisites.py --write-samples-manifest
    if sys.argv[1:] != ["--write-samples-manifest"]:
        sys.exit("usage: prerequisites.py --write-samples-manifest (records the samples the suite reads)")
    SAMPLES_MANIFEST.write_text(json.dumps(samples_manifest(samples_dir()), indent=1, sort_keys=True) + "\n")
    print(f"{SAMPLES_MANIFEST}: {len(json.loads(SAMPLES_MANIFEST.read_text()))} files of {samples_dir()}")
