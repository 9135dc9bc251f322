"""Checks that hold for every kernel source once it is read: rows are not repeated, and the file
did not change between discovery and the end of the read."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from npuprof.pipeline.errors import BadInput


def shared_starts(start: np.ndarray) -> np.ndarray | None:
    """Mask of rows whose start time another row shares, or None when none does.

    Kernel lists are written in start order, so the common answer costs one ``diff``; only an
    unordered list is sorted. Two rows of one task cannot start in the same nanosecond, so only
    these rows can repeat each other.
    """
    if len(start) < 2 or (np.diff(start) > 0).all():
        return None
    order = np.argsort(start, kind="stable")
    equal = start[order][1:] == start[order][:-1]
    if not equal.any():
        return None
    in_order = np.zeros(len(start), dtype=bool)
    in_order[1:] |= equal
    in_order[:-1] |= equal
    mask = np.empty_like(in_order)
    mask[order] = in_order
    return mask


def repeated_rows(frame: pd.DataFrame) -> np.ndarray:
    """Bool mask of rows that repeat an earlier row in every column (compared among rows that share
    a start time only: a few, not the table)."""
    repeated = np.zeros(len(frame), dtype=bool)
    candidates = shared_starts(frame["start_ns"].to_numpy())
    if candidates is not None:
        repeated[np.flatnonzero(candidates)] = frame.loc[candidates].astype(str).duplicated().to_numpy()
    return repeated


def drop_exact_duplicates(table: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """``table`` without rows that repeat an earlier row in every column but ``row_idx``, and the
    ``row_idx`` of the dropped rows."""
    none = np.array([], dtype=np.int64)
    candidates = shared_starts(table.column("start_ns").to_numpy(zero_copy_only=False))
    if candidates is None:
        return table, none
    subset = table.filter(pa.array(candidates))
    repeated = subset.drop_columns(["row_idx"]).to_pandas().astype(str).duplicated().to_numpy()
    if not repeated.any():
        return table, none
    keep = np.ones(table.num_rows, dtype=bool)
    keep[np.flatnonzero(candidates)[repeated]] = False
    return table.filter(pa.array(keep)), subset.column("row_idx").to_numpy()[repeated]


def file_state(path: str | Path) -> list[int]:
    """[size, mtime_ns] of a source file: what discovery records and normalize checks again."""
    info = os.stat(path)
    return [info.st_size, info.st_mtime_ns]


def check_unchanged(path: str | Path, recorded: list[int] | None) -> None:
    """BadInput when ``path`` is no longer the file discovery saw (a capture still being written)."""
    if recorded is None:
        return
    try:
        now = file_state(path)
    except OSError as exc:
        raise BadInput(path, f"the file disappeared while npuprof read it: {exc.strerror or exc}") from None
    if now != list(recorded):
        raise BadInput(
            path,
            f"the file changed while npuprof read it (size {recorded[0]} -> {now[0]} bytes, mtime changed: "
            f"{now[1] != recorded[1]}): is the capture still being written? analyze it once it is complete",
        )
