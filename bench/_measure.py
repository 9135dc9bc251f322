"""Measuring helpers for benchmarks: wall time, the CPU and the peak memory of a whole process tree.

Two sums over the tree: RSS counts every page each process maps, so the pages forked workers share
with their parent (libraries, the imported modules) count once per process; PSS (``smaps_rollup``)
splits each shared page between its sharers, so the tree's PSS is the physical memory it holds.

CPU: ``/usr/bin/time``, farm-bench and the children's rusage count only the processes their command
waits for. A forkserver pool's workers are the forkserver's children, and the forkserver is never waited
for: a pool of 2 s of work reads 0.05 s (measured: 1.41 s by ``perf stat`` against 0.14 s by time and
0.16 s by rusage, for 4 tasks on 2 workers). ``run_measured`` runs the command under ``perf stat -e
task-clock``, which counts every thread of every process the command starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
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


def _tree(pid: int) -> list[int]:
    """``pid`` and all its living descendants."""
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        stack += _children(current)
    return found


def tree_memory_bytes(pid: int, with_pss: bool = True) -> tuple[int, int, dict[int, int]]:
    """(RSS, PSS, {pid: VmHWM}) of ``pid`` and all its descendants; RSS and PSS summed."""
    rss = pss = 0
    high_water: dict[int, int] = {}
    for current in _tree(pid):
        try:
            status = Path(f"/proc/{current}/status").read_text()
            pss += _field_bytes(f"/proc/{current}/smaps_rollup", "Pss:") if with_pss else 0
        except OSError:
            continue
        fields = {line.split(":")[0]: line for line in status.splitlines() if line.startswith(("VmRSS", "VmHWM"))}
        rss += int(fields.get("VmRSS", "x 0").split()[1]) * 1024
        high_water[current] = int(fields.get("VmHWM", "x 0").split()[1]) * 1024
    return rss, pss, high_water


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants, summed."""
    return tree_memory_bytes(pid, with_pss=False)[0]


def _reset_high_water(pid: int) -> None:
    """Reset each process's VmHWM to its current RSS (``clear_refs`` 5), so a peak is the block's own."""
    for current in _tree(pid):
        try:
            Path(f"/proc/{current}/clear_refs").write_text("5")
        except OSError:
            pass


@contextmanager
def peak_rss(interval: float = 0.02, pid: int | None = None):
    """Sample the memory of this process tree (or ``pid``'s) while the block runs; yields a dict filled
    with ``peak`` (the tree's RSS, sampled every ``interval`` s: a peak shorter than that can be missed),
    ``peak_pss`` (its PSS) and ``peak_bound`` (each process's own high-water mark VmHWM, reset when the
    block starts and added up: no sample can miss it, and it is at least the tree's true peak, since
    the processes need not peak together). Sampling faster costs the measured process: reading
    smaps_rollup takes the lock its page faults need (5 ms made a 0.2 s allocation take 1.9 s)."""
    pid = os.getpid() if pid is None else pid
    _reset_high_water(pid)
    rss, pss, high_water = tree_memory_bytes(pid)
    result = {"peak": rss, "peak_pss": pss}
    stop = threading.Event()

    def sample() -> None:
        while True:
            rss, pss, seen = tree_memory_bytes(pid)
            result["peak"], result["peak_pss"] = max(result["peak"], rss), max(result["peak_pss"], pss)
            for current, mark in seen.items():
                high_water[current] = max(high_water.get(current, 0), mark)
            if stop.is_set():  # one last look after the block: the high-water marks it left
                return
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
        result["peak_bound"] = sum(high_water.values())


def _task_clock_seconds(perf_output: Path) -> float:
    """The task-clock ``perf stat -x,`` wrote (its CSV line: value in ms, unit, event), in seconds."""
    for line in perf_output.read_text().splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2].startswith("task-clock") and fields[1] == "msec":
            return float(fields[0]) / 1000.0
    raise SystemExit(f"perf stat wrote no task-clock: {perf_output.read_text()[-500:]}")


def run_measured(argv: list[str], cwd: Path | None = None) -> dict:
    """Run ``argv`` as its own process, as a user runs it, and sample that process tree only (not the
    benchmark's, whose Arrow pool still holds what its own reads took): seconds, peak, peak_pss, and
    ``cpu_s``, the whole tree's CPU (a pool's workers included) with ``cpu_counted_by`` saying how: perf's
    task-clock, or where perf is missing the waited-for processes' rusage, which misses a pool's workers."""
    perf = shutil.which("perf")
    with tempfile.TemporaryDirectory() as scratch:
        counts = Path(scratch) / "perf.csv"
        command = [perf, "stat", "-x", ",", "-e", "task-clock", "-o", str(counts), "--", *argv] if perf else argv
        before = os.times()
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd)
        # under perf the command is perf's child: the tree sampled is perf's, perf's own few MB counted in
        with peak_rss(pid=child.pid) as run:
            _, errors = child.communicate()
        if child.returncode:
            raise SystemExit(f"{argv[:3]} failed ({child.returncode}): {errors.decode(errors='replace')[-2000:]}")
        after = os.times()
        if perf:
            run["cpu_s"], run["cpu_counted_by"] = _task_clock_seconds(counts), "perf task-clock, the whole tree"
        else:
            waited = after.children_user + after.children_system - before.children_user - before.children_system
            run["cpu_s"], run["cpu_counted_by"] = waited, "rusage of waited-for processes (a pool's workers missed)"
    return run
