"""summarize: operators, communication ops, where each step's time goes, and per-rank rollups.

Map (per rank): label every event (bound family, communication kind and parallel role), then the
rank's operator table and its step time accounting (compute by bound family, exposed
communication by kind and role, overlap, idle by anatomy window: the parts add up to each step's
wall). Reduce: operators merged over ranks, HCCL tables with rank skew, rank summary and the
summary manifest.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from npuprof import knowledge
from npuprof.pipeline import io, schema
from npuprof.pipeline.modelinfo.context import model_context
from npuprof.pipeline.modelinfo.shape_ops import SHAPE_KEY, shape_operators, step_flops
from npuprof.pipeline.schema import PIPELINE_FIELDS
from npuprof.pipeline.segmentation.features import ordered_events
from npuprof.pipeline.segmentation.windows import window_positions
from npuprof.pipeline.sources.capture_info import rank_capture_info
from npuprof.pipeline.sources.step_trace import read_step_trace_time
from npuprof.pipeline.stages.base import RankContext, RootContext, StageResult
from npuprof.pipeline.summaries.accounting import step_time_accounting
from npuprof.pipeline.summaries.attribution import attribute_bubbles
from npuprof.pipeline.summaries.classes import (
    block_class_ops,
    block_class_summary,
    events_in_blocks,
    layer_class_summary,
    step_class_summary,
)
from npuprof.pipeline.summaries.communication import (
    COMMUNICATION_OP_TYPES,
    communication_kinds,
    communication_ops,
    hccl_class_summary,
    hccl_op_summary,
    parallel_roles,
)
from npuprof.pipeline.summaries.evidence import (
    bubble_windows,
    bubble_windows_jsonl,
    communication_evidence_ids,
    evidence_index,
    operator_evidence_ids,
)
from npuprof.pipeline.summaries.operators import operator_class_summary, operator_summary
from npuprof.pipeline.summaries.pp_schedule import pp_schedule
from npuprof.pipeline.summaries.ranks import rank_summary

SUMMARIZE_INPUT_COLUMNS = [
    "row_idx",
    "start_ns",
    "end_ns",
    "duration_ns",
    "wait_ns",
    "stream_id",
    "name",
    "type",
    "op_type",
    "categories",
    "roles",
    "primary_category",
    "source_id",
    *SHAPE_KEY[3:],
    *PIPELINE_FIELDS,
]


BLOCK_COLUMNS = ["pos_start", "pos_end", "layer_ordinal", "block_kind", "block_class_id"]


def _labelled_events(ctx: RankContext, rank_info: dict) -> pd.DataFrame:
    """The rank's events in device order with kind and role when they communicate."""
    table = ordered_events(ctx, SUMMARIZE_INPUT_COLUMNS)
    events = table.drop_columns(["categories", "roles"]).to_pandas()
    for column in ("categories", "roles"):
        events[column] = pc.fill_null(pc.binary_join(table.column(column), "|"), "").to_pandas()
    events["is_comm"] = events["op_type"].isin(COMMUNICATION_OP_TYPES)
    identity = events["type"].fillna(events["name"])
    events["kind"] = np.where(events["is_comm"], communication_kinds(identity), None)
    roles = parallel_roles(events["name"], rank_info.get("parallel_group_info"), rank_info.get("distributed_args"))
    events["parallel_role"] = np.where(events["is_comm"], roles, None)
    return events


def _operator_family(events: pd.DataFrame, operators: pd.DataFrame) -> np.ndarray:
    """Each event's bound family: that of its operator (the kernel's pipeline time summed over its calls)."""
    if not len(events):
        return np.array([], dtype=object)
    keys = ["name", "type", "op_type"]
    left = events[keys].fillna({"type": ""})
    right = operators[[*keys, "bound_family"]].fillna({"type": ""})
    return left.merge(right, on=keys, how="left")["bound_family"].to_numpy(object)


