"""trace_view.json of a simulated rank: host Python and CANN lanes, device streams, HCCL lanes,
Overlap Analysis, flows — with the exporter's quirks (top-level array, ``ts`` as a string).

Every per-event line is built column-wise in Arrow and streamed out in batches; no Python loop
runs per event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from npuprof.synth.hccl_planes import PlaneTasks
from npuprof.synth.host_side import COPY_GBPS, DEVICE_COPY, STALL_SPANS, host_span
from npuprof.synth.text_export import us_text
from npuprof.synth.timeline import HOST_LEAD_NS, RankTimeline
from npuprof.synth.vision import host_scope_spans

BATCH = 100_000
GC_PID_OFFSET = 500_000  # the Python GC process's pid, apart from the Python process's
_SORT = {"Ascend Hardware": 13, "CANN": 12, "HCCL": 15, "Overlap Analysis": 24, "AI Core Freq": 14}


def packed_pid(pid: int, sort_index: int, device: int) -> int:
    """torch_npu's device-lane pid: (pid << 10) | (sort_index << 5) | device_id."""
    return (pid << 10) | (sort_index << 5) | device


def _q(values) -> pa.Array:
    """JSON string literals of an Arrow string array (names here need no escaping beyond quotes)."""
    return pc.binary_join_element_wise('"', values, '"', "")


class JsonArrayWriter:
    """Writes a top-level JSON array of pre-rendered objects, batch by batch."""

    def __init__(self, path: Path) -> None:
        self.handle = open(path, "wb")
        self.handle.write(b"[\n")
        self.first = True

    def write(self, lines: pa.Array) -> None:
        if len(lines) == 0:
            return
        joined = pc.binary_join_element_wise(",\n", lines, "")
        joined = joined.combine_chunks() if isinstance(joined, pa.ChunkedArray) else joined
        offsets = np.frombuffer(joined.buffers()[1], dtype=np.int32)[joined.offset : joined.offset + len(joined) + 1]
        start = offsets[0] + (2 if self.first else 0)  # no comma before the first object
        self.handle.write(memoryview(joined.buffers()[2])[start : offsets[-1]])
        self.first = False

    def write_objects(self, objects: list[dict]) -> None:
        self.write(pa.array([json.dumps(o) for o in objects]))

    def close(self) -> None:
        self.handle.write(b"\n]\n")
        self.handle.close()


def _join(*parts) -> pa.Array:
    return pc.binary_join_element_wise(*parts, "")


def _host_op(name: str, start: int, end: int, pid: int, category: str = "cpu_op") -> dict:
    """A framework op on the host's Python thread, [start, end) in ns."""
    ts, dur = us_text(np.array([start]))[0].as_py(), round((end - start) / 1000, 3)
    args = {"Sequence number": -1, "Fwd thread id": 0}
    return {"ph": "X", "name": name, "pid": pid, "tid": pid, "ts": ts, "dur": dur, "cat": category, "args": args}


def _stall_events(kind: str, start: int, end: int, lanes: _Lanes) -> list[dict]:
    """The events of one planted gap: the host's in a blocking sync (``device_idle_bubble``), the
    dataloader fetching a batch, a device memory allocation, an operator compile, or a garbage collection
    (the Python GC process); for a device copy, the copy on the device's stream and its launch before it."""
    pid, cann = lanes.pid, lanes.cann
    device = [] if kind != DEVICE_COPY else [_device_copy(start, end, lanes.hw)]
    start, end = host_span(kind, start, end)
    ts, dur = us_text(np.array([start]))[0].as_py(), round((end - start) / 1000, 3)
    if kind == "gc_pause":
        return [{"ph": "X", "name": "GC", "pid": pid + GC_PID_OFFSET, "tid": pid, "ts": ts, "dur": dur, "args": {}}]
    framework, calls = STALL_SPANS.get(kind, STALL_SPANS["device_idle_bubble"])
    events = [_host_op(name, start, end, pid, category) for name, category in framework]
    for call, extra in calls:
        args = {"Thread Id": pid, "Mode": "ACL_RTS", "level": "acl", "id": call, "item_id": "0", **extra}
        events.append(
            {"name": f"AscendCL@{call}", "pid": cann, "tid": pid, "ts": ts, "dur": dur, "ph": "X", "args": args}
        )
    return events + device


