"""``generate()``: write a synthetic profiling root with planted faults and its ground_truth.json."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from npuprof.synth.db_export import CARDS_PER_HOST, device_of, write_analysis_db, write_profiler_db
from npuprof.synth.faults import (
    FAULT_TYPES,
    PLANTABLE_FINDINGS,
    RDMA_TIMEOUT_EXPONENT,
    STEP_TOP,
    UNCAPTURED,
    findings_of_fault,
)
from npuprof.synth.groups import Topology
from npuprof.synth.hccl_planes import plane_tasks
from npuprof.synth.host_side import PLANTED_GAPS, RECORDED_ENV
from npuprof.synth.kernels import CUBE_CORES, VECTOR_CORES
from npuprof.synth.layers import UNALIGNED_BY
from npuprof.synth.program import DENSE, LAYER, MOE
from npuprof.synth.scenarios import Scenario
from npuprof.synth.scenarios import scenario as named_scenario
from npuprof.synth.step_walls import device_spans_us, step_walls_us
from npuprof.synth.text_export import (
    communication_records,
    step_trace_rows,
    whole_capture_row,
    write_communication,
    write_kernel_details,
    write_step_trace_time,
)
from npuprof.synth.timeline import Collective, RankTimeline, simulate
from npuprof.synth.trace_export import write_trace_view

FIRST_STEP_ID = 10
EXPORTS = {"text": ("text",), "db": ("db",), "both": ("text", "db")}

STALL_AFTER_START_NS = 2_000  # a stall at the step's top begins this soon after ProfilerStep#N


def topology_of(sc: Scenario) -> Topology:
    """The parallel layout of a scenario: training is DP (× PP), dense inference TP, MoE expert parallel."""
    if sc.training:
        kinds = ["dp"] + (["exp"] if sc.model == "moe" else []) + (["pp"] if sc.pp > 1 else [])
        return Topology(tp=1, dp=sc.ranks // sc.pp, pp=sc.pp).build(kinds)
    if sc.model == "moe":
        return Topology(tp=1, dp=sc.ranks, pp=1).build(["exp"])
    return Topology(tp=sc.ranks, dp=1, pp=1).build(["tp"])


def _distributed_args(topology: Topology, sc: Scenario, rank: int) -> dict:
    ep = topology.dp if sc.model == "moe" else 1
    return {
        "tensor_model_parallel_size": topology.tp,
        "pipeline_model_parallel_size": topology.pp,
        "data_parallel_size": topology.dp,
        "context_parallel_size": 1,
        "expert_model_parallel_size": ep,
        "sequence_parallel": False,
        "rank": rank,
        "world_size": topology.world,
    }


def _profiler_info(rank: int, timeline: RankTimeline, export_types: tuple[str, ...]) -> dict:
    return {
        "config": {
            "common_config": {
                "activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"],
                "schedule": {"wait": 0, "active": 1, "warmup": 1, "repeat": 1, "skip_first": FIRST_STEP_ID - 1},
                "record_shapes": True,
                "profile_memory": False,
                "with_stack": False,
                "with_flops": False,
                "with_modules": False,
            },
            "experimental_config": {
                "_profiler_level": "Level1",
                "_aic_metrics": "ACL_AICORE_PIPE_UTILIZATION",
                "_l2_cache": False,
                "_msprof_tx": False,
                "_mstx": False,
                "_data_simplification": True,
                "record_op_args": False,
                "_export_type": list(export_types),
                "_host_sys": [],
                "_op_attr": False,
                "_gc_detect_threshold": None,
                "_sys_io": False,
                "_sys_interconnection": False,
            },
        },
        "start_info": {
            "syscnt_enable": True,
            "freq": 100,
            "start_cnt": 470002538790308,
            "start_monotonic": 4699801002845430,
        },
        "end_info": {
            "collectionTimeEnd": int(timeline.start_ns[-1] + timeline.duration_ns[-1]),
            "MonotonicTimeEnd": 4699802061975030,
        },
        "torch_npu_version": "2.7.1",
        "cann_version": "8.3.RC1",
        "rank_id": rank,
    }


def _hccl_names(collectives: list[Collective]) -> dict[int, str]:
    """hcom_<op>__<last 3 digits of the group hash>_<per-communicator sequence>_1, identical on every member."""
    return {
        c.ordinal: f"{c.kernel.type}_{c.group.hash[-3:]}_{c.sequence}_1"
        if c.kernel.name.startswith("hcom_")
        else c.kernel.name
        for c in collectives
    }


def _layer_rows(t: RankTimeline, step: int) -> list[dict]:
    """Row ranges (kernel_details data rows) of every layer instance in one step, in order. An overlapped
    op (a gradient bucket) that starts between two layers' kernels belongs to the layer after it: the
    layer's rows run from the first row after the previous layer's last."""
    in_step = t.step == step
    layer = in_step & (t.region == LAYER)
    # each overlapped op takes the layer of the next row that is not one (none after the last layer)
    next_kept = np.minimum.accumulate(np.where(~t.overlapped, np.arange(len(layer)), len(layer))[::-1])[::-1]
    source = np.minimum(np.where(t.overlapped, next_kept, np.arange(len(layer))), len(layer) - 1)
    joins_layer = t.overlapped & in_step & layer[source] & (t.step[source] == step)
    rows = np.flatnonzero(layer | joins_layer)
    if rows.size == 0:
        return []
    rows_src = source[rows]
    key = np.stack(
        [t.micro_batch[rows_src], t.layer_index[rows_src], (t.layer_role[rows_src] == "backward").astype(np.int32)],
        axis=1,
    )
    breaks = np.flatnonzero(np.any(key[1:] != key[:-1], axis=1) | (np.diff(rows) != 1)) + 1
    layers = []
    for chunk in np.split(rows, breaks):
        first = source[chunk[0]]
        layers.append(
            {
                "row_start": int(chunk[0]),
                "row_end": int(chunk[-1]),
                "layer_index": int(t.layer_index[first]),
                "role": str(t.layer_role[first]),
                "micro_batch": int(t.micro_batch[first]),
            }
        )
    return layers


def planted_config(sc: Scenario) -> dict:
    """The model's config fields a profile can show (HuggingFace names): what the fingerprint must find.

    The MoE model has no dense FFN layer, so its intermediate_size is not visible in any kernel; MLA
    models list num_key_value_heads = num_attention_heads and head_dim = v_head_dim, as their
    published configs do.
    """
    spec = DENSE if sc.model == "dense" else MOE
    ffn = spec.ffn
    if any(f.kind == "operator_low_efficiency" for f in sc.faults):  # a planted unaligned FFN is narrower
        ffn -= UNALIGNED_BY * topology_of(sc).tp
    config = {
        "num_hidden_layers": sc.layers,
        "hidden_size": spec.hidden,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.head_dim,
        "intermediate_size": ffn if sc.model == "dense" else None,
        "vocab_size": spec.vocab,
        "n_routed_experts": spec.experts or None,
        "num_experts_per_tok": spec.top_k or None,
        "moe_intermediate_size": spec.moe_ffn or None,
        "n_shared_experts": 0 if sc.model == "moe" else None,  # its MoE block has routed experts only
    }
    return config


def _attention_of(sc: Scenario) -> str:
    """The attention the scenario's layers run: MLA in the MoE model, except a serving forward's GQA
    (synth/layers.py: ``moe_layer``), which with as many KV heads as query heads is MHA."""
    if sc.model == "moe" and not sc.forwards:
        return "mla"
    spec = DENSE if sc.model == "dense" else MOE
    return "gqa" if spec.kv_heads < spec.heads else "mha"


def _ground_truth(
    sc: Scenario, seed: int, timelines: list[RankTimeline], step_ids: list[int], serving: bool = False
) -> dict:
    partial = any(f.kind == "partial_capture" for f in sc.faults)
    complete = step_ids[1:-1] if partial else step_ids
    ranks = {}
    for t in timelines:
        layer_rows = t.region == LAYER
        observed = sorted({step_ids[s] for s in np.unique(t.step)})
        first_complete = complete[0] - step_ids[0] if complete else None
        ranks[str(t.rank)] = {
            "layers_first_complete_step": _layer_rows(t, first_complete) if first_complete is not None else [],
            "steps_present": observed,
            "complete_steps": complete,
            "partial_steps": sorted(set(observed) - set(complete)),
            "decoder_layers_held": list(t.layers_held),
            "layer_instances_per_complete_step": {
                "forward": len(t.layers_held) * (sc.micro_batches if sc.training else 1),
                "backward": len(t.layers_held) * sc.micro_batches if sc.training else 0,
            },
            "event_count": int(len(t.start_ns)),
            "layer_event_count": int(layer_rows.sum()),
            "clock_offset_us": t.clock_offset_ns / 1000,
            "step_wall_us": step_walls_us(t, serving),
            # a serving capture's forwards: the device's span of each (no profiler step starts them)
            **({"forward_span_us": device_spans_us(t)} if sc.forwards else {}),
        }
    faults = []
    for fault in sc.faults:
        entry = fault.as_dict()
        if "step_ordinals" in entry:
            entry["step_ids"] = [step_ids[s] for s in (fault.steps or range(sc.steps))]
        faults.append(entry)
    planted = {kind for f in sc.faults for kind in findings_of_fault(f)}
    return {
        "scenario": sc.name,
        "description": sc.description,
        "seed": seed,
        "workload": {
            k: v
            for k, v in asdict(sc).items()
            if k not in ("faults", "name", "description", "step_marks") and (v or k != "forwards")
        },
        "model": {
            "family": sc.model,
            "decoder_layers": sc.layers,
            "attention": _attention_of(sc),
            "config": planted_config(sc),
        },
        "ranks": ranks,
        "step_ids": step_ids,
        "complete_steps": complete,
        "faults": faults,
        "expected_findings": [
            {"type": kind, **{k: v for k, v in f.as_dict().items() if k != "kind"}}
            for f in sc.faults
            for kind in findings_of_fault(f)
        ],
        "unexpected_findings": sorted(set(PLANTABLE_FINDINGS) - planted),
    }


def _recorded_env(sc: Scenario, rank: int) -> dict[str, str]:
    """The environment torch_npu records for ``rank``: a well-set job's, with what each fault planted on
    the rank records (``FaultType.environment``), and HCCL_RDMA_TIMEOUT where groups cross machines."""
    planted = [FAULT_TYPES[f.kind].environment for f in sc.faults if not f.ranks or rank in f.ranks]
    rdma = {"HCCL_RDMA_TIMEOUT": str(RDMA_TIMEOUT_EXPONENT)} if sc.rdma_groups else {}
    return {**RECORDED_ENV, **{k: v for env in planted for k, v in env.items()}, **rdma}


def _host_stalls(sc: Scenario, t: RankTimeline) -> list[tuple[int, int, str]]:
    """(start_ns, end_ns, fault kind) of each planted host stall or device copy on this rank: the idle
    gap before the layer, or at the step's top (``STEP_TOP``) the stall's own length, ending before the
    first launch."""
    stalls = []
    for fault in sc.faults:
        if fault.kind not in PLANTED_GAPS or (fault.ranks and t.rank not in fault.ranks):
            continue
        for step in fault.steps or range(sc.steps):
            rows = np.flatnonzero((t.step == step) & (t.region == LAYER) & (t.layer_index == fault.layer))
            if fault.layer == STEP_TOP and (t.step == step).any():  # from the step's start, before the launch
                start = int(t.step_start_ns[step]) + STALL_AFTER_START_NS
                stalls.append((start, start + int(fault.gap_us * 1000), fault.kind))
            elif rows.size:
                first = rows[0]
                stalls.append((int(t.start_ns[first] - t.wait_ns[first]), int(t.start_ns[first]), fault.kind))
    return stalls


@dataclass
class _Capture:
    """What every rank's files are written from: the scenario, its simulation and the export options."""

    scenario: Scenario
    topology: Topology
    collectives: list[Collective]
    names: dict[int, str]  # collective ordinal -> hcom op name
    step_ids: list[int]
    kinds: tuple[str, ...]
    trace: bool
    host: str | None = None  # the machine's name in the capture; None: the capture does not say
    serving: bool = False  # written as a capture without profiler steps (``generate``'s ``serving``)