def _step_of_events(event_count: int, steps: pd.DataFrame) -> np.ndarray:
    """The step ordinal of each event (by segment's positions), NaN for events outside every step."""
    ordinal = np.full(event_count, np.nan)
    positions, step = window_positions(steps["pos_start"].to_numpy(), steps["pos_end"].to_numpy())
    ordinal[positions] = steps["step_ordinal"].to_numpy()[step]
    return ordinal


def map_rank(ctx: RankContext) -> StageResult:
    """Operators and step time accounting of one rank."""
    # from the rank's own files: a map unit never reads what a reduce wrote (the service runs every
    # rank's map units before any reduce of the root)
    rank_info = rank_capture_info(ctx.rank)
    events = _labelled_events(ctx, rank_info)
    steps = ctx.read_table(schema.STEP_SEGMENTS).to_pandas().sort_values("step_ordinal").reset_index(drop=True)
    layers = ctx.read_table(schema.LAYER_SEGMENTS, columns=["step_ordinal", "start_ns", "end_ns"]).to_pandas()
    spans = layers.groupby("step_ordinal").agg(main_start_ns=("start_ns", "min"), main_end_ns=("end_ns", "max"))
    events["step_ordinal"] = _step_of_events(len(events), steps)
    operators = operator_summary(events) if len(events) else pd.DataFrame()
    operators.insert(0, "evidence_id", operator_evidence_ids(ctx.rank.rank_id, len(operators)))
    events["bound_family"] = _operator_family(events, operators)
    accounting, idle_gaps = step_time_accounting(events, steps, spans.reset_index()) if len(steps) else (None, None)
    min_ns = int(knowledge.load("diagnosis_rules")["bubble_min_us"] * 1000)
    bubbles = bubble_windows(ctx.rank.rank_id, events, idle_gaps, steps, min_ns) if len(steps) else pd.DataFrame()
    bubbles, host_trace = attribute_bubbles(ctx.rank, bubbles, ctx.options.host_trace)
    blocks = ctx.read_table(schema.BLOCK_SEGMENTS, columns=BLOCK_COLUMNS).to_pandas()
    for column, values in events_in_blocks(len(events), blocks).items():  # new columns, no copy of the rest
        events[column] = values.to_numpy() if values.dtype.kind == "f" else values.array
    shapes, shape_of_event = shape_operators(events)
    shapes = _with_operator_ids(shapes, operators)
    flops = step_flops(events, shape_of_event, shapes, steps)
    comm, comm_rows, ops, links, comm_source = _communication(ctx, events, steps, rank_info)
    source_id = events["source_id"].iloc[0] if len(events) else None
    evidence = evidence_index(ctx.rank, source_id, steps, bubbles, operators, comm_rows)
    manifest = {
        "rank_id": ctx.rank.rank_id,
        "communication_source": comm_source if len(comm) or len(ops) else None,
        "event_count": int(len(events)),
        "operator_count": int(len(operators)),
        "pipeline_event_count": int(events[list(PIPELINE_FIELDS)].notna().any(axis=1).sum()),
        "communication_event_count": int(len(comm)),
        "communication_roles": {str(k): int(v) for k, v in comm["parallel_role"].value_counts().items()},
        "communication_groups_known": bool(rank_info.get("parallel_group_info")),
        "bubble_window_count": int(len(bubbles)),
        "host_trace": host_trace,
    }
    tables = {
        schema.OPERATOR_SUMMARY: operators,
        schema.STEP_TIME_ACCOUNTING: accounting if accounting is not None else pd.DataFrame(),
        schema.COMMUNICATION_EVENTS: comm_rows,
        schema.COMMUNICATION_OPS: ops,
        schema.COMMUNICATION_LINKS: links,
        schema.BUBBLE_WINDOWS: bubbles,
        schema.EVIDENCE_INDEX: evidence,
        schema.BLOCK_CLASS_OPS: block_class_ops(events),
        schema.OPERATOR_SHAPES: shapes,
        schema.STEP_FLOPS: flops,
    }
    return StageResult(tables=tables, manifest=manifest)


