"""cross_rank (per root): collectives matched across ranks, each rank's clock offset, and the
alignment of collectives, steps and layers on the corrected clock.

Reads summarize's communication events and ops and segment's steps and layers; never rewrites a
rank's segments. Writes ``collective_alignment`` (instance × rank), ``cross_rank_alignment.csv``
(one row per aligned unit), the HCCL tables with rank skew, every rank's communication ops and
links in one CSV each, and a manifest with offsets, match rates and unmatched ops.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline import io, schema
from npuprof.pipeline.stages.base import RootContext, StageResult, conformed
from npuprof.pipeline.stages.cross_rank.alignment import (
    collective_units,
    corrected,
    layer_units,
    step_units,
    with_communication_split,
)
from npuprof.pipeline.stages.cross_rank.clock import clock_offsets
from npuprof.pipeline.stages.cross_rank.hccl import hccl_class_summary, hccl_op_summary
from npuprof.pipeline.stages.cross_rank.matching import collective_instances, rank_components
from npuprof.pipeline.summaries.communication import group_ranks_of_names

UNMATCHED_SAMPLE = 10
STEP_COLUMNS = ["step_ordinal", "step_id", "start_ns", "end_ns", "main_layer_count"]
LAYER_COLUMNS = ["step_ordinal", "layer_ordinal", "start_ns", "end_ns"]


def _steps_and_layers(ctx: RootContext) -> tuple[pd.DataFrame, pd.DataFrame]:
    steps = ctx.read_table(schema.STEP_SEGMENTS, columns=STEP_COLUMNS).to_pandas()
    steps["rank_id"] = steps["rank_id"].astype(np.int64)
    layers = ctx.read_table(schema.LAYER_SEGMENTS, columns=LAYER_COLUMNS).to_pandas()
    layers["rank_id"] = layers["rank_id"].astype(np.int64)
    layers = layers.merge(steps[["rank_id", "step_ordinal", "step_id"]], on=["rank_id", "step_ordinal"], how="left")
    return steps, layers


def reduce_root(ctx: RootContext) -> StageResult:
    """Match, fit the clocks, align; the manifest reports offsets and what did not match."""
    events = ctx.read_frame(schema.COMMUNICATION_EVENTS)
    steps, layers = _steps_and_layers(ctx)
    rank_ids = sorted(int(m["rank_id"]) for m in ctx.rank_manifests) or sorted(steps["rank_id"].unique().tolist())
    instances, by_step = collective_instances(events, steps)
    if instances["rank_id"].nunique() >= 2:
        components = rank_components(instances)
        fit = clock_offsets(instances, components)
        offsets, residual, used = fit.offsets_ns.reindex(rank_ids).fillna(0.0), fit.residual_us, fit.instance_count
        fit_note = None
    else:
        offsets, residual, used = pd.Series(0.0, index=rank_ids), float("nan"), 0
        fit_note = "fewer than two ranks communicate: nothing to align, clock offsets assumed 0"
        components = pd.Series({r: r for r in rank_ids}, dtype="int64")
    ops = ctx.read_frame(schema.COMMUNICATION_OPS)  # read once: a root of many ranks has a file per rank
    aligned = with_communication_split(corrected(instances, offsets), ops)
    parts = [collective_units(aligned), step_units(steps, offsets), layer_units(layers, offsets)]
    parts = [frame for frame in parts if len(frame)]
    units = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=schema.CROSS_RANK_ALIGNMENT.columns)
    manifest = _manifest(aligned, offsets, components, by_step, residual, used, fit_note)
    manifest.update(_uncaptured_partners(ctx, aligned, rank_ids))
    return StageResult(
        tables={
            schema.COLLECTIVE_ALIGNMENT: aligned[list(schema.COLLECTIVE_ALIGNMENT.columns)]
            if len(aligned)
            else aligned,
            schema.CROSS_RANK_ALIGNMENT: units,
        },
        csv_views={
            schema.CROSS_RANK_ALIGNMENT_CSV: schema.CROSS_RANK_ALIGNMENT.conform(units).to_pandas(),
            **_collective_views(ctx, events, ops),
        },
        manifest=manifest,
    )


def _collective_views(ctx: RootContext, events: pd.DataFrame, ops: pd.DataFrame) -> dict:
    """The HCCL tables with rank skew, and every rank's communication ops (``ops``) and links in one CSV each."""
    hccl_ops = hccl_op_summary(events) if len(events) else pd.DataFrame()
    hccl_classes = hccl_class_summary(hccl_ops) if len(hccl_ops) else pd.DataFrame()
    return {
        schema.HCCL_OP_SUMMARY_CSV: conformed(schema.HCCL_OP_SUMMARY, hccl_ops),
        schema.HCCL_CLASS_SUMMARY_CSV: conformed(schema.HCCL_CLASS_SUMMARY, hccl_classes),
        schema.COMMUNICATION_SUMMARY_CSV: schema.join_view(schema.COMMUNICATION_SUMMARY_CSV, [ops]),
        schema.COMMUNICATION_LINKS_CSV: schema.join_view(
            schema.COMMUNICATION_LINKS_CSV, [ctx.read_frame(schema.COMMUNICATION_LINKS)]
        ),
    }


