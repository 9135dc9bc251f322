"""Measuring helpers for benchmarks: wall time and the peak memory of a whole process tree.

Two sums over the tree: RSS counts every page each process maps, so the pages forked workers share
with their parent (libraries, the imported modules) count once per process; PSS (``smaps_rollup``)
splits each shared page between its sharers, so the tree's PSS is the physical memory it holds.
"""

from __future__ import annotations

import os
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
def peak_rss(interval: float = 0.02):
    """Sample the memory of this process tree while the block runs; yields a dict filled with ``peak``
    (the tree's RSS) and ``peak_pss`` (its PSS)."""
    result = dict(zip(("peak", "peak_pss"), tree_memory_bytes(os.getpid())))
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            rss, pss = tree_memory_bytes(os.getpid())
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
