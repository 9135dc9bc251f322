"""trace_view.json, streamed: the host-side events that overlap a time span.

The file can be GBs (a top-level array from torch_npu, or ``{"traceEvents": [...]}``); it is never
held whole. A top-level array is read a batch of rows at a time by DuckDB's JSON reader (columnar, no Python
per event: ``trace_batches.py``); any other layout, or anything that reader would read differently, is
parsed event by event (ijson, C backend), which is the reference the columnar path is tested against.
Only complete (``X``) events of host lanes are kept: category cpu_op / python_function / ascendcl,
or any event of a process labelled CPU (CANN's AscendCL events carry no category), that overlap the
span, up to a cap. The cap counts host events only: an event of a process that the metadata (``M``)
events before it name as a device lane (Ascend Hardware, HCCL, Overlap Analysis) is never kept, so
a trace whose device lanes outnumber the cap still yields all its host events. Besides them, the
launch flows (``s`` on the host, ``f`` on the device kernel it launched; categories async_npu and
HostToDevice) give each kernel starting in the span the moment the host launched it, and the device's
memory copies (``MEMCPY_ASYNC`` on a device lane, ``trace_copies.py``) that overlap the span are kept
apart, with their size and direction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import ijson
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.input_files import open_input
from npuprof.pipeline.sources.json_depth import refuse_too_deep
from npuprof.pipeline.stages.evidence.trace_batches import NeedsEventReader, event_batches
from npuprof.pipeline.stages.evidence.trace_copies import (
    COPY_DIRECTION,
    COPY_SIZE,
    COPY_TASK,
    copy_rows,
    empty_copies,
    joined_copies,
)
from npuprof.pipeline.stages.evidence.trace_hccl import (
    TASK_LINK,
    TASK_SIZE,
    TASK_TRANSPORT,
    block_task_mask,
    empty_hccl_tasks,
    hccl_task_row,
    hccl_task_rows,
    is_data_task,
    joined_hccl_tasks,
)

HOST_CATEGORIES = frozenset({"cpu_op", "python_function", "ascendcl"})
HOST_PROCESS_NAMES = frozenset({"Python", "CANN", "Python GC"})
# process: the pid's process_name; duration_us as written (end - start of epoch µs in a float loses
# a quarter of a µs)
COLUMNS = ["name", "pid", "tid", "start_us", "end_us", "duration_us", "process"]
# launch flows: torch_npu's op → kernel (the op enqueued it) and CANN's launch → kernel (the task
# queue's launch thread submitted it); the later of the two is when the device could have it
FLOW_CATEGORIES = ("async_npu", "hosttodevice")
LAUNCH_COLUMNS = ["device_start_us", "launch_us"]
# a flow event kept: its category (index in FLOW_CATEGORIES), id, whether it starts (s) or ends (f) the flow
FLOW_SCHEMA = pa.schema([("category", pa.int64()), ("id", pa.string()), ("is_start", pa.bool_()), ("ts", pa.float64())])


@dataclass(frozen=True)
class HostTrace:
    """Host events in the span, and how many were dropped at the cap."""

    events: pd.DataFrame
    dropped: int
    bytes_read: int
    launches: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=LAUNCH_COLUMNS))  # per kernel start
    copies: pd.DataFrame = field(default_factory=empty_copies)  # the device's memory copies
    hccl_tasks: pd.DataFrame = field(default_factory=empty_hccl_tasks)  # HCCL's data moves in its collectives


def _prefix(path: Path) -> str:
    with open_input(path) as handle:
        head = handle.read(4096).lstrip()
    if head[:1] == b"[":
        return "item"
    if head[:1] == b"{":
        return "traceEvents.item"
    raise BadInput(path, "not a Chrome trace: expected a JSON array or an object with traceEvents")


def _number(value: object) -> float:
    try:
        return float(value)  # ts is a string of µs in torch_npu's traces, dur a number
    except (TypeError, ValueError):
        return float("nan")


class _Kept:
    """Host X events overlapping the span, in file order, up to the cap; the M events' host pids."""

    def __init__(self, span_start_us: float, span_end_us: float, cap: int) -> None:
        self.span = (span_start_us, span_end_us)
        self.cap = cap
        self.rows: list[tuple] = []  # event by event
        self.row_blocks: list[pd.DataFrame] = []  # the same columns, a block at a time
        self.host_pids: set = set()
        self.device_pids: set = set()  # named or labelled by an M event as a process not the host's
        self.process_names: dict = {}
        self.dropped = 0
        self.not_events = 0  # items that are not JSON objects: the file is not a trace
        self.flows: list[tuple[int, str, bool, float]] = []  # (category, id, is_start, ts_us), event by event
        self.flow_blocks: list[pa.Table] = []  # the same columns (FLOW_SCHEMA), a block at a time
        self.copies: list[tuple] = []  # the device's memory copies (COPY_COLUMNS), event by event
        self.copy_blocks: list[pd.DataFrame] = []  # the same columns, a block at a time
        self.hccl_tasks: list[tuple] = []  # HCCL's data moves (HCCL_TASK_COLUMNS), event by event
        self.hccl_task_blocks: list[pd.DataFrame] = []  # the same columns, a block at a time

    def add(self, event: object) -> None:
        """One parsed event (the event-by-event reader)."""
        if not isinstance(event, dict):
            self.not_events += 1
            return
        phase = event.get("ph")
        if phase == "M":
            args = event.get("args") or {}
            name, pid = event.get("name"), event.get("pid")
            if name == "process_name" and isinstance(args.get("name"), str):
                self.process_names[pid] = args["name"]
            if (name == "process_name" and args.get("name") in HOST_PROCESS_NAMES) or (
                name == "process_labels" and args.get("labels") == "CPU"
            ):
                self.host_pids.add(pid)
            elif (name == "process_name" and isinstance(args.get("name"), str)) or (
                name == "process_labels" and isinstance(args.get("labels"), str)
            ):
                self.device_pids.add(pid)
            return
        if phase in ("s", "f"):
            self._add_flow(event, phase == "s")
            return
        if phase != "X":
            return
        start, duration = _number(event.get("ts")), _number(event.get("dur"))
        if not duration > 0 or start > self.span[1] or start + duration < self.span[0]:
            return
        category = str(event.get("cat") or "").lower()
        if category not in HOST_CATEGORIES and self._device_lane(event.get("pid")):
            args = event.get("args") if isinstance(event.get("args"), dict) else {}
            if event.get("name") == COPY_TASK:
                stream = event.get("tid") if isinstance(event.get("tid"), int) else -1
                self.copies.append(
                    (start, start + duration, _number(args.get(COPY_SIZE)), args.get(COPY_DIRECTION), stream)
                )
            elif is_data_task(args):
                self.hccl_tasks.append(hccl_task_row(event, start, duration))
            return  # neither kept nor counted at the cap
        if self.kept() >= self.cap:
            self.dropped += 1
            return
        self.rows.append(
            (event.get("name"), event.get("pid"), event.get("tid"), start, start + duration, duration, None, category)
        )

    def _device_lane(self, pid: object) -> bool:
        """Whether the M events so far name ``pid``'s process as a device lane (and none as the host's)."""
        try:
            return pid in self.device_pids and pid not in self.host_pids
        except TypeError:  # an unhashable pid names no process
            return False

    def _add_flow(self, event: dict, is_start: bool) -> None:
        category = str(event.get("cat") or "").lower()
        if category not in FLOW_CATEGORIES:
            return
        flow_id, ts = event.get("id"), _number(event.get("ts"))
        if isinstance(flow_id, (int, str)) and not isinstance(flow_id, bool) and self._flow_in_span(ts, is_start):
            self.flows.append((FLOW_CATEGORIES.index(category), str(flow_id), is_start, ts))

    def _flow_in_span(self, ts: float, is_start: bool) -> bool:
        """A launch (s) before the span can start a kernel in it; a kernel start (f) must be in it."""
        return ts <= self.span[1] and (is_start or ts >= self.span[0])

    def launches(self) -> pd.DataFrame:
        """Per device start (f) in the span: the latest launch (s) of the same flow id among the
        categories; kernels whose flows are cut off by the cap have none."""
        rows = pa.Table.from_pylist([dict(zip(FLOW_SCHEMA.names, row)) for row in self.flows], schema=FLOW_SCHEMA)
        flows = pa.concat_tables([rows, *self.flow_blocks]).combine_chunks()
        # each (category, id) as one integer: the ids hashed once (in Arrow), then every step on numbers
        codes = pc.dictionary_encode(flows.column("id")).combine_chunks().indices.to_numpy()
        key = codes.astype(np.int64) * len(FLOW_CATEGORIES) + flows.column("category").to_numpy()
        is_start, ts = flows.column("is_start").to_numpy(zero_copy_only=False), flows.column("ts").to_numpy()
        launch = np.full(int(key.max(initial=-1)) + 1, np.nan)
        started, first = np.unique(key[is_start], return_index=True)  # the first start of each flow
        launch[started] = ts[is_start][first]
        ended, first = np.unique(key[~is_start], return_index=True)  # ... and its first end
        device, launched = ts[~is_start][first], launch[ended]
        paired = ~np.isnan(launched)
        per_kernel = pd.Series(launched[paired]).groupby(device[paired], sort=True).max()
        return pd.DataFrame(
            {"device_start_us": per_kernel.index.to_numpy(float), "launch_us": per_kernel.to_numpy(float)}
        )

    def kept(self) -> int:
        """Rows kept so far, by either reader."""
        return len(self.rows) + sum(len(block) for block in self.row_blocks)

    def frame(self) -> pd.DataFrame:
        if self.row_blocks:  # only the columnar reader fills them, only the event reader rows
            frame = pd.concat(self.row_blocks, ignore_index=True)
        else:
            frame = pd.DataFrame(self.rows, columns=[*COLUMNS, "category"])
        is_host = frame["category"].isin(HOST_CATEGORIES) | frame["pid"].isin(self.host_pids)
        frame = frame[is_host].drop(columns="category").reset_index(drop=True)
        frame["name"] = frame["name"].astype(str)
        frame["process"] = frame["pid"].map(self.process_names).astype(object)
        return frame


