"""Write a simulated root as torch_npu text export, file by file as shared/spec/input-formats.md says.

kernel_details.csv is built column-wise with Arrow (kernel attributes gathered with ``take``) and
streamed to disk in row batches, so a 250 k-row rank needs neither a Python loop per row nor the
whole file in memory as text.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from npuprof.synth.kernels import EAGER_MODEL_ID, PROFILES, Kernel
from npuprof.synth.timeline import Collective, RankTimeline

KERNEL_DETAILS_HEADER = (
    "Step Id,Device_id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start Time(us),Duration(us),"
    "Wait Time(us),Block Dim,Mix Block Dim,HF32 Eligible,Input Shapes,Input Data Types,Input Formats,Output Shapes,"
    "Output Data Types,Output Formats,Context ID,aicore_time(us),aic_total_cycles,aic_mac_time(us),aic_mac_ratio,"
    "aic_scalar_time(us),aic_scalar_ratio,aic_mte1_time(us),aic_mte1_ratio,aic_mte2_time(us),aic_mte2_ratio,"
    "aic_fixpipe_time(us),aic_fixpipe_ratio,aic_icache_miss_rate,aiv_time(us),aiv_total_cycles,aiv_vec_time(us),"
    "aiv_vec_ratio,aiv_scalar_time(us),aiv_scalar_ratio,aiv_mte2_time(us),aiv_mte2_ratio,aiv_mte3_time(us),"
    "aiv_mte3_ratio,aiv_icache_miss_rate,cube_utilization(%)"
).split(",")

BATCH_ROWS = 65_536
CYCLES_PER_US = 1_800  # 1.8 GHz AI Core clock
_AIC_STAGES = ("aic_mac", "aic_scalar", "aic_mte1", "aic_mte2", "aic_fixpipe")
_AIV_STAGES = ("aiv_vec", "aiv_scalar", "aiv_mte2", "aiv_mte3")


def us_text(ns: np.ndarray, *, tab: bool = False) -> pa.Array:
    """int ns → µs text with exactly 3 decimals, as the exporter writes it (optionally + TAB)."""
    ns = np.asarray(ns, dtype=np.int64)
    whole = pa.array(ns // 1000).cast(pa.string())
    frac = pc.utf8_lpad(pa.array(ns % 1000).cast(pa.string()), width=3, padding="0")
    text = pc.binary_join_element_wise(whole, frac, ".")
    return pc.binary_join_element_wise(text, "\t", "") if tab else text


def _num_text(values: np.ndarray, mask: np.ndarray, decimals: int = 3) -> pa.Array:
    """Floats rounded to ``decimals`` as text; ``N/A`` where ``mask`` is false."""
    text = pa.array(np.round(values, decimals)).cast(pa.string())
    return pc.if_else(pa.array(mask), text, pa.scalar("N/A"))


def _kernel_table(timeline: RankTimeline, hccl_names: dict[int, str]) -> dict[str, list]:
    """Per-kernel attributes (small lists, indexed by kernel id)."""
    attrs: dict[str, list] = {
        key: []
        for key in (
            "name",
            "type",
            "core",
            "block",
            "mix",
            "in_s",
            "in_d",
            "in_f",
            "out_s",
            "out_d",
            "out_f",
            "profile",
            "is_comm",
            "model",
            "state",
        )
    }
    for k in timeline.kernels:
        comm = k.core == "COMMUNICATION" and k.name.startswith("hcom_")
        attrs["name"].append(k.name)
        attrs["type"].append(k.type)
        attrs["model"].append(str(EAGER_MODEL_ID if k.model_id is None else k.model_id))
        attrs["core"].append(k.core)
        attrs["block"].append(str(k.block_dim))
        attrs["mix"].append("N/A" if comm else str(k.mix_block_dim))
        for key, value in (("in_s", k.input_shapes), ("out_s", k.output_shapes)):
            attrs[key].append("N/A" if comm else f'"""{value}"""')  # a quoted cell holding a quoted string
        for key, value in (
            ("in_d", k.input_dtypes),
            ("in_f", k.input_formats),
            ("out_d", k.output_dtypes),
            ("out_f", k.output_formats),
        ):
            attrs[key].append("N/A" if comm else value)
        attrs["profile"].append(k.profile)
        attrs["is_comm"].append(comm)
        # a replayed graph's kernels were compiled with their shapes: static; an eager launch's, dynamic
        attrs["state"].append("N/A" if comm else "dynamic" if k.model_id is None else "static")
    return attrs


def pmu_values(timeline: RankTimeline) -> dict[str, np.ndarray]:
    """Pipeline (PMU) values per event, µs (cycles as counts), rounded as the text export writes them.

    Busy time is 93 % of the task, split over the AIC / AIV stages by the kernel's profile; only
    compute kernels with a profile carry PMU data (``has_pmu``), communication ops never do.
    """
    profiles = np.asarray([k.profile for k in timeline.kernels], dtype=object)
    is_hcom = np.asarray([k.core == "COMMUNICATION" and k.name.startswith("hcom_") for k in timeline.kernels])[
        timeline.kernel_id
    ]
    busy = timeline.duration_ns / 1000.0 * 0.93
    # cycles count work, not time: a throttled kernel takes longer for the same cycles
    unthrottled = 1.0 / (timeline.clock_factor if timeline.clock_factor is not None else 1.0)
    shares = {
        stage: np.array([PROFILES[p].get(stage, 0.0) for p in profiles])[timeline.kernel_id]
        for stage in (*_AIC_STAGES, *_AIV_STAGES)
    }
    values = {"has_pmu": ~is_hcom & (profiles[timeline.kernel_id] != "none"), "mac_share": shares["aic_mac"]}
    aic_time = np.round(np.where(sum(shares[s] for s in _AIC_STAGES) > 0, busy, 0.0), 3)
    aiv_time = np.round(np.where(sum(shares[s] for s in _AIV_STAGES) > 0, busy, 0.0), 3)
    values.update(
        {
            "aic_total_time": aic_time,
            "aiv_total_time": aiv_time,
            "aic_total_cycles": np.round(aic_time * unthrottled * CYCLES_PER_US),
            "aiv_total_cycles": np.round(aiv_time * unthrottled * CYCLES_PER_US),
        }
    )
    for stage in (*_AIC_STAGES, *_AIV_STAGES):
        values[f"{stage}_time"] = np.round(busy * shares[stage], 3)
    return values


def write_kernel_details(
    path: Path, timeline: RankTimeline, step_ids: np.ndarray | None, device_id: int, hccl_names: np.ndarray
) -> int:
    """kernel_details.csv (47 columns, CANN 8.3 layout) for one rank; returns the row count. Without
    ``step_ids`` (a capture without profiler steps: serving) there is no Step Id column."""
    attrs = _kernel_table(timeline, {})
    kid = pa.array(timeline.kernel_id)
    n = len(timeline.kernel_id)
    take = lambda key: pa.array(attrs[key]).take(kid)  # noqa: E731
    is_comm = np.asarray(attrs["is_comm"])[timeline.kernel_id]
    name = pc.if_else(pa.array(is_comm), pa.array(hccl_names, type=pa.string()), take("name"))

    columns: dict[str, pa.Array] = {
        "Step Id": pa.array(step_ids if step_ids is not None else np.zeros(n, dtype=np.int64)).cast(pa.string()),
        "Device_id": pa.repeat(pa.scalar(str(device_id)), n),
        "Model ID": take("model"),
        "Task ID": pc.if_else(pa.array(is_comm), pa.scalar("N/A"), pa.array(np.arange(n) + 30_000).cast(pa.string())),
        "Stream ID": pc.if_else(pa.array(is_comm), pa.scalar("N/A"), pa.scalar("2")),
        "Name": name,
        "Type": take("type"),
        "OP State": take("state"),
        "Accelerator Core": take("core"),
        "Start Time(us)": us_text(timeline.start_ns, tab=True),
        "Duration(us)": us_text(timeline.duration_ns),
        "Wait Time(us)": pa.array(np.round(timeline.wait_ns / 1000.0, 6)).cast(pa.string()),
        "Block Dim": take("block"),
        "Mix Block Dim": take("mix"),
        "HF32 Eligible": pc.if_else(pa.array(is_comm), pa.scalar("N/A"), pa.scalar("NO")),
        "Input Shapes": take("in_s"),
        "Input Data Types": take("in_d"),
        "Input Formats": take("in_f"),
        "Output Shapes": take("out_s"),
        "Output Data Types": take("out_d"),
        "Output Formats": take("out_f"),
        "Context ID": pa.repeat(pa.scalar("N/A"), n),
    }
    pmu = pmu_values(timeline)
    has_pmu = pmu["has_pmu"]
    for core, total_column, stages, icache_miss in (
        ("aic", "aicore_time(us)", _AIC_STAGES, 0.002),
        ("aiv", "aiv_time(us)", _AIV_STAGES, 0.023),
    ):
        total = pmu[f"{core}_total_time"]
        columns[total_column] = _num_text(total, has_pmu)
        columns[f"{core}_total_cycles"] = _num_text(pmu[f"{core}_total_cycles"], has_pmu, 0)
        for stage in stages:
            columns[f"{stage}_time(us)"] = _num_text(pmu[f"{stage}_time"], has_pmu)
            columns[f"{stage}_ratio"] = _num_text(
                np.divide(pmu[f"{stage}_time"], total, out=np.zeros(n), where=total > 0), has_pmu
            )
        columns[f"{core}_icache_miss_rate"] = _num_text(np.where(total > 0, icache_miss, 0.0), has_pmu)
    columns["cube_utilization(%)"] = _num_text(pmu["mac_share"] * 93.0, has_pmu)
    header = [h for h in KERNEL_DETAILS_HEADER if step_ids is not None or h != "Step Id"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.write((",".join(header) + "\n").encode())
        for offset in range(0, n, BATCH_ROWS):
            write_csv_lines(handle, [columns[h].slice(offset, BATCH_ROWS) for h in header])
    return n


def write_csv_lines(handle, columns: list[pa.Array]) -> None:
    """Write rows whose cells are already CSV text (quoted where needed), as the exporter does.

    Arrow's CSV writer quotes every string; the real files quote only shapes. Each row is joined
    with commas and a newline in Arrow, and the string data buffer — exactly the file's bytes — is
    written without building Python strings per row.
    """
    lines = pc.binary_join_element_wise(pc.binary_join_element_wise(*columns, ","), "\n", "")
    lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    if lines.null_count:
        raise ValueError("a CSV cell is null; every cell must be text")
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)[lines.offset : lines.offset + len(lines) + 1]
    handle.write(memoryview(lines.buffers()[2])[offsets[0] : offsets[-1]])


STEP_TRACE_COLUMNS = (
    "Device_id",
    "Step",
    "Computing",
    "Communication(Not Overlapped)",
    "Overlapped",
    "Communication",
    "Free",
    "Stage",
    "Bubble",
    "Communication(Not Overlapped and Exclude Receive)",
    "Preparing",
)


def step_trace_rows(timeline: RankTimeline, step_ids: list[int], device_id: int) -> list[dict]:
    """Per step on one rank: compute / communication / free time (µs), as step_trace_time defines them."""
    is_comm = timeline.collective >= 0
    rows = []
    for ordinal, step_id in enumerate(step_ids):
        in_step = timeline.step == ordinal
        if in_step.any():
            rows.append(_split_row(timeline, in_step, is_comm, timeline.step_start_ns[ordinal], device_id, step_id))
    return rows


def whole_capture_row(timeline: RankTimeline, device_id: int) -> list[dict]:
    """The one step_trace_time row of a capture without profiler steps (serving): the whole capture's
    compute / communication / free time (µs) from its first event, its Step empty."""
    every = np.ones(len(timeline.start_ns), dtype=bool)
    return [_split_row(timeline, every, timeline.collective >= 0, timeline.start_ns.min(), device_id, "")]


def _split_row(
    timeline: RankTimeline, kept: np.ndarray, is_comm: np.ndarray, begin_ns: int, device_id: int, step: int | str
) -> dict:
    """One step_trace_time row over the ``kept`` events, from ``begin_ns`` (where the step began)."""
    starts, durs, comm = timeline.start_ns[kept], timeline.duration_ns[kept], is_comm[kept]
    wall = float((starts + durs).max() - begin_ns) / 1000
    computing = durs[~comm].sum() / 1000
    communication = durs[comm].sum() / 1000
    free = max(wall - computing - communication, 0.0)
    preparing = (starts.min() - begin_ns) / 1000
    values = (device_id, step, computing, communication, 0.0, communication, free, wall, 0.0, communication, preparing)
    return dict(zip(STEP_TRACE_COLUMNS, values))


def write_step_trace_time(path: Path, rows: list[dict]) -> None:
    """step_trace_time.csv (CANN 8.3 header, with Device_id and Preparing)."""
    lines = [",".join(STEP_TRACE_COLUMNS)]
    for row in rows:
        lines.append(
            ",".join(
                str(row[c]) if c in ("Device_id", "Step") else ("0" if row[c] == 0 else f"{row[c]:.3f}")
                for c in STEP_TRACE_COLUMNS
            )
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


IDLE_TRANSPORT = {
    "Transit Size(MB)": 0,
    "Transit Time(ms)": 0,
    "Bandwidth(GB/s)": 0,
    "Large Packet Ratio": 0,
    "Size Distribution": {},
}


def _bandwidth_block(size_mb: float, transit_ms: float, transport: str) -> dict:
    """An op's bandwidth info as torch_npu writes it: every transport, the idle ones zero; SDMA repeats
    what the on-chip transports (HCCS, PCIE, SIO) moved, as on the real captures."""
    bandwidth = size_mb / transit_ms if transit_ms > 0 else 0.0  # MB per ms is GB/s
    moved = {
        "Transit Size(MB)": round(size_mb, 6),
        "Transit Time(ms)": round(transit_ms, 6),
        "Bandwidth(GB/s)": round(bandwidth, 4),
        "Large Packet Ratio": 1.0 if size_mb > 1 else 0.0,
        "Size Distribution": {f"{size_mb:.6f}": [1, round(transit_ms, 6)]},
    }
    sdma = transport in ("HCCS", "PCIE", "SIO")
    return {
        name: moved if name == transport or (sdma and name == "SDMA") else IDLE_TRANSPORT
        for name in ("RDMA", "HCCS", "PCIE", "SDMA", "SIO")
    }


def _time_info(start_us: float, elapse_ms: float, transit_ms: float, wait_ms: float) -> dict:
    idle = max(elapse_ms - transit_ms - wait_ms, 0.0)
    return {
        "Start Timestamp(us)": round(start_us, 3),
        "Elapse Time(ms)": round(elapse_ms, 6),
        "Transit Time(ms)": round(transit_ms, 6),
        "Wait Time(ms)": round(wait_ms, 6),
        "Synchronization Time(ms)": 0,
        "Idle Time(ms)": round(idle, 6),
        "Wait Time Ratio": round(wait_ms / (wait_ms + transit_ms), 4) if wait_ms + transit_ms else 0,
        "Synchronization Time Ratio": 0,
    }


def communication_records(
    rank: int,
    collectives: list[Collective],
    names: dict[int, str],
    step_ids: list[int | None],
    clock_offset_ns: int,
    slow_link: tuple[tuple[int, int], float] | None,
    kept: set[int],
    rdma_groups: tuple[str, ...] = (),
) -> tuple[dict, dict]:
    """The content of communication.json and communication_matrix.json of one rank (times in ms); a step
    id None: the capture marks no step."""
    comm: dict = {}
    matrix: dict = {}
    for c in collectives:
        if c.ordinal not in kept or rank not in c.arrive_ns:
            continue
        # a capture without steps has one "step" key: torch_npu re-splits CANN's records by a step it lacks
        step_key = "step" if step_ids[c.step] is None else f"step{step_ids[c.step]}"
        section = "p2p" if c.group.name == "pp" else "collective"
        elapse_ms = (c.end_ns[rank] - c.arrive_ns[rank]) / 1e6
        wait_ms = (c.last_arrival_ns - c.arrive_ns[rank]) / 1e6
        transit_ms = c.transfer_ns / 1e6
        transport = "RDMA" if c.group.name in rdma_groups else "HCCS"  # a group across machines: RDMA
        entry = {
            "Communication Time Info": _time_info(
                (c.arrive_ns[rank] + clock_offset_ns) / 1000, elapse_ms, transit_ms, wait_ms
            ),
            "Communication Bandwidth Info": _bandwidth_block(c.kernel.transfer_mb, transit_ms, transport),
        }
        comm.setdefault(step_key, {"collective": {}, "p2p": {}})[section][f"{names[c.ordinal]}@{c.group.hash}"] = entry
        step_matrix = matrix.setdefault(step_key, {"collective": {}, "p2p": {}})[section]
        links = _op_links(c, rank, transit_ms, transport, slow_link)
        _add_to_matrix(step_matrix, _matrix_kind(c.kernel), c.group.hash, links, names[c.ordinal])
    for step in comm.values():
        for ops in step.values():
            if ops:
                ops["Total Op Info"] = _total_op_info(ops)
    return comm, matrix


def _matrix_kind(kernel: Kernel) -> str:
    """The op kind communication_matrix.json keys an op by."""
    op_type = kernel.type.lower()
    if "batchsendrecv" in op_type:
        return "batchsendrecv"
    return "alltoall" if "alltoall" in op_type or kernel.name.startswith("MoeDistribute") else "allreduce"


def _op_links(
    c: Collective, rank: int, transit_ms: float, transport: str, slow_link: tuple[tuple[int, int], float] | None
) -> dict[str, tuple[str, float, float]]:
    """The links one op of ``rank`` moves its bytes over, "src-dst" (local ranks) → (transport, MB, ms):
    itself and the next member of its ring."""
    members = c.group.members
    local = members.index(rank)
    links = {f"{local}-{local}": ("LOCAL", c.kernel.transfer_mb, transit_ms / 4)}
    peer = (local + 1) % len(members)
    # A ring is as slow as its slowest link: with a slowed link, that link takes the whole
    # transit time and every other link moves the same bytes factor-times faster.
    on_slow_link = slow_link is not None and {members[local], members[peer]} == set(slow_link[0])
    slowed_group = slow_link is not None and set(slow_link[0]) <= set(members)
    link_ms = transit_ms / slow_link[1] if slowed_group and not on_slow_link else transit_ms
    if len(members) > 1:
        links[f"{local}-{peer}"] = (transport, c.kernel.transfer_mb, link_ms)
    return links


def _add_to_matrix(step_matrix: dict, kind: str, group_hash: str, links: dict, op_name: str) -> None:
    """One op's links into its step's matrix: the first op of a kind per tag, summed into "total"."""
    for tag in ("top1", "middle", "bottom1", "total"):
        bucket = step_matrix.setdefault(f"{kind}-{tag}@{group_hash}", {})
        for link, (transport, size_mb, ms) in links.items():
            previous = bucket.get(link)
            if previous and tag != "total":
                continue  # one representative instance per tag is enough for a synthetic capture
            total_mb = size_mb + (previous["Transit Size(MB)"] if previous else 0.0)
            total_ms = ms + (previous["Transit Time(ms)"] if previous else 0.0)
            bucket[link] = {
                "Transport Type": transport,
                "Transit Size(MB)": round(total_mb, 6),
                "Transit Time(ms)": round(total_ms, 6),
                "Bandwidth(GB/s)": round(total_mb / total_ms, 4) if total_ms else 0.0,
                "Op Name": op_name,
            }


def _total_op_info(ops: dict) -> dict:
    """A step section's "Total Op Info": its ops' times and bytes summed, over RDMA where they went so."""
    times = [v["Communication Time Info"] for v in ops.values()]
    bandwidth = [v["Communication Bandwidth Info"] for v in ops.values()]
    transport = "RDMA" if any(b["RDMA"]["Transit Size(MB)"] for b in bandwidth) else "HCCS"
    transit = sum(t["Transit Time(ms)"] for t in times)
    info = _time_info(0.0, sum(t["Elapse Time(ms)"] for t in times), transit, sum(t["Wait Time(ms)"] for t in times))
    info.pop("Start Timestamp(us)")
    size = sum(b[transport]["Transit Size(MB)"] for b in bandwidth)
    return {"Communication Time Info": info, "Communication Bandwidth Info": _bandwidth_block(size, transit, transport)}


def write_communication(out_dir: Path, comm: dict, matrix: dict) -> None:
    """communication.json and communication_matrix.json."""
    (out_dir / "communication.json").write_text(json.dumps(comm), encoding="utf-8")
    (out_dir / "communication_matrix.json").write_text(json.dumps(matrix), encoding="utf-8")
