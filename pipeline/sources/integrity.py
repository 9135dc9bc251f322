"""Checks that hold for every kernel source once it is read: rows are not repeated, and the file
did not change between discovery and the end of the read."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from npuprof.pipeline.errors import BadInput


def repeated_rows(frame: pd.DataFrame) -> np.ndarray:
    """Bool mask of rows that repeat an earlier row in every column. Two rows of one task cannot
    start in the same nanosecond, so only rows sharing a start time are compared (a few, not all)."""
    start = frame["start_ns"].to_numpy()
    _, inverse, counts = np.unique(start, return_inverse=True, return_counts=True)
    candidates = counts[inverse] > 1
    mask = np.zeros(len(frame), dtype=bool)
    if candidates.any():
        mask[np.flatnonzero(candidates)] = frame.loc[candidates].astype(str).duplicated().to_numpy()
    return mask


def drop_exact_duplicates(table: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """``table`` without rows that repeat an earlier row in every column but ``row_idx``, and the
    ``row_idx`` of the dropped rows."""
    start = table.column("start_ns").to_numpy(zero_copy_only=False)
    if len(np.unique(start)) == len(start):
        return table, np.array([], dtype=np.int64)
    repeated = repeated_rows(table.drop_columns(["row_idx"]).to_pandas())
    if not repeated.any():
        return table, np.array([], dtype=np.int64)
    dropped_rows = table.column("row_idx").to_numpy()[repeated]
    return table.filter(pa.array(~repeated)), dropped_rows


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
