"""trace_view.json of a simulated rank: host Python and CANN lanes, device streams, HCCL lanes,
Overlap Analysis, flows — with the exporter's quirks (top-level array, ``ts`` as a string).

Every per-event line is built column-wise in Arrow and streamed out in batches; no Python loop
runs per event.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from npuprof.synth.text_export import us_text
from npuprof.synth.timeline import HOST_LEAD_NS, RankTimeline

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


def _stall_events(kind: str, start: int, end: int, pid: int, cann: int) -> list[dict]:
    """The host events of one planted stall: a blocking sync (``device_idle_bubble``), the
    dataloader fetching a batch, a device memory allocation, or a garbage collection (the Python GC
    process)."""
    ts, dur = us_text(np.array([start]))[0].as_py(), round((end - start) / 1000, 3)
    op_args = {"Sequence number": -1, "Fwd thread id": 0}

    def op(name: str, category: str = "cpu_op", process: int = pid) -> dict:
        return {
            "ph": "X",
            "name": name,
            "pid": process,
            "tid": pid,
            "ts": ts,
            "dur": dur,
            "cat": category,
            "args": op_args,
        }

    if kind == "dataloader_stall":
        return [
            op("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"),
            op("torch/utils/data/dataloader.py(631): __next__", "python_function"),
        ]
    if kind == "allocation_heavy":  # the caching allocator out of blocks: a device malloc under an empty
        malloc = {"Thread Id": pid, "Mode": "ACL_RTS", "level": "acl", "id": "aclrtMalloc", "item_id": "0"}
        return [
            op("aten::empty"),
            {"name": "AscendCL@aclrtMalloc", "pid": cann, "tid": pid, "ts": ts, "dur": dur, "ph": "X", "args": malloc},
        ]
    if kind == "gc_pause":
        return [{"ph": "X", "name": "GC", "pid": pid + GC_PID_OFFSET, "tid": pid, "ts": ts, "dur": dur, "args": {}}]
    sync = {"Thread Id": pid, "Mode": "ACL_RTS", "level": "acl", "id": "aclrtSynchronizeStream", "item_id": "0"}
    return [
        op("aten::item"),
        op("aten::_local_scalar_dense"),
        {
            "name": "AscendCL@aclrtSynchronizeStream",
            "pid": cann,
            "tid": pid,
            "ts": ts,
            "dur": dur,
            "ph": "X",
            "args": {**sync, "connection_id": 0},
        },
    ]


def write_trace_view(
    path: Path,
    t: RankTimeline,
    names: np.ndarray,
    step_ids: list[int],
    device: int,
    host_stalls: list[tuple[int, int, str]],
) -> int:
    """Write trace_view.json for one rank; ``host_stalls`` are the (start_ns, end_ns, fault kind)
    host stalls planted by faults."""
    pid = 2_000_000 + t.rank
    hw, cann, hccl, overlap, freq = (
        packed_pid(pid, _SORT[k], device)
        for k in ("Ascend Hardware", "CANN", "HCCL", "Overlap Analysis", "AI Core Freq")
    )
    writer = JsonArrayWriter(path)
    meta = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": "CPU"}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": 0}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": pid, "args": {"name": f"Thread {pid}"}},
        {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": pid, "args": {"sort_index": pid}},
        {"ph": "M", "name": "process_name", "pid": pid + GC_PID_OFFSET, "tid": 0, "args": {"name": "Python GC"}},
        {"ph": "M", "name": "process_labels", "pid": pid + GC_PID_OFFSET, "tid": 0, "args": {"labels": "CPU"}},
        {"ph": "M", "name": "process_name", "pid": cann, "tid": 0, "args": {"name": "CANN"}},
        {"ph": "M", "name": "process_labels", "pid": cann, "tid": 0, "args": {"labels": "CPU"}},
        {"ph": "M", "name": "thread_name", "pid": cann, "tid": pid, "args": {"name": f"Thread {pid}"}},
        {"ph": "M", "name": "process_name", "pid": hw, "tid": 0, "args": {"name": "Ascend Hardware"}},
        {"ph": "M", "name": "process_labels", "pid": hw, "tid": 0, "args": {"labels": "NPU"}},
        {
            "ph": "M",
            "name": "process_sort_index",
            "pid": hw,
            "tid": 0,
            "args": {"sort_index": _SORT["Ascend Hardware"]},
        },
        {"ph": "M", "name": "thread_name", "pid": hw, "tid": 2, "args": {"name": "Stream 2"}},
        {"ph": "M", "name": "thread_sort_index", "pid": hw, "tid": 2, "args": {"sort_index": 2}},
        {"ph": "M", "name": "process_name", "pid": hccl, "tid": 0, "args": {"name": "HCCL"}},
        {"ph": "M", "name": "process_labels", "pid": hccl, "tid": 0, "args": {"labels": "NPU"}},
        {"ph": "M", "name": "thread_name", "pid": hccl, "tid": 0, "args": {"name": "Group 0 Communication"}},
        {"ph": "M", "name": "thread_sort_index", "pid": hccl, "tid": 0, "args": {"sort_index": 0}},
        {"ph": "M", "name": "thread_name", "pid": hccl, "tid": 1, "args": {"name": "Plane 0"}},
        {"ph": "M", "name": "process_name", "pid": overlap, "tid": 0, "args": {"name": "Overlap Analysis"}},
        {"ph": "M", "name": "process_labels", "pid": overlap, "tid": 0, "args": {"labels": "NPU"}},
        *[
            {"ph": "M", "name": "thread_name", "pid": overlap, "tid": i, "args": {"name": n}}
            for i, n in enumerate(("Computing", "Communication", "Communication(Not Overlapped)", "Free"))
        ],
        {"ph": "M", "name": "process_name", "pid": freq, "tid": 0, "args": {"name": "AI Core Freq"}},
        *[
            {"name": "AI Core Freq", "ts": ts.as_py(), "pid": freq, "tid": 0, "args": {"MHz": mhz}, "ph": "C"}
            for ts, (_, mhz) in zip(us_text(np.array([ns for ns, _ in t.aicore_freq])), t.aicore_freq)
        ],
    ]
    writer.write_objects(meta)
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
    writer.write_objects(steps)
    writer.write_objects([e for start, end, kind in host_stalls for e in _stall_events(kind, start, end, pid, cann)])

    n = len(t.start_ns)
    types = np.array([k.type for k in t.kernels], dtype=object)[t.kernel_id]
    cores = np.array([k.core for k in t.kernels], dtype=object)[t.kernel_id]
    is_comm = t.collective >= 0
    device_ts = us_text(t.start_ns)
    for lo in range(0, n, BATCH):
        hi = min(lo + BATCH, n)
        sl = slice(lo, hi)
        m = hi - lo
        ts = device_ts.slice(lo, m)
        dur = pa.array(np.round(t.duration_ns[sl] / 1000, 3)).cast(pa.string())
        name = _q(pa.array(names[sl], type=pa.string()))
        conn = pa.array(np.arange(lo, hi) + 1000).cast(pa.string())
        flow_id = pa.array(t.start_ns[sl]).cast(pa.string())
        host_ts = us_text(t.start_ns[sl] - t.launch_lead_ns[sl])
        comm = pa.array(is_comm[sl])
        # host op that launched the kernel, and the async_npu flow from it to the device
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
        lane_pid = pc.if_else(comm, pa.scalar(str(hccl)), pa.scalar(str(hw)))
        lane_tid = pc.if_else(comm, pa.scalar("0"), pa.scalar("2"))
        flow_f = _join(
            '{"ph": "f", "bp": "e", "name": "torch_to_npu", "id": ',
            flow_id,
            ', "pid": ',
            lane_pid,
            ', "tid": ',
            lane_tid,
            ', "ts": "',
            ts,
            '", "cat": "async_npu"}',
        )
        device = _join(
            '{"name": ',
            name,
            f', "pid": {hw}, "tid": 2, "ts": "',
            ts,
            '", "dur": ',
            dur,
            ', "args": {"Model Id": 4294967295, "Task Type": "',
            pa.array(cores[sl], type=pa.string()),
            '", "Physic Stream Id": 2, "Task Id": ',
            pa.array(np.arange(lo, hi) + 30_000).cast(pa.string()),
            ', "Batch Id": 0, "Subtask Id": 4294967295, "connection_id": ',
            conn,
            '}, "ph": "X"}',
        )
        op_lane = _join(
            '{"name": ',
            name,
            f', "pid": {hccl}, "tid": 0, "ts": "',
            ts,
            '", "dur": ',
            dur,
            ', "args": {"connection_id": ',
            conn,
            ', "model id": 4294967295, "data_type": "BFP16", "alg_type": "MESH-RING", "count": 1048576}, "ph": "X"}',
        )
        plane = _join(
            '{"name": "Memcpy", "pid": ',
            str(hccl),
            ', "tid": 1, "ts": "',
            ts,
            '", "dur": ',
            dur,
            ', "args": {"notify_id": "0", "stream id": 4, "task id": 1, "context id": 0, "task type": "Memcpy", '
            '"src rank": 0, "dst rank": 1, "transport type": "SDMA", "size(Byte)": 1048576, "data type": "BFP16", '
            '"link type": "HCCS", "model id": 4294967295}, "ph": "X"}',
        )
        overlap_lane = _join(
            '{"name": ',
            pc.if_else(comm, pa.scalar('"Communication"'), pa.scalar('"Computing"')),
            f', "pid": {overlap}, "tid": ',
            pc.if_else(comm, pa.scalar("1"), pa.scalar("0")),
            ', "ts": "',
            ts,
            '", "dur": ',
            dur,
            ', "ph": "X"}',
        )
        comm_rows = pa.array(np.flatnonzero(is_comm[sl]))
        writer.write(host)
        writer.write(flow_s)
        writer.write(flow_f)
        writer.write(pc.if_else(comm, op_lane, device))
        writer.write(plane.take(comm_rows))
        writer.write(overlap_lane)
        # Free: idle gaps of the device larger than 20 µs
        gap = t.wait_ns[sl]
        free_rows = np.flatnonzero(gap > 20_000)
        if free_rows.size:
            free_ts = us_text(t.start_ns[sl][free_rows] - gap[free_rows])
            free_dur = pa.array(np.round(gap[free_rows] / 1000, 3)).cast(pa.string())
            writer.write(
                _join(
                    f'{{"name": "Free", "pid": {overlap}, "tid": 3, "ts": "',
                    free_ts,
                    '", "dur": ',
                    free_dur,
                    ', "ph": "X"}',
                )
            )
    writer.close()
    return n
