"""Whether a rank fits in the memory this machine has, asked before its stages start.

A rank's stages hold its events in memory (Arrow, then pandas frames); a rank too big for the machine
would end in an out-of-memory kill — in the service, a worker process dying under the task again and
again. Estimated up front from the bytes of the rank's kernel sources (and, for a profiler db, the text its
rows will each copy out of STRING_IDS) × a working-set factor that
``bench/pipeline.py`` measures (peak RSS of a rank's chain of stages over its kernel bytes), a rank
that cannot fit is refused with a named error instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from npuprof.pipeline.errors import NotEnoughMemory
from npuprof.pipeline.sources.discovery import RankInput
from npuprof.pipeline.sources.profiler_db import repeated_text_bytes

# peak RSS of one rank's chain of stages over its kernel source bytes, less the interpreter and imports:
# 2.5–2.6 on a 106 MB rank of the bench root, 2.2–2.4 on a 425 MB one (bench/pipeline.py,
# "rank_working_set_over_input", Dec 4; the peak is summarize, with the rank's events still held for
# the stages after it); 2.9–3.0 and 2.5 on Dec 3, 4.4–4.6 before. Kept at 5: the analyzing process
# runs chains one after another, and a heap that ran several holds more than a fresh process's (a
# 425 MB rank's second chain in one process peaks 5–10 % above a fresh one's), and a rank's
# trace_view.json, which the estimate does not count, adds up to its host-event cap
WORKING_SET_FACTOR = 5.0
FACTOR_ENV = "NPUPROF_MEMORY_FACTOR"  # 0 turns the check off


def rank_input_bytes(rank: RankInput) -> int:
    """Bytes of the rank's kernel sources (kernel_details.csv, op_summary CSVs, profiler dbs)."""
    total = 0
    for path in (rank.kernel_csv, *rank.profiler_dbs, *rank.op_summary_csvs):
        if path:
            try:
                total += os.path.getsize(path)
            except OSError:
                pass
    return total


def available_bytes(proc: Path = Path("/proc"), cgroup: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Memory this process can still take: the kernel's MemAvailable, or less when a cgroup (a container,
    a systemd slice) caps it; None when neither says."""
    found = []
    try:
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int((cgroup / "memory.current").read_text().strip()))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def working_set_factor() -> float:
    value = os.environ.get(FACTOR_ENV)
    return float(value) if value else WORKING_SET_FACTOR


def _budget(available: int | None) -> tuple[float, int] | None:
    """(working-set factor, bytes available), or None when the check is off or nothing says."""
    factor = working_set_factor()
    available = available_bytes() if available is None else available
    return None if factor <= 0 or available is None else (factor, available)


def check_rank_fits(rank: RankInput, available: int | None = None) -> None:
    """Refuse (NotEnoughMemory) a rank whose estimated working set exceeds the memory available."""
    budget = _budget(available)
    if budget is None:
        return
    factor, available = budget
    size = rank_input_bytes(rank)
    repeated = sum(repeated_text_bytes(db) for db in rank.profiler_dbs)  # a db's strings, copied per row
    need = int((size + repeated) * factor)
    if need > available:
        what = f"{_gb(size)} of kernel sources"
        what += f" and {_gb(repeated)} of db strings they repeat" if repeated else ""
        raise NotEnoughMemory(
            f"rank {rank.rank_id} needs about {_gb(need)} of memory ({what} × {factor:g}) "
            f"and this machine has {_gb(available)} available: run it where there is more memory or with fewer "
            f"--jobs ({FACTOR_ENV}=0 turns this check off)"
        )


def ranks_at_once(sizes: list[int], jobs: int, available: int | None = None) -> int:
    """How many ranks (of kernel source ``sizes``) may run their stages at once: at most ``jobs``, and
    no more than the biggest ones' estimated working sets fit in the available memory together — fewer
    processes rather than an out-of-memory kill. At least 1: a rank that cannot fit even alone is
    ``check_rank_fits``'s to refuse."""
    budget = _budget(available)
    if budget is None:
        return max(jobs, 1)
    factor, available = budget
    fitting = np.cumsum(sorted((size * factor for size in sizes), reverse=True)[:jobs]) <= available
    return max(int(fitting.sum()), 1)


def _gb(size: int) -> str:
    return f"{size / 1e9:.1f} GB" if size >= 1e8 else f"{size / 1e6:.1f} MB"