def _streamed(path: Path, handle: BinaryIO, kept: _Kept) -> None:
    """Any layout, one event at a time (ijson, C backend): the reference reader. A file nested deeper
    than any trace is refused first: ijson's memory grows with the square of the depth."""
    refuse_too_deep(path, handle)
    try:
        for event in ijson.items(handle, _prefix(path), use_float=True):  # a streaming parse
            kept.add(event)
    except ijson.JSONError as exc:
        raise BadInput(path, f"broken JSON near byte {handle.tell()}: {exc}") from None


_EVENT_SCHEMA = pa.schema(
    [
        ("ph", pa.string()),
        ("name", pa.string()),
        ("pid", pa.int64()),
        ("tid", pa.int64()),
        ("ts", pa.string()),  # torch_npu writes µs as text
        ("dur", pa.float64()),
        ("cat", pa.string()),
        ("id", pa.string()),
        (
            "args",
            pa.struct(
                [
                    ("name", pa.string()),
                    ("labels", pa.string()),
                    (COPY_SIZE, pa.float64()),
                    (COPY_DIRECTION, pa.string()),
                    (TASK_SIZE, pa.float64()),
                    (TASK_TRANSPORT, pa.string()),
                    (TASK_LINK, pa.string()),
                ]
            ),
        ),
    ]
)