def _host_name(host: str, rank: int) -> str:
    """The host a rank ran on: ``host`` for the first 8 ranks, ``host-1`` for the next 8, and so on."""
    index = rank // CARDS_PER_HOST
    return host if index == 0 else f"{host}-{index}"


def _worker_host(host: str | None, rank: int) -> str:
    """The host in the rank dir's name, as torch_npu's default worker name ({hostname}_{pid}) puts it:
    the rank's host when it is a plain host name, else the synthetic one."""
    name = _host_name(host, rank) if host else "synth-host"
    return name if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]*", name) else "synth-host"


def _write_cann_info(rank_dir: Path, host: str | None, rank: int) -> None:
    """The CANN raw data's info.json files, reduced to what names the card (its id and core counts) and,
    for a capture that names its machines, the host."""
    prof = rank_dir / f"PROF_000001_20251127120000{rank:03d}_SYNTHSYNTHSYNTHA"
    device = device_of(rank)
    card = {"id": device, "ai_core_num": CUBE_CORES, "aiv_num": VECTOR_CORES}
    for sub, name in (("host", "info.json"), (f"device_{device}", f"info.json.{device}")):
        if sub == "host" and not host:
            continue
        (prof / sub).mkdir(parents=True)
        info = {"hostname": host or "", "rank_id": rank, "DeviceInfo": [card]}
        (prof / sub / name).write_text(json.dumps(info), encoding="utf-8")