def _device_copy(start: int, end: int, hw: int) -> dict:
    """A host-to-device copy on the compute stream, as CANN writes it on the Ascend Hardware lane."""
    args = {
        "Model Id": 4294967295,
        "Task Type": "PCIE_DMA_SQE",
        "Physic Stream Id": 2,
        "Task Id": 29_999,
        "Batch Id": 0,
        "Subtask Id": 4294967295,
        "connection_id": 0,
        "data size(Byte)": round((end - start) * COPY_GBPS),  # ns × GB/s = bytes
        "memcpy direction": "host to device",
    }
    ts = us_text(np.array([start]))[0].as_py()
    return {
        "name": "MEMCPY_ASYNC",
        "pid": hw,
        "tid": 2,
        "ts": ts,
        "dur": round((end - start) / 1000, 3),
        "ph": "X",
        "args": args,
    }


@dataclass(frozen=True)
class _Lanes:
    """The pids of one rank's trace lanes: the Python process and torch_npu's packed device lanes."""

    pid: int
    hw: int
    cann: int
    hccl: int
    overlap: int
    freq: int

    @classmethod
    def of(cls, rank: int, device: int) -> _Lanes:
        pid = 2_000_000 + rank
        kinds = ("Ascend Hardware", "CANN", "HCCL", "Overlap Analysis", "AI Core Freq")
        return cls(pid, *(packed_pid(pid, _SORT[k], device) for k in kinds))


def _process(name: str, pid: int, labels: str | None = None) -> list[dict]:
    named = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}]
    return named + (
        [{"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": labels}}] if labels else []
    )


def _thread(name: str, pid: int, tid: int, sort_index: int | None = None) -> list[dict]:
    named = [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}]
    if sort_index is None:
        return named
    return named + [
        {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": sort_index}}
    ]


def _process_sort(pid: int, sort_index: int) -> list[dict]:
    return [{"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": sort_index}}]


def _metadata_events(t: RankTimeline, lanes: _Lanes, planes: int) -> list[dict]:
    """The M events naming every lane (``planes`` HCCL Plane lanes), and the AI Core frequency counter
    samples."""
    pid = lanes.pid
    overlap_threads = ("Computing", "Communication", "Communication(Not Overlapped)", "Free")
    freq_ts = us_text(np.array([ns for ns, _ in t.aicore_freq]))
    return [
        *_process("Python", pid, "CPU"),
        *_process_sort(pid, 0),
        *_thread(f"Thread {pid}", pid, pid, pid),
        *_process("Python GC", pid + GC_PID_OFFSET, "CPU"),
        *_process("CANN", lanes.cann, "CPU"),
        *_thread(f"Thread {pid}", lanes.cann, pid),
        *_process("Ascend Hardware", lanes.hw, "NPU"),
        *_process_sort(lanes.hw, _SORT["Ascend Hardware"]),
        *_thread("Stream 2", lanes.hw, 2, 2),
        *_process("HCCL", lanes.hccl, "NPU"),
        *_thread("Group 0 Communication", lanes.hccl, 0, 0),
        *(event for plane in range(planes) for event in _thread(f"Plane {plane}", lanes.hccl, plane + 1)),
        *_process("Overlap Analysis", lanes.overlap, "NPU"),
        *(event for i, name in enumerate(overlap_threads) for event in _thread(name, lanes.overlap, i)),
        *_process("AI Core Freq", lanes.freq),
        *[
            {"name": "AI Core Freq", "ts": ts.as_py(), "pid": lanes.freq, "tid": 0, "args": {"MHz": mhz}, "ph": "C"}
            for ts, (_, mhz) in zip(freq_ts, t.aicore_freq)
        ],
    ]


def _step_events(t: RankTimeline, step_ids: list[int], pid: int) -> list[dict]:
    """One ProfilerStep#<id> host span per captured step, from just before its first launch."""
    steps = []
    for ordinal, step_id in enumerate(step_ids):
        in_step = np.flatnonzero(t.step == ordinal)
        if in_step.size:
            start = int(t.step_start_ns[ordinal]) - HOST_LEAD_NS
            end = int(t.start_ns[in_step[-1]] + t.duration_ns[in_step[-1]])
            steps.append(
                {
                    "ph": "X",
                    "name": f"ProfilerStep#{step_id}",
                    "pid": pid,
                    "tid": pid,
                    "ts": us_text(np.array([start]))[0].as_py(),
                    "dur": round((end - start) / 1000, 3),
                    "cat": "cpu_op",
                    "args": {"Sequence number": -1, "Fwd thread id": 0},
                }
            )
    return steps