def _timestamps(events: pa.Table, also_required: str) -> np.ndarray:
    """The events' ``ts`` (text µs) as floats; any missing (or ``also_required`` missing), or one
    that is not a number, is for the event reader to report."""
    if events.column("ts").null_count or events.column(also_required).null_count:
        raise NeedsEventReader
    try:
        return pc.cast(events.column("ts"), pa.float64()).to_numpy()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise NeedsEventReader from None


def _block_flows(events: pa.Table, category: pa.ChunkedArray, kept: _Kept) -> None:
    """The launch flows of a block (s and f events of the flow categories; ``category``: the events'
    ``cat`` in lower case) into ``kept``."""
    phase = pc.fill_null(events.column("ph"), "")
    is_flow = pc.and_(pc.is_in(phase, pa.array(["s", "f"])), pc.is_in(category, pa.array(FLOW_CATEGORIES)))
    flows = events.filter(is_flow)
    if not flows.num_rows:
        return
    ts = _timestamps(flows, "id")
    is_start = pc.equal(flows.column("ph"), "s").to_numpy()
    in_span = (ts <= kept.span[1]) & (is_start | (ts >= kept.span[0]))
    codes = pc.index_in(category.filter(is_flow), pa.array(FLOW_CATEGORIES)).to_numpy()
    chosen = pa.array(in_span)
    kept.flow_blocks.append(
        pa.table(
            [pa.array(codes[in_span], pa.int64()), flows.column("id").filter(chosen), is_start[in_span], ts[in_span]],
            schema=FLOW_SCHEMA,
        )
    )


