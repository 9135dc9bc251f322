"""Ctrl-C, SIGTERM and kill -9 of a local sweep: it stops within seconds, starts no new root, leaves
no work dir and no traceback, and its pool processes go with it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from npuprof.synth import generate

ROOTS = 10


@pytest.fixture(scope="module")
def captures(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("captures")
    for index in range(ROOTS):
        generate(base / f"root_{index:02d}", "clean", ranks=2, steps=20, layers=8, seed=index, trace=False)
    return base


def _session_pids(session: int) -> list[int]:
    """Live processes of a session (the sweep, its forkserver, its pool, the resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == session and fields[0] != "Z":  # field 6 of stat: the session id
                found.append(int(entry.name))
    return found


def _start_sweep(captures: Path, archive: Path, *extra: str) -> subprocess.Popen:
    exe = shutil.which("npuprof") or str(Path(sys.executable).with_name("npuprof"))
    command = [exe, "sweep", "--search-root", str(captures), "-o", str(archive), "--jobs", "2", "--progress", "none"]
    command += extra
    # as from a terminal: a shell without job control starts background commands with SIGINT ignored
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _wait_for_a_root(archive: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if archive.is_dir() and any(p.is_dir() and not p.name.startswith(".") for p in archive.iterdir()):
            return
        time.sleep(0.1)
    raise TimeoutError("no root landed")


def _landed(archive: Path) -> list[str]:
    return [p.name for p in archive.iterdir() if p.is_dir() and not p.name.startswith(".")]


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_sweep_stops_at_once_and_leaves_nothing_half_made(captures, tmp_path, how):
    archive = tmp_path / "archive"
    sweep = _start_sweep(captures, archive)
    _wait_for_a_root(archive)
    landed_before = len(_landed(archive))
    # Ctrl-C reaches the terminal's whole process group; SIGTERM only the sweep
    os.killpg(sweep.pid, how) if how == signal.SIGINT else sweep.send_signal(how)
    sent = time.monotonic()
    _, err = sweep.communicate(timeout=30)
    assert time.monotonic() - sent < 6, "the sweep took more than 6 s to stop"  # ~2 s on an idle machine
    assert sweep.returncode == 130, err
    assert "Traceback" not in err and "npuprof: interrupted" in err
    assert len(_landed(archive)) <= landed_before + 2  # at most the roots finishing as it was stopped
    assert not [p.name for p in archive.iterdir() if ".work-" in p.name], "a work dir was left"
    time.sleep(1)
    assert _session_pids(sweep.pid) == [], "pool processes outlived the sweep"


def test_a_killed_sweep_takes_its_pool_with_it(captures, tmp_path):
    archive = tmp_path / "archive"
    sweep = _start_sweep(captures, archive)
    _wait_for_a_root(archive)
    assert len(_session_pids(sweep.pid)) >= 3  # the sweep, the forkserver, two pool processes
    os.kill(sweep.pid, signal.SIGKILL)
    sweep.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while _session_pids(sweep.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _session_pids(sweep.pid) == [], "the forkserver or pool processes outlived a killed sweep"
    (archive / f".captures0__root_09-x.work-{sweep.pid}").mkdir()  # what a root in flight leaves
    again = _start_sweep(captures, archive, "--limit", "1")  # the next sweep clears work dirs as it starts
    _, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    assert not [p.name for p in archive.iterdir() if ".work-" in p.name], "a killed sweep's work dir stayed"
