"""A rank's device order: its events by start time, then source row. Normalize stores events in it,
and the positions of segment, classify and the stages after them index into it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

DEVICE_ORDER = [("start_ns", "ascending"), ("row_idx", "ascending")]


def in_device_order(table: pa.Table) -> pa.Table:
    """``table`` (holding start_ns and row_idx) in device order, sorted only when it is not already."""
    return table if _is_in_device_order(table) else table.sort_by(DEVICE_ORDER)


def _is_in_device_order(table: pa.Table) -> bool:
    """Whether rows already run by start time, then source row (kernel exports mostly do): one
    vectorised check instead of a sort."""
    if table.num_rows < 2:
        return True
    start = table.column("start_ns").to_numpy()
    row = table.column("row_idx").to_numpy()
    step = np.diff(start)
    return bool(((step > 0) | ((step == 0) & (np.diff(row) > 0))).all())
