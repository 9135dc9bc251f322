"""summarize: operators, communication ops, where each step's time goes, and per-rank rollups.

Map (per rank): label every event (bound family, communication kind and parallel role), then the
rank's operator table and its step time accounting (compute by bound family, exposed
communication by kind and role, overlap, idle by anatomy window: the parts add up to each step's
wall). Reduce: operators merged over ranks, rank summary, the pipeline schedule, the block class
summary and the summary manifest. The idle windows and the evidence index are the evidence stage's;
shapes, FLOPs and the model fingerprint the model stage's; the HCCL tables cross_rank's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from npuprof.pipeline import io, schema
from npuprof.pipeline.distinct import text_array
from npuprof.pipeline.evidence_ids import communication_evidence_ids, operator_evidence_ids
from npuprof.pipeline.schema import PIPELINE_FIELDS
from npuprof.pipeline.segmentation.features import ordered_events
from npuprof.pipeline.sources.analysis_db import read_analysis_links, read_analysis_ops
from npuprof.pipeline.sources.auxiliary import note_text, read_auxiliary
from npuprof.pipeline.sources.capture_info import rank_capture_info
from npuprof.pipeline.sources.communication_files import read_communication_json, read_communication_matrix
from npuprof.pipeline.sources.step_trace import read_step_trace_time
from npuprof.pipeline.stages.base import RankContext, RootContext, StageResult, conformed
from npuprof.pipeline.stages.rank_reads import add_block_columns, layer_spans, rank_steps, step_of_events
from npuprof.pipeline.stages.summarize.ranks import rank_summary
from npuprof.pipeline.summaries.accounting import step_time_accounting
from npuprof.pipeline.summaries.classes import (
    block_class_ops,
    block_class_summary,
)
from npuprof.pipeline.summaries.communication import (
    ANALYSIS_DB,
    COMMUNICATION_JSON,
    COMMUNICATION_OP_TYPES,
    agreed_roles,
    communication_kinds,
    communication_ops,
    parallel_roles,
)
from npuprof.pipeline.summaries.op_parts import communication_parts
from npuprof.pipeline.summaries.operators import operator_class_summary, operator_summary
from npuprof.pipeline.summaries.overlap import compute_beside_us
from npuprof.pipeline.summaries.pp_schedule import pp_schedule

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
    *PIPELINE_FIELDS,
]


def _labelled_events(ctx: RankContext, rank_info: dict) -> pd.DataFrame:
    """The rank's events in device order with kind and role when they communicate."""
    table = ordered_events(ctx, SUMMARIZE_INPUT_COLUMNS)
    events = table.drop_columns(["categories", "roles"]).to_pandas()
    for column in ("categories", "roles"):
        events[column] = pc.fill_null(pc.binary_join(table.column(column), "|"), "").to_pandas()
    events["is_comm"] = events["op_type"].isin(COMMUNICATION_OP_TYPES)
    # kind and role are the communication events' alone: named for them only (a few in a thousand)
    is_comm = events["is_comm"].to_numpy()
    comm = events.loc[is_comm, ["type", "name"]]
    comm_kinds = communication_kinds(comm["type"].fillna(comm["name"]))
    comm_roles = parallel_roles(
        comm["name"],
        rank_info.get("parallel_group_info"),
        rank_info.get("distributed_args"),
        pd.Series(comm_kinds, index=comm.index, dtype=object),
    )
    events["kind"], events["parallel_role"] = _on_comm_events(comm_kinds, is_comm), _on_comm_events(comm_roles, is_comm)
    return events


def _on_comm_events(values: np.ndarray, is_comm: np.ndarray) -> Any:
    """A column of ``values`` on the communication events and nothing elsewhere, as assigning an object
    array of them makes it (text, dtype str; None everywhere when no event has a value), built from codes
    so that pandas checks no Python object per event."""
    codes, labels = pd.factorize(np.asarray(values, dtype=object))  # a missing value: code -1
    if not len(labels):
        return np.full(len(is_comm), None, dtype=object)
    everyone = np.full(len(is_comm), -1)
    everyone[is_comm] = codes
    return text_array(everyone, labels)