def _with_operator_ids(shapes: pd.DataFrame, operators: pd.DataFrame) -> pd.DataFrame:
    """Shape ops with the evidence id of the operator (name, type, op type) they are calls of."""
    if shapes.empty:
        return shapes.assign(evidence_id=pd.Series(dtype=object))
    keys = ["name", "type", "op_type"]
    ids = operators[[*keys, "evidence_id"]].fillna({"type": ""})
    joined = shapes.fillna({"type": ""}).merge(ids, on=keys, how="left")
    joined["type"] = joined["type"].replace("", None)
    return joined


def _communication(ctx: RankContext, events: pd.DataFrame, steps: pd.DataFrame, rank_info: dict):
    """(communication events, their table rows, ops, links, where the ops came from) of one rank."""
    comm = events[events["is_comm"]]
    comm_rows = comm.assign(
        duration_us=comm["duration_ns"] / 1000.0,
        wait_us=comm["wait_ns"].fillna(0) / 1000.0,
        comm_aiv_fused=comm["op_type"] == "mix_comm_aiv",
        evidence_id=communication_evidence_ids(ctx.rank.rank_id, comm["row_idx"].to_numpy()),
    )[list(schema.COMMUNICATION_EVENTS.columns)]
    step_ids = steps.set_index("step_ordinal")["step_id"]
    ops, links, source = communication_ops(ctx.rank.supplemental, comm, step_ids, rank_info)
    return comm, comm_rows, ops, links, source


def reduce_root(ctx: RootContext) -> StageResult:
    """Operators over ranks, HCCL tables with rank skew, rank summary, the summarize manifest."""
    operators = ctx.read_frame(schema.OPERATOR_SUMMARY)
    comm = ctx.read_frame(schema.COMMUNICATION_EVENTS)
    accounting = ctx.read_frame(schema.STEP_TIME_ACCOUNTING)
    step_classes = ctx.read_frame(schema.STEP_CLASSES)
    operator_classes = operator_class_summary(operators) if len(operators) else pd.DataFrame()
    hccl_ops = hccl_op_summary(comm) if len(comm) else pd.DataFrame()
    hccl_classes = hccl_class_summary(hccl_ops) if len(hccl_ops) else pd.DataFrame()
    step_trace = _step_trace_accounting(ctx)
    ranks = rank_summary(ctx.rank_manifests, step_classes, accounting, step_trace)
    views = {
        schema.OPERATOR_SUMMARY_CSV: schema.join_view(schema.OPERATOR_SUMMARY_CSV, [operators]),
        schema.STEP_TIME_ACCOUNTING_CSV: schema.join_view(schema.STEP_TIME_ACCOUNTING_CSV, [accounting]),
        schema.OPERATOR_CLASS_SUMMARY_CSV: _conformed(schema.OPERATOR_CLASS_SUMMARY, operator_classes),
        schema.HCCL_OP_SUMMARY_CSV: _conformed(schema.HCCL_OP_SUMMARY, hccl_ops),
        schema.HCCL_CLASS_SUMMARY_CSV: _conformed(schema.HCCL_CLASS_SUMMARY, hccl_classes),
        schema.RANK_SUMMARY_CSV: _conformed(schema.RANK_SUMMARY, ranks),
        schema.PP_SCHEDULE_CSV: _pp_schedule(ctx, accounting),
        schema.STEP_TRACE_ACCOUNTING_CSV: step_trace,
        schema.COMMUNICATION_SUMMARY_CSV: schema.join_view(
            schema.COMMUNICATION_SUMMARY_CSV, [ctx.read_frame(schema.COMMUNICATION_OPS)]
        ),
        schema.COMMUNICATION_LINKS_CSV: schema.join_view(
            schema.COMMUNICATION_LINKS_CSV, [ctx.read_frame(schema.COMMUNICATION_LINKS)]
        ),
    }
    views.update(_class_views(ctx, step_classes))
    model_views, model_documents, model_manifest = model_context(
        ctx.read_frame(schema.OPERATOR_SHAPES),
        ctx.read_frame(schema.STEP_FLOPS),
        accounting,
        views[schema.LAYER_CLASS_SUMMARY_CSV],
        io.read_json_or_empty(ctx.out_dir / schema.stage_manifest_name("segment")),
        io.read_json_or_empty(ctx.out_dir / schema.CAPTURE_INFO),
        ctx.options,
        ctx.inputs.root if ctx.inputs else None,
    )
    views[schema.OPERATOR_SHAPES_CSV] = schema.join_view(
        schema.OPERATOR_SHAPES_CSV, [ctx.read_frame(schema.OPERATOR_SHAPES)]
    )
    views.update({view: _conformed(view.tables[0], frame) for view, frame in model_views.items()})
    manifest = _root_manifest(sorted(ctx.rank_manifests, key=lambda m: m["rank_id"]), len(operator_classes))
    manifest["bubble_window_count"] = sum(int(m["bubble_window_count"]) for m in ctx.rank_manifests)
    manifest["model"] = model_manifest
    manifest["limitations"] += model_manifest["limitations"]
    return StageResult(
        csv_views=views,
        json_files=model_documents,
        rendered={
            schema.BUBBLE_WINDOWS_JSONL: _bubble_jsonl_chunks(ctx),
            schema.EVIDENCE_INDEX_CSV.file: _evidence_csv_chunks(ctx),
        },
        manifest=manifest,
    )