def _write_rank(tmp: Path, t: RankTimeline, capture: _Capture) -> int:
    """Write one rank's profiler dir under ``tmp``; returns its event count."""
    sc, collectives, names, step_ids, kinds = (
        capture.scenario,
        capture.collectives,
        capture.names,
        capture.step_ids,
        capture.kinds,
    )
    rank_dir = tmp / f"{_worker_host(capture.host, t.rank)}_{1000 + t.rank}_20251127120000{t.rank:03d}_ascend_pt"
    output = rank_dir / "ASCEND_PROFILER_OUTPUT"
    output.mkdir(parents=True)
    (rank_dir / f"profiler_info_{t.rank}.json").write_text(
        json.dumps(_profiler_info(t.rank, t, kinds), indent=1), encoding="utf-8"
    )
    metadata = {
        "distributed_args": _distributed_args(capture.topology, sc, t.rank),
        "ENV_VARIABLES": _recorded_env(sc, t.rank),
        "parallel_group_info": capture.topology.parallel_group_info(t.rank),
    }
    (rank_dir / "profiler_metadata.json").write_text(json.dumps(metadata), encoding="utf-8")
    _write_cann_info(rank_dir, _host_name(capture.host, t.rank) if capture.host else None, t.rank)
    by_ordinal = np.array([names[i] for i in range(len(collectives))] + [""], dtype=object)
    hccl_names = by_ordinal[t.collective]  # -1 (compute) picks the trailing ""
    event_names = np.where(
        t.collective >= 0, hccl_names, np.array([k.name for k in t.kernels], dtype=object)[t.kernel_id]
    )
    serving = capture.serving
    step_rows = whole_capture_row(t, device_of(t.rank)) if serving else step_trace_rows(t, step_ids, device_of(t.rank))
    kept = set(int(o) for o in t.collective[t.collective >= 0])
    slow_link = next(((f.link, f.factor) for f in sc.faults if f.kind == "slow_link_suspected"), None)
    recorded_steps = [None] * len(step_ids) if serving else step_ids  # a serving capture's records: no step
    communication, matrix = communication_records(
        t.rank, collectives, names, recorded_steps, t.clock_offset_ns, slow_link, kept, sc.rdma_groups
    )
    if "text" in kinds:
        step_of_event = None if serving else np.asarray(step_ids)[t.step]
        write_kernel_details(output / "kernel_details.csv", t, step_of_event, device_of(t.rank), hccl_names)
        write_step_trace_time(output / "step_trace_time.csv", step_rows)
        write_communication(output, communication, matrix)
        if capture.trace:
            planes = plane_tasks(t, collectives, sc)
            marked = [] if serving else step_ids  # no ProfilerStep spans without a schedule
            write_trace_view(output / "trace_view.json", t, event_names, marked, t.rank, _host_stalls(sc, t), planes)
    if "db" in kinds:
        group_of = np.array([c.group for c in collectives] + [None], dtype=object)
        write_profiler_db(
            output / f"ascend_pytorch_profiler_{t.rank}.db",
            t,
            event_names,
            step_ids,
            metadata,
            list(group_of[t.collective]),
            _host_name(capture.host, t.rank) if capture.host else None,
            _host_stalls(sc, t),
        )
        write_analysis_db(output / "analysis.db", step_rows, communication, matrix)
    return len(t.start_ns)