def _operator_family(events: pd.DataFrame, operators: pd.DataFrame) -> np.ndarray:
    """Each event's bound family: that of its operator (the kernel's pipeline time summed over its calls)."""
    if not len(events):
        return np.array([], dtype=object)
    keys = ["name", "type", "op_type"]
    left = events[keys].fillna({"type": ""})
    right = operators[[*keys, "bound_family"]].fillna({"type": ""})
    return left.merge(right, on=keys, how="left")["bound_family"].to_numpy(object)


def map_rank(ctx: RankContext) -> StageResult:
    """Operators, communication and step time accounting of one rank."""
    # from the rank's own files: a map unit never reads what a reduce wrote (the service runs every
    # rank's map units before any reduce of the root)
    rank_info = rank_capture_info(ctx.rank)
    events = _labelled_events(ctx, rank_info)
    steps = rank_steps(ctx)
    events["step_ordinal"] = step_of_events(len(events), steps)
    operators = operator_summary(events) if len(events) else pd.DataFrame()
    operators.insert(0, "evidence_id", operator_evidence_ids(ctx.rank.rank_id, len(operators)))
    events["bound_family"] = _operator_family(events, operators)
    add_block_columns(ctx, events)
    comm, comm_rows, ops, links, comm_source, unreadable = _communication(ctx, events, steps, rank_info)
    if len(steps):
        parts = communication_parts(events, ops, steps.set_index("step_ordinal")["step_id"])
        accounting = step_time_accounting(events, steps, layer_spans(ctx), parts)
    else:
        accounting = pd.DataFrame()
    manifest = _rank_manifest(ctx.rank.rank_id, comm_source if len(comm) or len(ops) else None, rank_info, unreadable)
    manifest.update(
        event_count=int(len(events)),
        operator_count=int(len(operators)),
        pipeline_event_count=int(events[list(PIPELINE_FIELDS)].notna().any(axis=1).sum()),
        communication_event_count=int(len(comm)),
        communication_roles={str(k): int(v) for k, v in comm["parallel_role"].value_counts().items()},
    )
    tables = {
        schema.OPERATOR_SUMMARY: operators,
        schema.STEP_TIME_ACCOUNTING: accounting,
        schema.COMMUNICATION_EVENTS: comm_rows,
        schema.COMMUNICATION_OPS: ops,
        schema.COMMUNICATION_LINKS: links,
        schema.BLOCK_CLASS_OPS: block_class_ops(events),
    }
    return StageResult(tables=tables, manifest=manifest)


def map_eventless(ctx: RankContext) -> StageResult:
    """map_rank for a rank without device events: its communication ops and links as its communication
    files give them (no events to agree roles with)."""
    rank_info = rank_capture_info(ctx.rank)
    files, file_source, unreadable = _communication_files(ctx)
    columns = ("step_ordinal", "kind", "name", "parallel_role", "start_ns", "duration_ns")
    no_events = pd.DataFrame({c: [] for c in columns})
    ops, links, source = communication_ops(*files, no_events, pd.Series(dtype="int64"), rank_info, file_source)
    manifest = _rank_manifest(ctx.rank.rank_id, source if len(ops) else None, rank_info, unreadable)
    tables = {schema.COMMUNICATION_OPS: ops, schema.COMMUNICATION_LINKS: links}
    return StageResult(tables=tables, manifest=manifest)


def _rank_manifest(rank_id: int, comm_source: str | None, rank_info: dict, unreadable: list[dict]) -> dict:
    """A rank's manifest, its counts zero (map_rank sets those of a rank with events)."""
    return {
        "rank_id": rank_id,
        "communication_source": comm_source,
        "event_count": 0,
        "operator_count": 0,
        "pipeline_event_count": 0,
        "communication_event_count": 0,
        "communication_roles": {},
        "communication_groups_known": bool(rank_info.get("parallel_group_info")),
        "unreadable_inputs": unreadable,
    }


