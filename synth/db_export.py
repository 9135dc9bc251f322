"""Write a simulated rank as torch_npu db export: ``ascend_pytorch_profiler_<rank>.db`` (schema
1.0.0, as in the public samples) and ``analysis.db`` (shared/spec/input-formats.md §3).

The same timeline, names and PMU values as the text export, so the two exports of one root agree.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np

from npuprof.synth.groups import GroupInstance
from npuprof.synth.host_side import DEVICE_COPY, STALL_SPANS, host_span
from npuprof.synth.text_export import STEP_TRACE_COLUMNS, pmu_values
from npuprof.synth.timeline import RankTimeline
from npuprof.synth.vision import host_scope_spans

CARDS_PER_HOST = 8

_SCHEMA = """
CREATE TABLE META_DATA (name TEXT, value TEXT);
CREATE TABLE STRING_IDS (id INTEGER PRIMARY KEY, value TEXT);
CREATE TABLE NPU_INFO (id INTEGER, name TEXT);
CREATE TABLE HOST_INFO (hostUid TEXT, hostName TEXT);
CREATE TABLE RANK_DEVICE_MAP (rankId INTEGER, deviceId INTEGER);
CREATE TABLE SESSION_TIME_INFO (startTimeNs INTEGER, endTimeNs INTEGER);
CREATE TABLE STEP_TIME (id INTEGER, startNs INTEGER, endNs INTEGER);
CREATE TABLE AICORE_FREQ (deviceId INTEGER, timestampNs NUMERIC, freq INTEGER);
CREATE TABLE ENUM_API_TYPE (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE ENUM_HCCL_DATA_TYPE (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE TASK (startNs INTEGER, endNs INTEGER, deviceId INTEGER, connectionId INTEGER, globalTaskId INTEGER,
                   globalPid INTEGER, taskType INTEGER, contextId INTEGER, streamId INTEGER, taskId INTEGER,
                   modelId INTEGER);
CREATE TABLE COMPUTE_TASK_INFO (name INTEGER, globalTaskId INTEGER PRIMARY KEY, blockDim INTEGER, mixBlockDim INTEGER,
                   taskType INTEGER, opType INTEGER, inputFormats INTEGER, inputDataTypes INTEGER,
                   inputShapes INTEGER, outputFormats INTEGER,
                   outputDataTypes INTEGER, outputShapes INTEGER, attrInfo INTEGER);
CREATE TABLE TASK_PMU_INFO (globalTaskId INTEGER, name INTEGER, value NUMERIC);
CREATE TABLE COMMUNICATION_OP (opName INTEGER, startNs INTEGER, endNs INTEGER, connectionId INTEGER, groupName INTEGER,
                   opId INTEGER PRIMARY KEY, relay INTEGER, retry INTEGER, dataType INTEGER, algType INTEGER,
                   count NUMERIC,
                   opType INTEGER);
CREATE TABLE CANN_API (startNs INTEGER, endNs INTEGER, type INTEGER, globalTid INTEGER,
    connectionId INTEGER PRIMARY KEY,
                   name INTEGER);
CREATE TABLE PYTORCH_API (startNs TEXT, endNs TEXT, globalTid INTEGER, connectionId INTEGER, name INTEGER,
                   sequenceNumber INTEGER, fwdThreadId INTEGER, inputDtypes INTEGER, inputShapes INTEGER,
                   callchainId INTEGER, type INTEGER);
"""
_HCCL_DATA_TYPES = [
    "INT8",
    "INT16",
    "INT32",
    "FP16",
    "FP32",
    "INT64",
    "UINT64",
    "UINT8",
    "UINT16",
    "UINT32",
    "FP64",
    "BFP16",
    "INT128",
]
_PMU_METRICS = (
    "aic_total_time",
    "aiv_total_time",
    "aic_mac_time",
    "aic_fixpipe_time",
    "aic_mte1_time",
    "aic_mte2_time",
    "aic_scalar_time",
    "aiv_vec_time",
    "aiv_mte2_time",
    "aiv_mte3_time",
    "aiv_scalar_time",
    "aic_total_cycles",
    "aiv_total_cycles",
)


class _Strings:
    """STRING_IDS: one id per distinct text."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        if text not in self.ids:
            self.ids[text] = len(self.ids) + 1
        return self.ids[text]


def device_of(rank: int) -> int:
    """The card a rank runs on: 8 cards per host, ranks filling hosts in order."""
    return rank % CARDS_PER_HOST


def _insert_capture_facts(
    con: sqlite3.Connection, t: RankTimeline, step_ids: list[int], metadata: dict, host: str | None
) -> None:
    """META_DATA, the device and host, the AI Core clock, the session and step spans, the enums."""
    meta = [
        ("SCHEMA_VERSION", "1.0.0"),
        ("SCHEMA_VERSION_MAJOR", "1"),
        ("SCHEMA_VERSION_MINOR", "0"),
        ("SCHEMA_VERSION_MICRO", "0"),
        ("ENV_VARIABLES", json.dumps(metadata["ENV_VARIABLES"])),
        ("distributed_args", json.dumps(metadata["distributed_args"])),
        ("parallel_group_info", json.dumps(metadata["parallel_group_info"])),
    ]
    con.executemany("INSERT INTO META_DATA VALUES (?, ?)", meta)
    con.execute("INSERT INTO NPU_INFO VALUES (?, 'Ascend910B')", (t.rank,))
    con.execute("INSERT INTO HOST_INFO VALUES (?, ?)", (f"{1000 + t.rank}", host or "synth-host"))
    con.execute("INSERT INTO RANK_DEVICE_MAP VALUES (?, ?)", (t.rank, device_of(t.rank)))
    con.executemany("INSERT INTO AICORE_FREQ VALUES (?, ?, ?)", [(t.rank, ns, round(mhz)) for ns, mhz in t.aicore_freq])
    end = t.start_ns + t.duration_ns
    con.execute(
        "INSERT INTO SESSION_TIME_INFO VALUES (?, ?)", (int(t.start_ns[0]) - 1_000_000, int(end.max()) + 1_000_000)
    )
    present = sorted(set(np.unique(t.step).tolist()))
    con.executemany(
        "INSERT INTO STEP_TIME VALUES (?, ?, ?)",
        [
            (
                step_ids[s],
                int(t.step_start_ns[s] if s != present[0] else min(t.step_start_ns[s], t.start_ns[0])),
                int(max(t.step_end_ns[s], end[t.step == s].max())),
            )
            for s in present
        ],
    )
    con.executemany(
        "INSERT INTO ENUM_API_TYPE VALUES (?, ?)",
        [(5000, "runtime"), (5500, "hccl"), (10000, "node"), (15000, "model"), (20000, "acl")],
    )
    con.executemany(
        "INSERT INTO ENUM_HCCL_DATA_TYPE VALUES (?, ?)",
        list(enumerate(_HCCL_DATA_TYPES)) + [(65534, "N/A"), (65535, "INVALID_TYPE")],
    )


def _kernel_strings(kernels: list, strings: _Strings) -> tuple[list[int], list[int], list[int], list[tuple]]:
    """Each kernel's name, core, type and six shape / format / dtype attributes as STRING_IDS ids."""
    k_name = [strings(k.name) for k in kernels]
    k_core = [strings(k.core) for k in kernels]
    k_type = [strings(k.type) for k in kernels]
    k_attrs = [
        tuple(
            strings(v)
            for v in (
                k.input_formats,
                k.input_dtypes,
                f'"{k.input_shapes}"',
                k.output_formats,
                k.output_dtypes,
                f'"{k.output_shapes}"',
            )
        )
        for k in kernels
    ]
    return k_name, k_core, k_type, k_attrs


def _insert_compute_tasks(
    con: sqlite3.Connection, t: RankTimeline, rows: np.ndarray, connection: np.ndarray, strings: _Strings
) -> list[int]:
    """TASK, COMPUTE_TASK_INFO and TASK_PMU_INFO of the compute tasks (globalTaskId = event index);
    returns each kernel's type string id."""
    kernels, kid, end = t.kernels, t.kernel_id, t.start_ns + t.duration_ns
    k_name, k_core, k_type, k_attrs = _kernel_strings(kernels, strings)
    con.executemany(
        "INSERT INTO TASK VALUES (?, ?, ?, ?, ?, 0, ?, 4294967295, 2, ?, 4294967295)",
        zip(
            t.start_ns[rows].tolist(),
            end[rows].tolist(),
            [t.rank] * len(rows),
            connection[rows].tolist(),
            rows.tolist(),
            [k_core[k] for k in kid[rows].tolist()],
            (rows + 30_000).tolist(),
        ),
    )
    con.executemany(
        "INSERT INTO COMPUTE_TASK_INFO VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)",
        (
            (k_name[k], g, kernels[k].block_dim, kernels[k].mix_block_dim, k_core[k], k_type[k], *k_attrs[k])
            for g, k in zip(rows.tolist(), kid[rows].tolist())
        ),
    )
    pmu = pmu_values(t)
    with_pmu = rows[pmu["has_pmu"][rows]]
    for metric in _PMU_METRICS:
        scale = 1.0 if metric.endswith("cycles") else 1000.0  # the db stores times in ns
        metric_id = strings(metric)
        con.executemany(
            "INSERT INTO TASK_PMU_INFO VALUES (?, ?, ?)",
            zip(with_pmu.tolist(), [metric_id] * len(with_pmu), (pmu[metric][with_pmu] * scale).round(3).tolist()),
        )
    return k_type


def _insert_communication_ops(
    con: sqlite3.Connection,
    t: RankTimeline,
    rows: np.ndarray,
    names: np.ndarray,
    groups: list[GroupInstance | None],
    connection: np.ndarray,
    strings: _Strings,
    k_type: list[int],
) -> None:
    """COMMUNICATION_OP of the HCCL ops (launched through CANN_API with the same connectionId)."""
    end, kid = t.start_ns + t.duration_ns, t.kernel_id
    data_type = _HCCL_DATA_TYPES.index("BFP16")
    con.executemany(
        "INSERT INTO COMMUNICATION_OP VALUES (?, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?, ?)",
        (
            (
                strings(names[i]),
                int(t.start_ns[i]),
                int(end[i]),
                int(connection[i]),
                strings(groups[i].key),
                int(i),
                data_type,
                strings("MESH-RING"),
                int(max(t.kernels[kid[i]].transfer_mb, 0.001) * 1e6 / 2),
                k_type[kid[i]],
            )
            for i in rows.tolist()
        ),
    )


def _insert_cann_api(
    con: sqlite3.Connection, t: RankTimeline, comm: np.ndarray, connection: np.ndarray, strings: _Strings
) -> None:
    """CANN_API: the host launch of every event, an hccl call for a communication op, else a node launch."""
    launch = t.start_ns - t.launch_lead_ns
    con.executemany(
        "INSERT INTO CANN_API VALUES (?, ?, ?, ?, ?, ?)",
        zip(
            launch.tolist(),
            (launch + 6_500).tolist(),
            np.where(comm, 5500, 10000).tolist(),
            [(2_000_000 + t.rank) << 32 | (2_000_000 + t.rank)] * len(launch),
            connection.tolist(),
            [strings("HcclAllReduce") if c else strings("launch") for c in comm.tolist()],
        ),
    )


def _host_tid(t: RankTimeline) -> int:
    """The global thread id of the rank's Python thread (pid << 32 | tid, as torch_npu stores it)."""
    return (2_000_000 + t.rank) << 32 | (2_000_000 + t.rank)


def _framework_row(name: str, start: int, end: int, tid: int, strings: _Strings) -> tuple:
    """A PYTORCH_API row of a framework op (times as text, as torch_npu stores them)."""
    return (str(start), str(end), tid, None, strings(name), -1, 0, None, None, None, 1)


def _insert_host_stalls(
    con: sqlite3.Connection, t: RankTimeline, stalls: list[tuple[int, int, str]], strings: _Strings
) -> None:
    """PYTORCH_API (times as text, as torch_npu stores them) and CANN_API rows of each planted host stall,
    and for a planted device copy its TASK row (MEMCPY_ASYNC on the compute stream) besides its launch."""
    tid = _host_tid(t)
    framework, cann, copies = [], [], []
    for start, end, kind in stalls:
        ops, calls = STALL_SPANS.get(kind, STALL_SPANS["device_idle_bubble"])
        if kind == DEVICE_COPY:
            copies.append((start, end))
        start, end = host_span(kind, start, end)
        framework += [_framework_row(name, start, end, tid, strings) for name, _ in ops]
        cann += [(start, end, 20000, tid, strings(name)) for name, _ in calls]
    con.executemany("INSERT INTO PYTORCH_API VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", framework)
    # connection ids past the launches': a blocking call launches no task
    first = int(con.execute("SELECT COALESCE(MAX(connectionId), 0) FROM CANN_API").fetchone()[0]) + 1
    con.executemany(
        "INSERT INTO CANN_API VALUES (?, ?, ?, ?, ?, ?)",
        [(s, e, kind, tid_, first + i, name) for i, (s, e, kind, tid_, name) in enumerate(cann)],
    )
    task_id = int(con.execute("SELECT COALESCE(MAX(globalTaskId), 0) FROM TASK").fetchone()[0]) + 1
    copy_type = strings("MEMCPY_ASYNC")
    con.executemany(
        "INSERT INTO TASK VALUES (?, ?, ?, 4294967295, ?, 0, ?, 4294967295, 2, 29999, 4294967295)",
        [(s, e, t.rank, task_id + i, copy_type) for i, (s, e) in enumerate(copies)],
    )


def _insert_scope_spans(con: sqlite3.Connection, t: RankTimeline, strings: _Strings) -> None:
    """PYTORCH_API rows of the framework ops the host launched kernels inside (``vision.host_scope_spans``)."""
    tid = _host_tid(t)
    rows = [_framework_row(name, start, end, tid, strings) for name, start, end in host_scope_spans(t)]
    con.executemany("INSERT INTO PYTORCH_API VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


def write_profiler_db(
    path: Path,
    t: RankTimeline,
    names: np.ndarray,
    step_ids: list[int],
    metadata: dict,
    groups: list[GroupInstance | None],
    host: str | None = None,
    host_stalls: list[tuple[int, int, str]] = (),
) -> None:
    """ascend_pytorch_profiler_<rank>.db for one rank; ``groups`` holds each event's communicator (or None);
    ``host`` names the machine (default: the synthetic host of the rank dirs' names); ``host_stalls`` the
    (start_ns, end_ns, fault kind) host stalls planted by faults."""
    con = sqlite3.connect(path)
    con.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;" + _SCHEMA)
    strings = _Strings()
    _insert_capture_facts(con, t, step_ids, metadata, host)
    # HCCL ops are COMMUNICATION_OP rows; fused MC2 kernels (MoeDistributeDispatch / Combine) are
    # compute tasks whose core is COMMUNICATION, with PMU data, as kernel_details lists them.
    comm = np.asarray([k.name.startswith("hcom_") for k in t.kernels])[t.kernel_id] & (t.collective >= 0)
    connection = np.arange(len(t.start_ns), dtype=np.int64) + 1
    k_type = _insert_compute_tasks(con, t, np.flatnonzero(~comm), connection, strings)
    _insert_communication_ops(con, t, np.flatnonzero(comm), names, groups, connection, strings, k_type)
    _insert_cann_api(con, t, comm, connection, strings)
    _insert_host_stalls(con, t, list(host_stalls), strings)
    _insert_scope_spans(con, t, strings)
    con.executemany("INSERT INTO STRING_IDS VALUES (?, ?)", [(i, v) for v, i in strings.ids.items()])
    con.commit()
    con.close()


# kept verbatim: sqlite stores the statements' text, so its indentation is part of the file's bytes
_ANALYSIS_SCHEMA = """
        PRAGMA journal_mode=OFF;
        CREATE TABLE StepTraceTime (step TEXT, computing NUMERIC, communication_not_overlapped NUMERIC,
            overlapped NUMERIC,
            communication NUMERIC, free NUMERIC, stage NUMERIC, bubble NUMERIC,
            communication_not_overlapped_and_exclude_receive NUMERIC, preparing NUMERIC);
        CREATE TABLE CommAnalyzerTime (hccl_op_name TEXT, group_name TEXT, start_timestamp NUMERIC, elapse_time NUMERIC,
            transit_time NUMERIC, wait_time NUMERIC, synchronization_time NUMERIC, idle_time NUMERIC, step TEXT,
            type TEXT);
        CREATE TABLE CommAnalyzerBandwidth (hccl_op_name TEXT, group_name TEXT, transport_type TEXT,
            transit_size NUMERIC,
            transit_time NUMERIC, bandwidth NUMERIC, large_packet_ratio NUMERIC, package_size NUMERIC, count NUMERIC,
            total_duration NUMERIC, step TEXT, type TEXT);
        CREATE TABLE CommAnalyzerMatrix (hccl_op_name TEXT, group_name TEXT, src_rank TEXT, dst_rank TEXT,
            transport_type TEXT,
            transit_size NUMERIC, transit_time NUMERIC, bandwidth NUMERIC, step TEXT, type TEXT, op_name TEXT);
        """
# StepTraceTime's time columns: step_trace_time.csv's after the device and the step
_STEP_TRACE_TIMES = tuple(c for c in STEP_TRACE_COLUMNS if c not in ("Device_id", "Step"))


def _insert_comm_op(con: sqlite3.Connection, name: str, group: str, op: dict, step: str, kind: str) -> None:
    """One communication op's CommAnalyzerTime row and its CommAnalyzerBandwidth rows."""
    info = op["Communication Time Info"]
    con.execute(
        "INSERT INTO CommAnalyzerTime VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            name,
            group,
            info["Start Timestamp(us)"],
            info["Elapse Time(ms)"],
            info["Transit Time(ms)"],
            info["Wait Time(ms)"],
            info["Synchronization Time(ms)"],
            info["Idle Time(ms)"],
            step,
            kind,
        ),
    )
    for transport, bw in op["Communication Bandwidth Info"].items():
        for package, (count, duration) in bw["Size Distribution"].items():
            con.execute(
                "INSERT INTO CommAnalyzerBandwidth VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    name,
                    group,
                    transport,
                    bw["Transit Size(MB)"],
                    bw["Transit Time(ms)"],
                    bw["Bandwidth(GB/s)"],
                    bw["Large Packet Ratio"],
                    float(package),
                    count,
                    duration,
                    step,
                    kind,
                ),
            )


def _insert_matrix(con: sqlite3.Connection, matrix: dict) -> None:
    """CommAnalyzerMatrix: one row per link of each op, from communication_matrix.json's records."""
    for step, kinds in matrix.items():
        for kind, ops in kinds.items():
            for key, links in ops.items():
                name, group = key.split("@")
                for link, info in links.items():
                    src, dst = link.split("-")
                    con.execute(
                        "INSERT INTO CommAnalyzerMatrix VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            name,
                            group,
                            src,
                            dst,
                            info["Transport Type"],
                            info["Transit Size(MB)"],
                            info["Transit Time(ms)"],
                            info["Bandwidth(GB/s)"],
                            step,
                            kind,
                            info["Op Name"],
                        ),
                    )


def write_analysis_db(path: Path, step_rows: list[dict], communication: dict, matrix: dict) -> None:
    """analysis.db: StepTraceTime and the CommAnalyzer* tables, from the same records as the JSON files."""
    con = sqlite3.connect(path)
    con.executescript(_ANALYSIS_SCHEMA)
    con.executemany(
        "INSERT INTO StepTraceTime VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(str(r["Step"]), *(r[c] for c in _STEP_TRACE_TIMES)) for r in step_rows],
    )
    for step, kinds in communication.items():
        for kind, ops in kinds.items():
            for key, op in ops.items():
                if not key.startswith("Total"):
                    _insert_comm_op(con, *key.split("@"), op, step, kind)
    _insert_matrix(con, matrix)
    con.commit()
    con.close()