def _device_lane_rows(
    events: pa.Table, is_meta: pa.Array, meta: pa.Table, is_device: pa.Array, is_host: pa.Array, kept: _Kept
) -> np.ndarray | None:
    """Per event of a block: whether the M events before it (earlier blocks', then this block's up to
    its row) name its process as a device lane and none as the host's — the event reader's
    ``_Kept._device_lane`` at each event; None when no event of the block is. ``is_meta``: the block's
    M events; ``is_device`` and ``is_host``: which of them name a device lane, the host's process.
    Updates ``kept.device_pids`` with this block's M events."""
    pids = events.column("pid").to_numpy(zero_copy_only=False)
    previous = sorted(kept.device_pids - kept.host_pids)
    lanes = np.isin(pids, previous) if previous else None
    if not len(meta):
        return lanes
    # this block's M events take effect from their own row on: the first that names a pid a device
    # lane turns its later events off, the first that names it the host's turns them on for good
    position = np.flatnonzero(is_meta.to_numpy(zero_copy_only=False))
    device_from: dict = {}
    host_from: dict = {}
    marks = zip(meta.column("pid").to_pylist(), position, is_device.to_pylist(), is_host.to_pylist())
    for pid, at, device, host in marks:  # the block's metadata events (a few), not its events
        if device:
            device_from.setdefault(pid, at)
        if host:
            host_from.setdefault(pid, at)
    kept.device_pids.update(device_from)
    if not device_from and not previous:
        return lanes
    row = np.arange(len(pids))
    since_device = np.zeros(len(pids), dtype=bool) if lanes is None else lanes
    for pid, at in device_from.items():  # a loop over the processes the block names
        since_device |= (pids == pid) & (row > at)
    before_host = ~np.isin(pids, sorted(kept.host_pids))
    for pid, at in host_from.items():
        before_host &= ~((pids == pid) & (row > at))
    return since_device & before_host


def _block_lanes(events: pa.Table, phase: pa.ChunkedArray, kept: _Kept) -> np.ndarray | None:
    """A block's M events into ``kept`` (the host's pids, the processes' names), and per event whether
    its process is a device lane by then (``_device_lane_rows``)."""
    is_meta = pc.fill_null(pc.equal(phase, "M"), False)
    meta = events.filter(is_meta)
    labels = meta.column("args").combine_chunks()
    # each part filled alone: a process_name event has no labels (null), and null or true is null
    has_name = pc.fill_null(
        pc.and_(pc.equal(meta.column("name"), "process_name"), pc.is_valid(labels.field("name"))), False
    )
    has_labels = pc.fill_null(
        pc.and_(pc.equal(meta.column("name"), "process_labels"), pc.is_valid(labels.field("labels"))), False
    )
    process = pc.and_(has_name, pc.is_in(labels.field("name"), pa.array(sorted(HOST_PROCESS_NAMES))))
    cpu = pc.and_(has_labels, pc.equal(labels.field("labels"), "CPU"))
    is_host = pc.or_(pc.fill_null(process, False), pc.fill_null(cpu, False))
    is_device = pc.and_(pc.or_(has_name, has_labels), pc.invert(is_host))
    device_lanes = _device_lane_rows(events, is_meta, meta, is_device, is_host, kept)
    kept.host_pids.update(meta.filter(is_host).column("pid").to_pylist())
    named = meta.filter(has_name)
    kept.process_names.update(
        zip(named.column("pid").to_pylist(), named.column("args").combine_chunks().field("name").to_pylist())
    )
    return device_lanes


