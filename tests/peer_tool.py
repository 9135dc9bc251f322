"""The vendor's analyzer, msprof-analyze, in its own venv (never our dependency): used by the peer
tests and by bench/peer.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PEER_VERSION = "26.2.0"
PEER_VENV = Path(
    os.environ.get("NPUPROF_PEER_VENV", Path.home() / ".cache" / "npuprof" / f"msprof-analyze-{PEER_VERSION}")
)


def peer_executable() -> Path:
    """``msprof-analyze`` of the peer venv, creating the venv on first use."""
    exe = PEER_VENV / "bin" / "msprof-analyze"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        subprocess.run(
            [str(PEER_VENV / "bin" / "pip"), "install", "-q", f"msprof-analyze=={PEER_VERSION}"],
            check=True,
            timeout=900,
        )
    return exe


def run_cluster(exe: Path, root: Path, mode: str = "all", export_type: str | None = "text") -> str:
    """Run ``msprof-analyze cluster``; ``export_type=None`` keeps the tool's default (db)."""
    command = [str(exe), "cluster", "-d", str(root), "-m", mode] + (
        ["--export_type", export_type] if export_type else []
    )
    proc = subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=root.parent)
    if proc.returncode != 0:
        raise RuntimeError(f"msprof-analyze failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout + proc.stderr
