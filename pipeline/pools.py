"""Process pools that stop with their parent: on Ctrl-C, SIGTERM or the parent's death.

A pool process inherits the terminal's process group, so Ctrl-C reaches it too: each one ignores
SIGINT (its parent decides, and terminates it) and asks the kernel to kill it when the process that
forked it dies (``PR_SET_PDEATHSIG``): a ``kill -9`` of a sweep ends its forkserver, and so its pool,
instead of leaving them analysing roots for minutes.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took hold
        os._exit(1)


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (tells a reused pid apart), or None when it is gone or dead
    (a zombie: killed, not yet reaped by its own parent)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if len(fields) < 20 or fields[0] in ("Z", "X") else fields[19]


def is_running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie — killed, not reaped — does not)."""
    return _start_time(pid) is not None


def _exit_when_gone(pid: int, started: str | None, interval: float = 0.5) -> None:
    while _start_time(pid) == started:
        time.sleep(interval)
    os._exit(1)


def pool_process_init(owner: int, owner_started: str | None) -> None:
    """The initializer of every npuprof pool process: Ctrl-C is its owner's to act on; it dies with the
    forkserver that forked it (PR_SET_PDEATHSIG), and with ``owner``, the process that made the pool —
    whose death the forkserver does not act on while its children live."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    if owner_started is not None:
        threading.Thread(target=_exit_when_gone, args=(owner, owner_started), daemon=True).start()


def forkserver_context(preload: list[str] | None = None) -> multiprocessing.context.BaseContext:
    """The forkserver context npuprof's pools run in (fork is unsafe with Arrow's threads)."""
    context = multiprocessing.get_context("forkserver")
    if preload:
        context.set_forkserver_preload(preload)
    return context


def stopping_pool(workers: int, preload: list[str] | None = None) -> ProcessPoolExecutor:
    """A process pool whose processes ignore Ctrl-C and die with their parent (``pool_process_init``)."""
    owner = os.getpid()
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=forkserver_context(preload),
        initializer=pool_process_init,
        initargs=(owner, _start_time(owner)),
    )


def stop_now(pool: ProcessPoolExecutor) -> list[int]:
    """Cancel what has not started, terminate what runs, and wait for the processes to go; their pids."""
    # ProcessPoolExecutor has no public terminate before Python 3.14 (terminate_workers); its process
    # table is read before shutdown, which drops it
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
    return [process.pid for process in processes]
