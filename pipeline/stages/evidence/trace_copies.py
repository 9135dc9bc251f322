"""The device's memory copies in trace_view.json: ``MEMCPY_ASYNC`` tasks on a device lane (host↔device
copies the device runs in stream order), with the size and direction their args give. Both trace
readers (``host_trace.py``) keep them apart from the host events, as these tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

COPY_TASK = "MEMCPY_ASYNC"  # CANN's task name
COPY_SIZE, COPY_DIRECTION = "data size(Byte)", "memcpy direction"  # its args: bytes, "host to device" …
COPY_DTYPES = {"start_us": float, "end_us": float, "bytes": float, "direction": object, "stream": "int64"}
COPY_COLUMNS = list(COPY_DTYPES)


def typed_empty(dtypes: dict) -> pd.DataFrame:
    """A table with no row, with ``dtypes``' columns and types."""
    return pd.DataFrame({column: pd.Series(dtype=kind) for column, kind in dtypes.items()})


def joined_rows(rows: list[tuple], blocks: list[pd.DataFrame], dtypes: dict, order: list[str]) -> pd.DataFrame:
    """The device tasks one reader kept (event by event as ``rows``, or a block at a time as ``blocks``)
    as one table of ``dtypes`` (text columns object, a missing text None), sorted by ``order``."""
    frames = [frame for frame in (pd.DataFrame(rows, columns=list(dtypes)), *blocks) if len(frame)]
    if not frames:
        return typed_empty(dtypes)
    joined = pd.concat(frames, ignore_index=True).astype({c: kind for c, kind in dtypes.items() if kind is not object})
    for column in [c for c, kind in dtypes.items() if kind is object]:
        joined[column] = joined[column].astype(object).where(joined[column].notna(), None)
    return joined.sort_values(order, kind="stable", ignore_index=True)


def empty_copies() -> pd.DataFrame:
    """A copies table with no row (COPY_COLUMNS, typed)."""
    return typed_empty(COPY_DTYPES)


def device_task_fields(
    tasks: pa.Table, start: np.ndarray, span: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray, pa.StructArray, np.ndarray]:
    """Of a block's device task events (``start``: their ``ts`` as µs): which overlap ``span``, their
    durations, their args and their lane (tid; -1 where none), for the rows a reader keeps."""
    duration = tasks.column("dur").to_numpy()
    inside = (duration > 0) & ~(start > span[1]) & ~(start + duration < span[0])
    tid = tasks.column("tid").to_numpy(zero_copy_only=False)
    lane = np.where(pd.isna(tid), -1, tid).astype(np.int64)
    return inside, duration, tasks.column("args").combine_chunks(), lane


def copy_rows(copies: pa.Table, start: np.ndarray, span: tuple[float, float]) -> pd.DataFrame:
    """A block's copy events (``start``: their ``ts`` as µs) that overlap ``span``, as COPY_COLUMNS."""
    inside, duration, args, stream = device_task_fields(copies, start, span)
    return pd.DataFrame(
        {
            "start_us": start[inside],
            "end_us": (start + duration)[inside],
            "bytes": args.field(COPY_SIZE).to_numpy(zero_copy_only=False)[inside],
            "direction": np.asarray(args.field(COPY_DIRECTION).to_pylist(), dtype=object)[inside],
            "stream": stream[inside],
        }
    )


def joined_copies(rows: list[tuple], blocks: list[pd.DataFrame]) -> pd.DataFrame:
    """The copies one reader kept (event by event as ``rows``, or a block at a time as ``blocks``), in
    time order."""
    return joined_rows(rows, blocks, COPY_DTYPES, ["start_us"])
