"""Measuring helpers for benchmarks: wall time and the peak RSS of a whole process tree."""

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


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants, summed."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
        except OSError:
            continue
        stack += _children(current)
    return total


@contextmanager
def peak_rss(interval: float = 0.02):
    """Sample the RSS of this process tree while the block runs; yields a dict filled with ``peak``."""
    result = {"peak": tree_rss_bytes(os.getpid())}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            result["peak"] = max(result["peak"], tree_rss_bytes(os.getpid()))
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
