"""The running npuprof version as a wheel, and a fingerprint of what it holds."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from npuprof.pipeline import __version__
from npuprof.pipeline.errors import BadInput, UsageError

BUILD_LEFTOVERS = (".git", "build", "dist", "*.egg-info", "__pycache__", ".venv", "bench", "tests", ".ruff_cache")


@dataclass(frozen=True)
class Wheel:
    path: Path
    version: str
    fingerprint: str  # sha256 over the members' names and bytes: equal content, equal fingerprint


def fingerprint(path: Path) -> str:
    """A hash of the wheel's content (zip timestamps vary between builds of the same source)."""
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(path) as archive:
            for name in sorted(archive.namelist()):
                digest.update(name.encode())
                digest.update(archive.read(name))
    except zipfile.BadZipFile as exc:
        raise BadInput(path, f"not a wheel: {exc}") from None
    return digest.hexdigest()


def _source_tree() -> Path | None:
    """The repository this npuprof runs from (an editable install), None for an installed wheel."""
    import npuprof.pipeline

    root = Path(npuprof.pipeline.__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() else None


def current_wheel(wheel: str | None, build_dir: Path | None = None) -> Wheel:
    """``wheel`` if given, else a wheel built from the source tree npuprof runs from."""
    if wheel:
        path = Path(wheel)
        if not path.is_file():
            raise BadInput(path, "wheel not found")
        version = path.name.split("-")[1] if path.name.count("-") >= 2 else "unknown"
        return Wheel(path, version, fingerprint(path))
    source = _source_tree()
    if source is None:
        raise UsageError("npuprof runs from an installed wheel, not a source tree: pass --wheel FILE")
    out = Path(build_dir or tempfile.mkdtemp(prefix="npuprof-wheel-"))
    # a clean copy: an in-tree build/ dir keeps modules the source no longer has
    clean = out / "source"
    shutil.copytree(source, clean, ignore=shutil.ignore_patterns(*BUILD_LEFTOVERS))
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(clean)]
    # the local build tools first (no download); pip's isolated build when they cannot build a wheel
    done = subprocess.run([*command, "--no-build-isolation"], capture_output=True, text=True)
    if done.returncode != 0:
        done = subprocess.run(command, capture_output=True, text=True)
    built = sorted(out.glob(f"npuprof-{__version__}-*.whl"))
    if done.returncode != 0 or not built:
        last = (done.stderr.strip().splitlines() or ["no wheel written"])[-1]
        raise UsageError(f"building the npuprof wheel from {source} failed: {last}")
    return Wheel(built[-1], __version__, fingerprint(built[-1]))
