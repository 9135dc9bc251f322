"""Opening a capture's files so that the file checked is the file read.

A worker checks every path a task names against the storage it serves before the task starts
(``workers/storage.py``), but anyone who can write to that storage can swap a rank's trace_view.json
for a link out of it, or a FIFO, between that check and the read. So the capture readers open a file
first and then check what they opened, through the descriptor: a regular file (``fstat``; a FIFO
would block a reader forever), and — where the process serves storage (``confine_to``: a worker) — a
file whose real path, as the kernel resolved it for this open (``/proc/self/fd``), lies under one of
the storage dirs. A reader that needs a path (DuckDB, SQLite's copy) is handed the descriptor's path.

Only a capture's files and the files a task's options name go through here: the package's knowledge
and the machine's CANN install are read where they are.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from npuprof.pipeline.errors import BadInput

_confined: tuple[Path, ...] = ()

KINDS = {
    stat.S_ISDIR: "a directory",
    stat.S_ISFIFO: "a FIFO (named pipe)",
    stat.S_ISSOCK: "a socket",
    stat.S_ISCHR: "a character device",
    stat.S_ISBLK: "a block device",
}


def confine_to(dirs: Iterable[str | Path]) -> None:
    """From now on, in this process, a capture file is read only if it lies (resolved) under ``dirs``;
    an empty ``dirs`` lifts the confinement (a local analysis reads what its user points it at)."""
    global _confined
    _confined = tuple(Path(os.path.realpath(d)) for d in dirs)


def confined() -> tuple[Path, ...]:
    """The dirs capture files must lie under (empty: not confined)."""
    return _confined


def open_input(path: str | Path, mode: str = "rb", **kwargs: Any) -> IO:
    """``path`` opened (``open``'s ``mode`` and keywords, read modes only), checked through its descriptor:
    a regular file and, when confined, under the storage; BadInput naming what it is otherwise."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would wait for a writer before any check could run
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        what = "a broken or looping symlink" if os.path.islink(path) else (exc.strerror or str(exc))
        raise BadInput(Path(path), f"cannot read file: {what}") from None
    try:
        _check_opened(fd, Path(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def read_input_bytes(path: str | Path) -> bytes:
    """The whole of a (small) capture file, opened with ``open_input``."""
    with open_input(path) as handle:
        return handle.read()


def read_input_json(path: str | Path, finite: bool = False) -> Any:
    """A capture's JSON file, opened with ``open_input`` and parsed as ``io.read_json`` does."""
    from npuprof.pipeline.io import parse_json

    return parse_json(read_input_bytes(path), Path(path), finite)


def descriptor_path(handle: IO) -> str:
    """A path that names exactly the file ``handle`` has open (for a reader that takes only a path)."""
    return f"/proc/self/fd/{handle.fileno()}"


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, from its ``st_mode``."""
    return next((name for test, name in KINDS.items() if test(mode)), "not a plain file")


def lies_under(path: Path, dirs: Iterable[Path]) -> bool:
    """Whether the resolved ``path`` is one of ``dirs`` (resolved) or lies inside one."""
    return any(path == base or base in path.parents for base in dirs)


def _check_opened(fd: int, path: Path) -> None:
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        raise BadInput(path, f"not a regular file ({file_kind(mode)})")
    if not _confined:
        return
    try:
        real = Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:  # no /proc: the path as resolved now, a narrower window than the task's check
        real = Path(os.path.realpath(path))
    if not lies_under(real, _confined):
        served = ", ".join(str(base) for base in _confined)
        raise BadInput(path, f"refused: it opens {real}, outside the storage this worker serves ({served})")