def _communication(ctx: RankContext, events: pd.DataFrame, steps: pd.DataFrame, rank_info: dict):
    """(communication events, their table rows, ops, links, where the ops came from) of one rank. Every
    table gets one role per op (``agreed_roles``): ``events`` is updated in place."""
    step_ids = steps.set_index("step_ordinal")["step_id"]
    files, file_source, unreadable = _communication_files(ctx)
    ops, links, source = communication_ops(*files, events[events["is_comm"]], step_ids, rank_info, file_source)
    if len(ops):
        is_comm = events["is_comm"].to_numpy(bool)  # only communication events have a role to agree on
        named = events.loc[is_comm, "name"]
        agreed = agreed_roles(named, events.loc[is_comm, "parallel_role"], ops["op_name"], ops["parallel_role"])
        events["parallel_role"], ops["parallel_role"] = _on_comm_events(agreed[0], is_comm), agreed[1]
    comm = events[events["is_comm"]]
    comm_rows = comm.assign(
        duration_us=comm["duration_ns"] / 1000.0,
        wait_us=comm["wait_ns"].fillna(0) / 1000.0,
        comm_aiv_fused=comm["op_type"] == "mix_comm_aiv",
        compute_beside_us=compute_beside_us(events[["is_comm", "start_ns", "end_ns"]]),
        evidence_id=communication_evidence_ids(ctx.rank.rank_id, comm["row_idx"].to_numpy()),
    )[list(schema.COMMUNICATION_EVENTS.columns)]
    return comm, comm_rows, ops, links, source, unreadable


def _communication_files(ctx: RankContext) -> tuple[tuple, str, list[dict]]:
    """((its ops, its links), where they came from, notes): from communication.json and
    communication_matrix.json, else from a db export's analysis.db (the same records as tables); None
    for what the rank lacks or cannot be read (its note says so and what is used instead)."""
    ops_fallback = "its communication ops come from the device events"
    links_fallback = "its links (bandwidth per link) are unknown"
    supplemental = ctx.rank.supplemental
    if "communication_json" not in supplemental and "analysis_db" in supplemental:
        readers = (
            ("analysis_db", read_analysis_ops, ops_fallback),
            ("analysis_db", read_analysis_links, links_fallback),
        )
        source = ANALYSIS_DB
    else:
        readers = (
            ("communication_json", read_communication_json, ops_fallback),
            ("communication_matrix_json", read_communication_matrix, links_fallback),
        )
        source = COMMUNICATION_JSON
    found, unreadable = [], []
    for key, reader, fallback in readers:
        path = supplemental.get(key)
        value, note = read_auxiliary(reader, path, ctx.rank.rank_id, fallback) if path else (None, None)
        found.append(value)
        unreadable += [note] if note else []
    return tuple(found), source, unreadable


def reduce_root(ctx: RootContext) -> StageResult:
    """Operators over ranks, rank summary, the pipeline schedule, class summaries, the summarize
    manifest (the HCCL tables, read over every rank's collectives, are cross_rank's)."""
    operators = ctx.read_frame(schema.OPERATOR_SUMMARY)
    accounting = ctx.read_frame(schema.STEP_TIME_ACCOUNTING)
    step_classes = ctx.read_frame(schema.STEP_CLASSES)
    operator_classes = operator_class_summary(operators) if len(operators) else pd.DataFrame()
    step_trace, unreadable = _step_trace_accounting(ctx)
    ranks = rank_summary(ctx.rank_manifests, step_classes, accounting, step_trace)
    views = {
        schema.OPERATOR_SUMMARY_CSV: schema.join_view(schema.OPERATOR_SUMMARY_CSV, [operators]),
        schema.OPERATOR_CLASS_SUMMARY_CSV: conformed(schema.OPERATOR_CLASS_SUMMARY, operator_classes),
        schema.RANK_SUMMARY_CSV: conformed(schema.RANK_SUMMARY, ranks),
        schema.PP_SCHEDULE_CSV: _pp_schedule(ctx, accounting),
        schema.STEP_TRACE_ACCOUNTING_CSV: step_trace,
    }
    views[schema.BLOCK_CLASS_SUMMARY_CSV] = _block_class_summary(ctx)
    manifest = _root_manifest(sorted(ctx.rank_manifests, key=lambda m: m["rank_id"]), len(operator_classes))
    manifest["unreadable_inputs"] += unreadable
    manifest["limitations"] += [note_text(note) for note in unreadable]
    return StageResult(csv_views=views, manifest=manifest)