@dataclass(frozen=True)
class _Batch:
    """The columns every line of one batch of events [lo, hi) is built from."""

    lo: int
    hi: int
    ts: pa.Array  # device start, µs text
    dur: pa.Array
    name: pa.Array  # quoted
    conn: pa.Array
    comm: pa.Array  # bool: a communication op

    @classmethod
    def of(cls, t: RankTimeline, names: np.ndarray, device_ts: pa.Array, is_comm: np.ndarray, lo: int, hi: int):
        sl = slice(lo, hi)
        return cls(
            lo,
            hi,
            device_ts.slice(lo, hi - lo),
            pa.array(np.round(t.duration_ns[sl] / 1000, 3)).cast(pa.string()),
            _q(pa.array(names[sl], type=pa.string())),
            pa.array(np.arange(lo, hi) + 1000).cast(pa.string()),
            pa.array(is_comm[sl]),
        )


def _launch_events(t: RankTimeline, b: _Batch, types: np.ndarray, lanes: _Lanes) -> list[pa.Array]:
    """The host op that launched each kernel, and the async_npu flow from it to the device lane."""
    sl, pid = slice(b.lo, b.hi), lanes.pid
    flow_id = pa.array(t.start_ns[sl]).cast(pa.string())
    host_ts = us_text(t.start_ns[sl] - t.launch_lead_ns[sl])
    host = _join(
        '{"ph": "X", "name": "aten::',
        pa.array(types[sl], type=pa.string()),
        f'", "pid": {pid}, "tid": {pid}, "ts": "',
        host_ts,
        '", "dur": 6.5, "cat": "cpu_op", "args": {"Sequence number": -1, "Fwd thread id": 0}}',
    )
    flow_s = _join(
        '{"ph": "s", "bp": "e", "name": "torch_to_npu", "id": ',
        flow_id,
        f', "pid": {pid}, "tid": {pid}, "ts": "',
        host_ts,
        '", "cat": "async_npu"}',
    )
    flow_f = _join(
        '{"ph": "f", "bp": "e", "name": "torch_to_npu", "id": ',
        flow_id,
        ', "pid": ',
        pc.if_else(b.comm, pa.scalar(str(lanes.hccl)), pa.scalar(str(lanes.hw))),
        ', "tid": ',
        pc.if_else(b.comm, pa.scalar("0"), pa.scalar("2")),
        ', "ts": "',
        b.ts,
        '", "cat": "async_npu"}',
    )
    return [host, flow_s, flow_f]


def _task_events(b: _Batch, cores: np.ndarray, lanes: _Lanes) -> pa.Array:
    """Each event on its device lane: a compute task on the stream, an HCCL op on the group lane."""
    device = _join(
        '{"name": ',
        b.name,
        f', "pid": {lanes.hw}, "tid": 2, "ts": "',
        b.ts,
        '", "dur": ',
        b.dur,
        ', "args": {"Model Id": 4294967295, "Task Type": "',
        pa.array(cores[b.lo : b.hi], type=pa.string()),
        '", "Physic Stream Id": 2, "Task Id": ',
        pa.array(np.arange(b.lo, b.hi) + 30_000).cast(pa.string()),
        ', "Batch Id": 0, "Subtask Id": 4294967295, "connection_id": ',
        b.conn,
        '}, "ph": "X"}',
    )
    op_lane = _join(
        '{"name": ',
        b.name,
        f', "pid": {lanes.hccl}, "tid": 0, "ts": "',
        b.ts,
        '", "dur": ',
        b.dur,
        ', "args": {"connection_id": ',
        b.conn,
        ', "model id": 4294967295, "data_type": "BFP16", "alg_type": "MESH-RING", "count": 1048576}, "ph": "X"}',
    )
    return pc.if_else(b.comm, op_lane, device)


def _scope_events(t: RankTimeline, pid: int) -> list[dict]:
    """The framework ops the host launched kernels inside (``vision.host_scope_spans``) as cpu_op spans."""
    return [_host_op(name, begin, finish, pid) for name, begin, finish in host_scope_spans(t)]