def _uncaptured_partners(ctx: RootContext, aligned: pd.DataFrame, rank_ids: list[int]) -> dict:
    """Unmatched instances whose group has no other captured rank cannot match: count them apart,
    and give the match rate over the groups the capture can compare."""
    lonely = aligned[aligned["member_count"] < 2] if len(aligned) else aligned
    capture = io.read_json_or_empty(ctx.out_dir / schema.CAPTURE_INFO)
    infos = [r.get("parallel_group_info") for r in capture.get("ranks", [])]
    names = lonely["name"].drop_duplicates()
    captured = set(rank_ids)
    alone = {
        name
        for name, ranks in zip(names, group_ranks_of_names(names, infos))
        if ranks is not None and len(captured & set(ranks)) < 2
    }
    uncapturable = int(lonely["name"].isin(alone).sum())
    instances = int(aligned["alignment_id"].nunique()) if len(aligned) else 0
    matched = instances - int(len(lonely))
    comparable = instances - uncapturable
    return {
        "unmatched_partner_not_captured": uncapturable,
        "match_rate_captured_groups": matched / comparable if comparable else None,
    }


def _manifest(aligned, offsets, components, by_step, residual, used, note) -> dict:
    """Offsets (µs) per rank, how many instances matched, and a sample of those that did not."""
    instance_count = int(aligned["alignment_id"].nunique()) if len(aligned) else 0
    matched = int(aligned.loc[aligned["member_count"] >= 2, "alignment_id"].nunique()) if len(aligned) else 0
    comparable = len(aligned) and aligned["rank_id"].nunique() >= 2
    lonely = aligned[aligned["member_count"] < 2] if len(aligned) else aligned
    limitations = [note] if note else []
    if components.nunique() > 1:
        limitations.append(
            f"{components.nunique()} groups of ranks share no collective: offsets are relative within each group"
        )
    if len(aligned) and not by_step:
        limitations.append("steps carry no ids on some rank: collectives are matched over the whole capture")
    return {
        "rank_count": int(len(offsets)),
        "clock_offsets_us": {str(int(r)): round(float(v) / 1000.0, 3) for r, v in offsets.items()},
        "offset_method": "alternating medians of collective end times (a collective ends together on all members)",
        "offset_residual_us": None if residual != residual else round(residual, 3),
        "offset_instances_used": used,
        "rank_groups": {str(int(r)): int(c) for r, c in components.items()},
        "matched_by": "step_id, name, occurrence" if by_step else "name, occurrence",
        "collective_instances": instance_count,
        "matched_instances": matched,
        "match_rate": matched / instance_count if instance_count and comparable else None,
        "unmatched_instances": int(instance_count - matched),
        "unmatched_sample": [
            {"rank_id": int(r), "name": n, "step_id": None if pd.isna(s) else int(s)}
            for r, n, s in lonely[["rank_id", "name", "step_id"]].head(UNMATCHED_SAMPLE).itertuples(index=False)
        ],
        "limitations": limitations,
    }


def headline(manifest: dict) -> tuple[dict, list[str]]:
    """cross_rank's part of the result JSON: offsets and match rate."""
    return {
        "clock_offsets_us": manifest["clock_offsets_us"],
        "match_rate": manifest["match_rate"],
        "limitations": manifest["limitations"],
    }, []
