"""Reads of whole per-rank tables kept for the root stages of one root, while their files are unchanged.

The root stages read the small per-rank tables several times each (a rank's communication ops and
links: cross_rank, then diagnostics' detectors), one Parquet file per rank at ~0.6 ms a file: a root
of a thousand ranks pays that per read. Within ``cached_reads()`` (the runner's ``finish_root``) a
read of every rank's files (no filter) is kept, and a later read of the same columns or fewer is
served from it, as long as each file's identity, size and mtime are what they were (a stage that
rewrites a table invalidates it). A table over ``TABLE_BYTES`` is not kept, nor any once
``TOTAL_BYTES`` are held: the big event tables of a big root are read as before.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pyarrow as pa

TABLE_BYTES = 32 * 1024 * 1024
TOTAL_BYTES = 64 * 1024 * 1024  # the memory targets: a root stage never holds much beside its work

Stamp = tuple[tuple[int, int, int, int], ...]
Entry = tuple[Stamp, tuple[str, ...] | None, pa.Table, int]  # stamp, columns (None: all), table, its bytes
_kept: dict[tuple[str, tuple[str, ...]], list[Entry]] | None = None


@contextmanager
def cached_reads() -> Iterator[None]:
    """Keep whole-table reads (``io.read_dataset`` of every rank) until the block ends."""
    global _kept
    outer = _kept
    _kept = {} if outer is None else outer
    try:
        yield
    finally:
        _kept = outer


def stamp(files: list[tuple[int, Path]]) -> Stamp | None:
    """Each partition file's rank, inode, size and mtime; None outside ``cached_reads`` (no stat paid)."""
    if _kept is None:
        return None
    marks = []
    for rank, file in files:
        status = os.stat(file)
        marks.append((rank, status.st_ino, status.st_size, status.st_mtime_ns))
    return tuple(marks)


def kept(
    path: Path, files_stamp: Stamp | None, columns: list[str] | None, dictionary: tuple[str, ...], rank_key: str
) -> pa.Table | None:
    """The kept read of ``path``'s files as stamped that holds ``columns`` (None: every column), as a read
    of those columns gives them (in their order, the rank key last); None when there is none."""
    if _kept is None or files_stamp is None:
        return None
    for entry_stamp, entry_columns, table, _ in _kept.get((str(path), dictionary), []):
        if entry_stamp != files_stamp:
            continue
        if columns is None and entry_columns is None:
            return table
        if columns is not None and (entry_columns is None or set(columns) <= set(entry_columns)):
            return table.select([*columns, rank_key])
    return None


def keep(
    path: Path, files_stamp: Stamp | None, columns: list[str] | None, dictionary: tuple[str, ...], table: pa.Table
) -> None:
    """Keep ``table`` (the read of ``columns`` of ``path``'s files as stamped) when it fits."""
    if _kept is None or files_stamp is None:
        return
    size = table.get_total_buffer_size()  # once: over a thousand ranks' chunks it takes milliseconds
    held = sum(entry[3] for entries in _kept.values() for entry in entries)
    if size > TABLE_BYTES or held + size > TOTAL_BYTES:
        return
    entries = _kept.setdefault((str(path), dictionary), [])
    entries[:] = [e for e in entries if e[0] == files_stamp]  # a rewritten table's older reads go
    entries.append((files_stamp, tuple(columns) if columns is not None else None, table, size))