def _plane_events(planes: PlaneTasks, lo: int, hi: int, lanes: _Lanes) -> pa.Array:
    """The data moves (HCCL_TASKS' source) of the ops among events [lo, hi) on their Plane lanes."""
    first, last = np.searchsorted(planes.event, [lo, hi])
    chosen = slice(first, last)
    rdma = pa.array(planes.rdma[chosen])
    task = pc.if_else(rdma, pa.scalar("RDMASend"), pa.scalar("Memcpy"))
    return _join(
        '{"name": "',
        task,
        f'", "pid": {lanes.hccl}, "tid": ',
        pa.array(planes.plane[chosen] + 1).cast(pa.string()),
        ', "ts": "',
        us_text(planes.start_ns[chosen]),
        '", "dur": ',
        pa.array(np.round(planes.duration_ns[chosen] / 1000, 3)).cast(pa.string()),
        ', "args": {"notify_id": "0", "stream id": 4, "task id": 1, "context id": 0, "task type": "',
        task,
        '", "src rank": 0, "dst rank": 1, "transport type": "',
        pc.if_else(rdma, pa.scalar("RDMA"), pa.scalar("SDMA")),
        '", "size(Byte)": ',
        pa.array(planes.bytes[chosen]).cast(pa.string()),
        ', "data type": "BFP16", "link type": "',
        pc.if_else(rdma, pa.scalar("ROCE"), pa.scalar("HCCS")),
        '", "model id": 4294967295}, "ph": "X"}',
    )


def _overlap_events(b: _Batch, lanes: _Lanes) -> pa.Array:
    """The Overlap Analysis lane: each event as Computing or Communication."""
    return _join(
        '{"name": ',
        pc.if_else(b.comm, pa.scalar('"Communication"'), pa.scalar('"Computing"')),
        f', "pid": {lanes.overlap}, "tid": ',
        pc.if_else(b.comm, pa.scalar("1"), pa.scalar("0")),
        ', "ts": "',
        b.ts,
        '", "dur": ',
        b.dur,
        ', "ph": "X"}',
    )


def _free_events(t: RankTimeline, b: _Batch, lanes: _Lanes) -> pa.Array | None:
    """Free: the device's idle gaps larger than 20 µs, on the Overlap Analysis lane."""
    gap = t.wait_ns[b.lo : b.hi]
    free_rows = np.flatnonzero(gap > 20_000)
    if not free_rows.size:
        return None
    return _join(
        f'{{"name": "Free", "pid": {lanes.overlap}, "tid": 3, "ts": "',
        us_text(t.start_ns[b.lo : b.hi][free_rows] - gap[free_rows]),
        '", "dur": ',
        pa.array(np.round(gap[free_rows] / 1000, 3)).cast(pa.string()),
        ', "ph": "X"}',
    )


def write_trace_view(
    path: Path,
    t: RankTimeline,
    names: np.ndarray,
    step_ids: list[int],
    device: int,
    host_stalls: list[tuple[int, int, str]],
    planes: PlaneTasks,
) -> int:
    """Write trace_view.json for one rank; ``host_stalls`` are the (start_ns, end_ns, fault kind)
    host stalls planted by faults, ``planes`` the data moves of its communication ops."""
    lanes = _Lanes.of(t.rank, device)
    writer = JsonArrayWriter(path)
    writer.write_objects(_metadata_events(t, lanes, int(planes.plane.max(initial=0)) + 1))
    writer.write_objects(_step_events(t, step_ids, lanes.pid))
    writer.write_objects([e for start, end, kind in host_stalls for e in _stall_events(kind, start, end, lanes)])
    writer.write_objects(_scope_events(t, lanes.pid))
    n = len(t.start_ns)
    types = np.array([k.type for k in t.kernels], dtype=object)[t.kernel_id]
    cores = np.array([k.core for k in t.kernels], dtype=object)[t.kernel_id]
    is_comm = t.collective >= 0
    device_ts = us_text(t.start_ns)
    for lo in range(0, n, BATCH):
        batch = _Batch.of(t, names, device_ts, is_comm, lo, min(lo + BATCH, n))
        for lines in (
            *_launch_events(t, batch, types, lanes),
            _task_events(batch, cores, lanes),
            _plane_events(planes, lo, batch.hi, lanes),
            _overlap_events(batch, lanes),
        ):
            writer.write(lines)
        free = _free_events(t, batch, lanes)
        if free is not None:
            writer.write(free)
    writer.close()
    return n