def _rank_frames(ctx: RootContext, table: schema.Table) -> Iterator[pd.DataFrame]:
    """``table`` one rank at a time (rank order), with its ``rank_id``: the evidence files of a root
    are written rank by rank, never held whole."""
    for rank_id in sorted(int(m["rank_id"]) for m in ctx.rank_manifests):
        part = io.read_dataset(ctx.out_dir, table, rank_id)
        yield part.append_column(schema.RANK_PARTITION_KEY, pa.array([rank_id] * part.num_rows, pa.int32())).to_pandas()


def _bubble_jsonl_chunks(ctx: RootContext) -> Iterator[bytes]:
    """evidence/bubble_windows.jsonl: every rank's idle windows by start time, ranks in order."""
    for bubbles in _rank_frames(ctx, schema.BUBBLE_WINDOWS):
        yield bubble_windows_jsonl(bubbles.sort_values("start_ns", kind="stable"))


def _evidence_csv_chunks(ctx: RootContext) -> Iterator[bytes]:
    """evidence_index.csv, rank by rank (the header once)."""
    header = True
    for frame in _rank_frames(ctx, schema.EVIDENCE_INDEX):
        if frame.empty:
            continue
        yield from io.csv_chunks(schema.join_view(schema.EVIDENCE_INDEX_CSV, [frame]), header=header)
        header = False
    if header:  # no rank has evidence: the declared columns
        yield from io.csv_chunks(pd.DataFrame(columns=list(schema.EVIDENCE_INDEX_CSV.columns)))


def _class_views(ctx: RootContext, steps: pd.DataFrame) -> dict:
    """block / layer / step class summaries over every member of every rank (``steps``: step_classes)."""
    blocks, layers = ctx.read_frame(schema.BLOCK_SEGMENTS), ctx.read_frame(schema.LAYER_CLASSES)
    anatomy = ctx.read_frame(schema.STEP_ANATOMY)
    tables = {
        schema.BLOCK_CLASS_SUMMARY_CSV: (
            block_class_summary(blocks, ctx.read_frame(schema.BLOCK_CLASS_OPS)) if len(blocks) else None
        ),
        schema.LAYER_CLASS_SUMMARY_CSV: layer_class_summary(layers, blocks) if len(layers) else None,
        schema.STEP_CLASS_SUMMARY_CSV: step_class_summary(steps, anatomy, layers) if len(steps) else None,
    }
    return {
        view: _conformed(view.tables[0], frame if frame is not None else pd.DataFrame())
        for view, frame in tables.items()
    }