def _block_class_summary(ctx: RootContext) -> pd.DataFrame:
    """Block classes over every member of every rank, with the operators they run."""
    blocks = ctx.read_frame(schema.BLOCK_SEGMENTS)
    table = block_class_summary(blocks, ctx.read_frame(schema.BLOCK_CLASS_OPS)) if len(blocks) else pd.DataFrame()
    return conformed(schema.BLOCK_CLASS_SUMMARY, table)


def _root_manifest(rank_manifests: list[dict], operator_class_count: int) -> dict:
    """summarize's manifest: coverage, which inputs each table used, and what the data could not say."""
    events = sum(m["event_count"] for m in rank_manifests)
    with_pipeline = sum(m["pipeline_event_count"] for m in rank_manifests)
    unreadable = [note for m in rank_manifests for note in m.get("unreadable_inputs", [])]
    limitations = [note_text(note) for note in unreadable]
    if not all(m["communication_groups_known"] for m in rank_manifests if m["communication_event_count"]):
        limitations.append("some ranks have no parallel_group_info: their communication roles are unknown")
    from_events = [m["rank_id"] for m in rank_manifests if m.get("communication_source") == "events"]
    if from_events:
        limitations.append(
            f"ranks {from_events} have no communication.json: their communication ops come from the events "
            "alone (no transit / wait split, no bandwidth)"
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
        },
        "limitations": limitations,
        "unreadable_inputs": unreadable,
        "rank_summaries": rank_manifests,
    }


def _pp_schedule(ctx: RootContext, accounting: pd.DataFrame) -> pd.DataFrame:
    capture_info = io.read_json_or_empty(ctx.out_dir / schema.CAPTURE_INFO)
    steps, layers = ctx.read_frame(schema.STEP_SEGMENTS), ctx.read_frame(schema.LAYER_SEGMENTS)
    return conformed(schema.PP_SCHEDULE, pp_schedule(capture_info, steps, layers, accounting))


def _step_trace_accounting(ctx: RootContext) -> tuple[pd.DataFrame, list[dict]]:
    """The profiler's own step split (step_trace_time.csv) of each rank without device events, so
    the headline and the rank table still cover it (ranks with events are accounted from them); and
    the notes of the files that could not be read."""
    without_events = {int(m["rank_id"]) for m in ctx.rank_manifests if not m["event_count"]}
    frames, ranks, paths, unreadable = [], [], [], []
    fallback = "the rank has no time accounting (no device events, no readable step split)"
    for rank in ctx.inputs.ranks if ctx.inputs else []:
        path = rank.supplemental.get("step_trace_time_csv")
        if rank.rank_id in without_events and path:
            frame, note = read_auxiliary(read_step_trace_time, path, rank.rank_id, fallback)
            if frame is not None:  # each rank's rows labelled once, all together: a root may have thousands
                frames.append(frame)
                ranks.append(np.full(len(frame), rank.rank_id))
                paths.append(np.full(len(frame), path, dtype=object))
            unreadable += [note] if note else []
    if not frames:
        return conformed(schema.STEP_TRACE_ACCOUNTING, pd.DataFrame()), unreadable
    table = pd.concat(frames, ignore_index=True).drop(columns="preparing_ms")
    table = table.assign(rank_id=np.concatenate(ranks), source_path=np.concatenate(paths))
    return conformed(schema.STEP_TRACE_ACCOUNTING, table), unreadable


def headline(manifest: dict) -> tuple[dict, list[str]]:
    """summarize's part of the result JSON: coverage and limitations."""
    return {
        "operator_class_count": manifest["operator_class_count"],
        "pipeline_event_share": manifest["pipeline_coverage"]["event_share"],
        "limitations": manifest["limitations"],
    }, []