def _columnar(path: Path, kept: _Kept) -> None:
    """Host events of a top-level array, a batch at a time through DuckDB's JSON reader: no Python per
    event. Anything the event reader would read differently (missing times, ids that are neither
    integers nor texts) raises NeedsEventReader, and the caller reads the file event by event."""
    span_start, span_end = kept.span
    for events in event_batches(path, _EVENT_SCHEMA):
        phase = events.column("ph")
        device_lanes = _block_lanes(events, phase, kept)
        category = pc.utf8_lower(pc.fill_null(events.column("cat"), ""))
        _block_flows(events, category, kept)
        is_complete = pc.fill_null(pc.equal(phase, "X"), False)
        if device_lanes is not None:
            on_device = pc.and_(
                pa.array(device_lanes), pc.invert(pc.is_in(category, pa.array(sorted(HOST_CATEGORIES))))
            )
            device_complete = pc.and_(is_complete, on_device)
            _block_copies(events, pc.and_(device_complete, pc.equal(events.column("name"), COPY_TASK)), kept)
            _block_hccl_tasks(events, pc.and_(device_complete, block_task_mask(events.column("args"))), kept)
            is_complete = pc.and_(is_complete, pc.invert(on_device))
        complete = events.filter(is_complete)
        start = _timestamps(complete, "dur")
        duration = complete.column("dur").to_numpy()
        overlapping = np.flatnonzero((duration > 0) & ~(start > span_end) & ~(start + duration < span_start))
        room = max(kept.cap - kept.kept(), 0)
        kept.dropped += max(len(overlapping) - room, 0)
        taken = overlapping[:room]
        chosen = complete.take(pa.array(taken))
        if any(chosen.column(c).null_count for c in ("name", "pid", "tid")):
            raise NeedsEventReader
        if not len(taken):
            continue
        kept.row_blocks.append(
            pd.DataFrame(
                {
                    "name": chosen.column("name").to_pandas(),
                    "pid": chosen.column("pid").to_numpy(),
                    "tid": chosen.column("tid").to_numpy(),
                    "start_us": start[taken],
                    "end_us": (start + duration)[taken],
                    "duration_us": duration[taken],
                    "process": pd.Series([None] * len(taken), dtype=object),
                    "category": category.filter(is_complete).take(pa.array(taken)).to_pandas(),
                }
            )
        )


def _block_copies(events: pa.Table, is_copy: pa.Array, kept: _Kept) -> None:
    """The device's memory copies of a block (``is_copy``: X events named COPY_TASK on a device lane)
    into ``kept``, as the event reader takes them."""
    copies = events.filter(is_copy)
    if copies.num_rows:
        kept.copy_blocks.append(copy_rows(copies, _timestamps(copies, "dur"), kept.span))


def _block_hccl_tasks(events: pa.Table, is_task: pa.Array, kept: _Kept) -> None:
    """HCCL's data moves of a block (``is_task``: X events on a device lane whose args name a transport
    and bytes) into ``kept``, as the event reader takes them."""
    tasks = events.filter(is_task)
    if tasks.num_rows:
        kept.hccl_task_blocks.append(hccl_task_rows(tasks, _timestamps(tasks, "dur"), kept.span))


def read_host_events(path: str | Path, span_start_us: float, span_end_us: float, cap: int) -> HostTrace:
    """Host X events of ``path`` overlapping [span_start_us, span_end_us], at most ``cap`` of them."""
    path = Path(path)
    kept = _Kept(span_start_us, span_end_us, cap)
    layout = _prefix(path)
    try:
        if layout != "item":
            raise NeedsEventReader
        _columnar(path, kept)
    except NeedsEventReader:  # from the start, event by event: the reference reader
        kept = _Kept(span_start_us, span_end_us, cap)
        with open_input(path) as handle:
            _streamed(path, handle, kept)
    if kept.not_events:
        raise BadInput(path, f"{kept.not_events} items of the trace are not events (JSON objects)")
    copies = joined_copies(kept.copies, kept.copy_blocks)
    tasks = joined_hccl_tasks(kept.hccl_tasks, kept.hccl_task_blocks)
    return HostTrace(kept.frame(), kept.dropped, path.stat().st_size, kept.launches(), copies, tasks)