def _scenario_of(scenario: str | Scenario, scale: float, **sizes: int | None) -> Scenario:
    """The scenario to write: a named one at the given sizes, its tokens scaled by ``scale``."""
    sc = scenario if isinstance(scenario, Scenario) else named_scenario(scenario, **sizes)
    return sc if scale == 1.0 else replace(sc, tokens=max(1, int(round(sc.tokens * scale))))


def _write_root(out: Path, capture: _Capture, captured: list[RankTimeline], seed: int) -> int:
    """Write the ``captured`` ranks and ground_truth.json into a temp dir beside ``out``, then rename it into
    place (nothing half-written is left at ``out``); returns the rows written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        rows = sum(_write_rank(tmp, t, capture) for t in captured)
        truth = _ground_truth(capture.scenario, seed, captured, capture.step_ids, capture.serving)
        if capture.serving:  # the steps are forwards the capture does not mark
            truth["layout"] = "serving"
        (tmp / "ground_truth.json").write_text(json.dumps(truth, indent=2), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return rows


def generate(
    out: str | Path,
    scenario: str | Scenario = "clean",
    *,
    ranks: int | None = None,
    steps: int | None = None,
    layers: int | None = None,
    scale: float = 1.0,
    seed: int = 0,
    export: str = "text",
    trace: bool = True,
    host: str | None = None,
    overwrite: bool = False,
    serving: bool | None = None,
) -> dict:
    """Generate a synthetic root at ``out`` (written to a temp dir, then renamed into place).

    ``scale`` multiplies the tokens per step (so the kernel durations); ``steps`` and ``layers``
    set the row count (rows per rank ≈ steps × layers × kernels per layer); ``trace`` writes
    trace_view.json (the largest file); ``host`` names the machine the ranks ran on (8 cards per host, in
    the CANN info.json files and the db's HOST_INFO); ``serving`` writes the layout of a capture without
    profiler steps, as vLLM-Ascend's /start_profile … /stop_profile leaves it (no schedule, so no
    ProfilerStep): kernel_details.csv without Step Id, step_trace_time.csv one whole-capture row per
    device with an empty Step, trace_view.json without ProfilerStep spans; each step is then one forward
    (text export only); None: as the scenario is captured (``Scenario.step_marks``). Returns a summary.
    """
    if export not in EXPORTS:
        raise ValueError(f"unknown export {export!r}; choose one of {', '.join(EXPORTS)}")
    sc = _scenario_of(scenario, scale, ranks=ranks, steps=steps, layers=layers)
    serving = not sc.step_marks if serving is None else serving
    if serving and export != "text":
        raise ValueError("a serving layout is written as a text export only")
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out} is not empty")
    started = time.perf_counter()
    topology = topology_of(sc)
    timelines, collectives = simulate(sc, seed, topology)
    step_ids = [FIRST_STEP_ID + s for s in range(sc.steps)]
    names = _hccl_names(collectives)
    capture = _Capture(sc, topology, collectives, names, step_ids, EXPORTS[export], trace, host, serving)
    uncaptured = {r for f in sc.faults if f.kind in UNCAPTURED for r in f.ranks}
    captured = [t for t in timelines if t.rank not in uncaptured]
    rows = _write_root(out, capture, captured, seed)
    return {
        "status": "ok",
        "root": str(out),
        "scenario": sc.name,
        "ranks": len(captured),  # written: a rank left out of the capture is not
        "steps": sc.steps,
        "layers": sc.layers,
        "rows": rows,
        "seconds": round(time.perf_counter() - started, 3),
        "export": export,
    }
