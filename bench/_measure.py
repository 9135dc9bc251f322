"""Measuring helpers for benchmarks: wall time and the peak memory of a whole process tree.

Two sums over the tree: RSS counts every page each process maps, so the pages forked workers share
with their parent (libraries, the imported modules) count once per process; PSS (``smaps_rollup``)
splits each shared page between its sharers, so the tree's PSS is the physical memory it holds.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path


def _children(pid: int) -> list[int]:
    kids = []
    task_dir = Path(f"/proc/{pid}/task")
    for task in task_dir.iterdir() if task_dir.exists() else []:
        try:
            kids += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return kids


def _field_bytes(path: str, field: str) -> int:
    for line in Path(path).read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) * 1024
    return 0


def tree_memory_bytes(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of ``pid`` and all its descendants, each summed."""
    rss = pss = 0
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            rss += _field_bytes(f"/proc/{current}/status", "VmRSS:")
            pss += _field_bytes(f"/proc/{current}/smaps_rollup", "Pss:")
        except OSError:
            continue
        stack += _children(current)
    return rss, pss


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants, summed."""
    return tree_memory_bytes(pid)[0]


@contextmanager
def peak_rss(interval: float = 0.02, pid: int | None = None):
    """Sample the memory of this process tree (or ``pid``'s) while the block runs; yields a dict filled
    with ``peak`` (the tree's RSS) and ``peak_pss`` (its PSS)."""
    pid = os.getpid() if pid is None else pid
    result = dict(zip(("peak", "peak_pss"), tree_memory_bytes(pid)))
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            rss, pss = tree_memory_bytes(pid)
            result["peak"], result["peak_pss"] = max(result["peak"], rss), max(result["peak_pss"], pss)
            stop.wait(interval)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    started = time.perf_counter()
    try:
        yield result
    finally:
        stop.set()
        thread.join()
        result["seconds"] = time.perf_counter() - started


def run_measured(argv: list[str]) -> dict:
    """Run ``argv`` as its own process, as a user runs it, and sample that process tree only (not the
    benchmark's, whose Arrow pool still holds what its own reads took): seconds, peak, peak_pss."""
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with peak_rss(pid=child.pid) as run:
        _, errors = child.communicate()
    if child.returncode:
        raise SystemExit(f"{argv[:3]} failed ({child.returncode}): {errors.decode(errors='replace')[-2000:]}")
    return run
