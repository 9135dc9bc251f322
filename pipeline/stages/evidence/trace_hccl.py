"""HCCL's own tasks in trace_view.json: the data moves (Memcpy, Reduce_Inline, RDMA sends …) its planes
run inside each collective, on the HCCL process's ``Plane N`` lanes, with the bytes, transport and link
their args give. Both trace readers (``host_trace.py``) keep them apart from the host events, as these
tables; the notifies between them (no bytes) are not kept."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from npuprof.pipeline.stages.evidence.trace_copies import device_task_fields, joined_rows, typed_empty

# the args CANN writes on every HCCL task: how many bytes it moved, over what, between which chips
TASK_SIZE, TASK_TRANSPORT, TASK_LINK = "size(Byte)", "transport type", "link type"
# duration_us as written: end − start of epoch µs in a float loses a quarter of a µs, and tasks are short
HCCL_TASK_DTYPES = {
    "start_us": float,
    "end_us": float,
    "duration_us": float,
    "task_type": object,
    "plane": "int64",
    "transport": object,
    "link_type": object,
    "bytes": float,
}
HCCL_TASK_COLUMNS = list(HCCL_TASK_DTYPES)


def empty_hccl_tasks() -> pd.DataFrame:
    """An HCCL task table with no row (HCCL_TASK_COLUMNS, typed)."""
    return typed_empty(HCCL_TASK_DTYPES)


def is_data_task(args: dict) -> bool:
    """Whether an event's args are an HCCL task that moved bytes (the event reader's test)."""
    size = args.get(TASK_SIZE)
    return isinstance(args.get(TASK_TRANSPORT), str) and isinstance(size, (int, float)) and size > 0


def hccl_task_row(event: dict, start: float, duration: float) -> tuple:
    """One task event as an HCCL_TASK_COLUMNS row (the event reader)."""
    args = event["args"]
    plane = event.get("tid") if isinstance(event.get("tid"), int) else -1
    link = args.get(TASK_LINK)
    transport, size = args[TASK_TRANSPORT], float(args[TASK_SIZE])
    return (start, start + duration, duration, event.get("name"), plane, transport, link, size)


def block_task_mask(args: pa.ChunkedArray) -> pa.ChunkedArray:
    """Per event of a block (its ``args`` struct): whether it is an HCCL task that moved bytes."""
    fields = args.combine_chunks() if isinstance(args, pa.ChunkedArray) else args
    moved = pc.fill_null(pc.greater(fields.field(TASK_SIZE), 0), False)
    return pc.and_(pc.is_valid(fields.field(TASK_TRANSPORT)), moved)


def hccl_task_rows(tasks: pa.Table, start: np.ndarray, span: tuple[float, float]) -> pd.DataFrame:
    """A block's task events (``start``: their ``ts`` as µs) that overlap ``span``, as HCCL_TASK_COLUMNS."""
    inside, duration, args, plane = device_task_fields(tasks, start, span)
    return pd.DataFrame(
        {
            "start_us": start[inside],
            "end_us": (start + duration)[inside],
            "duration_us": duration[inside],
            "task_type": np.asarray(tasks.column("name").to_pylist(), dtype=object)[inside],
            "plane": plane[inside],
            "transport": np.asarray(args.field(TASK_TRANSPORT).to_pylist(), dtype=object)[inside],
            "link_type": np.asarray(args.field(TASK_LINK).to_pylist(), dtype=object)[inside],
            "bytes": args.field(TASK_SIZE).to_numpy(zero_copy_only=False)[inside],
        }
    )


def joined_hccl_tasks(rows: list[tuple], blocks: list[pd.DataFrame]) -> pd.DataFrame:
    """The tasks one reader kept (event by event as ``rows``, or a block at a time as ``blocks``), in
    time order."""
    return joined_rows(rows, blocks, HCCL_TASK_DTYPES, ["start_us", "plane"])