def _root_manifest(rank_manifests: list[dict], operator_class_count: int) -> dict:
    """summarize's manifest: coverage, which inputs each table used, and what the data could not say."""
    events = sum(m["event_count"] for m in rank_manifests)
    with_pipeline = sum(m["pipeline_event_count"] for m in rank_manifests)
    limitations = []
    if not all(m["communication_groups_known"] for m in rank_manifests if m["communication_event_count"]):
        limitations.append("some ranks have no parallel_group_info: their communication roles are unknown")
    from_events = [m["rank_id"] for m in rank_manifests if m.get("communication_source") == "events"]
    if from_events:
        limitations.append(
            f"ranks {from_events} have no communication.json: their communication ops come from the events "
            "alone (no transit / wait split, no bandwidth)"
        )
    traced = [m["rank_id"] for m in rank_manifests if m.get("host_trace", {}).get("status") == "ok"]
    untraced = [
        m["rank_id"] for m in rank_manifests if m.get("host_trace", {}).get("status") in ("missing", "unreadable")
    ]
    if untraced:
        limitations.append(
            f"ranks {untraced} have no readable trace_view.json: their idle windows carry no host labels"
        )
    if events and not with_pipeline:
        limitations.append("no PMU (pipeline) data: compute is not split by bound family (unknown)")
    return {
        "rank_count": len(rank_manifests),
        "event_count": events,
        "operator_class_count": int(operator_class_count),
        "pipeline_coverage": {
            "events_with_pipeline": with_pipeline,
            "event_share": with_pipeline / events if events else None,
        },
        "inputs": {
            "operators": "normalized_events (kernel_details.csv / profiler db)",
            "communication": "normalized_events communication ops; roles from profiler_metadata parallel_group_info",
            schema.COMMUNICATION_OPS.name: "communication.json per rank (else the events)",
            schema.COMMUNICATION_LINKS.name: "communication_matrix.json per rank",
            "time_accounting": "normalized_events in segment's steps; anatomy windows from layer_segments",
            schema.BUBBLE_WINDOWS.name: "idle gaps of the time accounting, at least bubble_min_us long",
        },
        "limitations": limitations,
        "host_trace": {
            "ranks_attributed": traced,
            "by_rank": {str(m["rank_id"]): m.get("host_trace") for m in rank_manifests},
        },
        "rank_summaries": rank_manifests,
    }


def _pp_schedule(ctx: RootContext, accounting: pd.DataFrame) -> pd.DataFrame:
    capture_info = io.read_json_or_empty(ctx.out_dir / schema.CAPTURE_INFO)
    steps, layers = ctx.read_frame(schema.STEP_SEGMENTS), ctx.read_frame(schema.LAYER_SEGMENTS)
    return _conformed(schema.PP_SCHEDULE, pp_schedule(capture_info, steps, layers, accounting))


def _step_trace_accounting(ctx: RootContext) -> pd.DataFrame:
    """The profiler's own step split (step_trace_time.csv) of each rank without device events, so
    the headline and the rank table still cover it; ranks with events are accounted from them."""
    without_events = {int(m["rank_id"]) for m in ctx.rank_manifests if not m["event_count"]}
    frames = []
    for rank in ctx.inputs.ranks if ctx.inputs else []:
        path = rank.supplemental.get("step_trace_time_csv")
        if rank.rank_id in without_events and path:
            frames.append(read_step_trace_time(path).assign(rank_id=rank.rank_id, source_path=path))
    return _conformed(schema.STEP_TRACE_ACCOUNTING, pd.concat(frames, ignore_index=True) if frames else pd.DataFrame())


def _conformed(table: schema.Table, frame: pd.DataFrame) -> pd.DataFrame:
    """A root-level table with exactly its declared columns (all of them, also when empty)."""
    return table.conform(frame).to_pandas()


def headline(manifest: dict) -> tuple[dict, list[str]]:
    """summarize's part of the result JSON: coverage and limitations."""
    return {
        "operator_class_count": manifest["operator_class_count"],
        "pipeline_event_share": manifest["pipeline_coverage"]["event_share"],
        "limitations": manifest["limitations"],
    }, []
