"""segment: steps and transformer layers of every rank, from the kernel sequence alone.

Map (per rank): order the rank's events on the device timeline, find steps (Step Id, else
structure), then layer instances per step (anchors of the rank's attention family), their role
(forward / backward / recompute), passes (micro-batches) and the head / tail / interlude windows.
Each layer keeps its anchor position and attention family, so classify never chooses them again.
Reduce: ``segment_manifest.json`` with hard errors and interior islands (classify writes the CSV views).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pyarrow as pa

from npuprof import knowledge
from npuprof.pipeline import io, schema
from npuprof.pipeline.segmentation.features import EventFeatures, ordered_events, rank_event_features
from npuprof.pipeline.segmentation.windows import window_evidence
from npuprof.pipeline.sources.auxiliary import note_text
from npuprof.pipeline.sources.profiler_steps import profiler_step_starts
from npuprof.pipeline.stages.base import RankContext, RootContext, StageResult
from npuprof.pipeline.stages.rank_reads import step_of_events
from npuprof.pipeline.stages.segment.expected import expected_model, layer_validation
from npuprof.pipeline.stages.segment.forward_split import split_unsampled_forwards
from npuprof.pipeline.stages.segment.forwards import forward_summary
from npuprof.pipeline.stages.segment.layers import (
    Layer,
    choose_family,
    fallback_anchors,
    modal_gaps,
)
from npuprof.pipeline.stages.segment.serving_view import serving_view
from npuprof.pipeline.stages.segment.step_memo import StepLayerMemo
from npuprof.pipeline.stages.segment.steps import (
    StepWindow,
    forward_heads,
    profiler_heads,
    quarantine_step_ids,
    step_windows,
)
from npuprof.pipeline.summaries.pp_schedule import pp_stages

# The event columns segment reads (a projection of the normalized events).
SEGMENT_INPUT_COLUMNS = [
    "row_idx",
    "step_id",
    "start_ns",
    "end_ns",
    "name",
    "type",
    "op_type",
    "categories",
    "roles",
    "primary_category",
    "input_shapes",  # an inference rank's forwards: their attention calls' slots (forwards.py)
    "model_id",  # ... and whether their kernels were replayed from a captured graph
]
# a rank's note when it has no anchor to split layers at (also every rank without events)
NO_LAYERS_NOTE = "no attention kernels: transformer layers cannot be identified"


def _layer_anchors(features: EventFeatures) -> tuple[str, np.ndarray, str]:
    """(family, anchor mask, note): the attention family's anchors, else a periodic fallback, else none."""
    family, anchors = choose_family(features)
    if anchors.any():
        return family, anchors, ""
    anchors = fallback_anchors(features)
    if anchors.any():
        fallback = knowledge.load("segmentation_rules")["fallback_anchors"]["family"]
        return fallback, anchors, "no attention kernels: layers from a periodic fallback anchor (low confidence)"
    return "", anchors, NO_LAYERS_NOTE


def _layer_counts(step: StepWindow, layers: list[Layer]) -> dict:
    """The step_segments fields that depend only on the step's layers relative to its start."""
    covered = sum(layer.end - layer.start + 1 for layer in layers)
    head = layers[0].start - step.start if layers else step.event_count
    tail = step.end - layers[-1].end if layers else 0
    forward_passes = Counter(layer.pass_index for layer in layers if layer.role == "forward")
    roles = Counter(layer.role for layer in layers)
    return {
        "layer_count": len(layers),
        "main_layer_count": len(layers) - roles.get("speculative", 0),
        "forward_layers": roles.get("forward", 0),
        "backward_layers": roles.get("backward", 0),
        "recompute_layers": roles.get("recompute", 0),
        "speculative_layers": roles.get("speculative", 0),
        "forward_passes": len(forward_passes),
        "layers_per_pass": Counter(forward_passes.values()).most_common(1)[0][0] if forward_passes else 0,
        "head_events": head,
        "tail_events": tail,
        "interlude_events": step.event_count - covered - head - tail,
    }


def _step_row(step: StepWindow, counts: dict, family: str, confidence: str) -> dict:
    """One step_segments row (without its evidence columns)."""
    return {
        "step_ordinal": step.ordinal,
        "step_id": step.step_id,
        "source": step.source,
        "complete": step.complete,
        "tags": ";".join(step.tags),
        "pos_start": step.start,
        "pos_end": step.end,
        "event_count": step.event_count,
        **counts,
        "attention_family": family or None,
        "layer_confidence": confidence if counts["layer_count"] else "none",
    }


def _layer_rows(step: StepWindow, layers: list[Layer], names: np.ndarray, layer_family: np.ndarray) -> list[dict]:
    """The layer_segments rows of one step (without their evidence columns)."""
    return [
        {
            "step_ordinal": step.ordinal,
            "step_id": step.step_id,
            "layer_ordinal": ordinal,
            "pass_index": layer.pass_index,
            "layer_index": layer.layer_index,
            "layer_role": layer.role,
            "direction": layer.direction,
            "pos_start": layer.start,
            "pos_end": layer.end,
            "event_count": layer.end - layer.start + 1,
            "anchor_pos": layer.anchor,
            "anchor_name": names[layer.anchor],
            "attention_family": layer_family[layer.anchor],
            "boundary_source": layer.boundary_source,
        }
        for ordinal, layer in enumerate(layers)
    ]


def _step_hard_errors(rank: int, step: StepWindow, layers: list[Layer], step_row: dict) -> list[dict]:
    """Overlapping layers and a coverage mismatch (head + layers + interludes + tail ≠ the step)."""
    errors = [
        {"kind": "overlapping_layers", "rank_id": rank, "step_ordinal": step.ordinal, "positions": [a.start, b.end]}
        for a, b in zip(layers[:-1], layers[1:])
        if b.start <= a.end
    ]
    if step_row["interlude_events"] < 0:
        errors.append({"kind": "coverage_mismatch", "rank_id": rank, "step_ordinal": step.ordinal})
    return errors


def _with_evidence(frame: pd.DataFrame, evidence_arrays: dict[str, np.ndarray]) -> pd.DataFrame:
    """Add each window's source rows and time span (every column, also for a rank without steps)."""
    starts = frame["pos_start"].to_numpy(dtype=np.int64)
    ends = frame["pos_end"].to_numpy(dtype=np.int64)
    for key, values in window_evidence(starts, ends, **evidence_arrays).items():
        frame[key] = values
    return frame


def _started_by_profiler(ctx: RankContext, steps: pd.DataFrame) -> tuple[pd.DataFrame, list[str], list[dict]]:
    """``steps`` starting where the profiler started them (start_ns / start_us moved back by head_ms),
    the notes (an unreadable source, or captured steps the profiler's record does not hold) and the
    unreadable source's note object (the root ends degraded, naming it)."""
    starts, source, unreadable = profiler_step_starts(ctx.rank)
    head = profiler_heads(steps, starts)
    start_ns = steps["start_ns"].to_numpy(np.int64) - head
    known = steps["step_id"].isin(starts["step_id"]).to_numpy() if source else np.zeros(len(steps), dtype=bool)
    steps = steps.assign(
        start_ns=start_ns,
        start_us=start_ns / 1000.0,
        head_ms=head / 1e6,
        start_source=np.where(known, source, None),
    )
    notes = _profiler_notes(unreadable)
    if source and not known.all():
        notes.append(
            f"{int((~known).sum())} of {len(steps)} steps are not in the {source}: they start at their first kernel"
        )
    return steps, notes, [unreadable] if unreadable else []


def _profiler_notes(unreadable: dict | None) -> list[str]:
    return [note_text(unreadable)] if unreadable else []


def map_eventless(ctx: RankContext) -> StageResult:
    """map_rank for a rank without device events: no steps and no layers; the profiler's record of its
    steps is still read, so an unreadable one is noted as it is for every rank."""
    _, _, unreadable = profiler_step_starts(ctx.rank)
    manifest = _rank_manifest(ctx.rank.rank_id, 0, False, "", [], [], [], [], NO_LAYERS_NOTE)
    manifest["notes"] += _profiler_notes(unreadable)
    manifest.update(quarantine_notes=[], unreadable_inputs=[unreadable] if unreadable else [], step_start_source=None)
    return StageResult(manifest=manifest)


def map_rank(ctx: RankContext) -> StageResult:
    """Steps and layers of one rank."""
    events = ordered_events(ctx, SEGMENT_INPUT_COLUMNS)
    rank = ctx.rank.rank_id
    features = rank_event_features(ctx, events)
    training = bool(features.backward.any())
    family, anchors, note = _layer_anchors(features)
    fallback_family = knowledge.load("segmentation_rules")["fallback_anchors"]["family"]
    layer_family = np.where(anchors, features.anchor_family, "")
    if family == fallback_family:
        layer_family = np.where(anchors, fallback_family, "")
    step_ids, quarantine_notes, damaged = quarantine_step_ids(
        *(events.column(c).to_numpy(zero_copy_only=False) for c in ("step_id", "start_ns", "row_idx"))
    )
    steps, islands = step_windows(step_ids, features, training, damaged)
    gaps = modal_gaps(anchors, features.backward)
    templates: dict = {}
    memo = StepLayerMemo(anchors, features, family, gaps)  # repeating steps are worked out once
    layer_counts: dict = {}  # by step structure
    names = events.column("name").to_numpy(zero_copy_only=False)
    evidence_arrays = {key: events.column(key).to_numpy() for key in ("row_idx", "start_ns", "end_ns")}
    steps = _forward_windows(steps, training, memo, evidence_arrays)

    step_rows, layer_rows, hard_errors = [], [], []
    for step in steps:
        found = memo.layers(step.start, step.end, templates)
        confidence = "low" if family == fallback_family and found.layers else found.confidence
        if found.structure not in layer_counts:  # every step comes from the memo: it has a structure
            layer_counts[found.structure] = _layer_counts(step, found.layers)
        counts = layer_counts[found.structure]
        row = _step_row(step, counts, found.family, confidence)
        step_rows.append(row)
        hard_errors += _step_hard_errors(rank, step, found.layers, row)
        layer_rows += _layer_rows(step, found.layers, names, layer_family)
    steps_frame = _with_evidence(pd.DataFrame(step_rows, columns=_own_columns(schema.STEP_SEGMENTS)), evidence_arrays)
    steps_frame, start_notes, unreadable = _started_by_profiler(ctx, steps_frame)
    layers_frame = _with_evidence(
        pd.DataFrame(layer_rows, columns=_own_columns(schema.LAYER_SEGMENTS)), evidence_arrays
    )
    row_idx = evidence_arrays["row_idx"]
    hard_errors += [
        {
            "kind": "interior_unclassified_island",
            "rank_id": rank,
            "positions": [s, e],
            "rows": [int(row_idx[s : e + 1].min()), int(row_idx[s : e + 1].max())],
        }
        for s, e in islands
    ]
    manifest = _rank_manifest(rank, events.num_rows, training, family, steps, step_rows, islands, hard_errors, note)
    manifest["notes"] += quarantine_notes + start_notes
    manifest["quarantine_notes"] = quarantine_notes  # rows the capture contradicts: a warning in the result
    manifest["unreadable_inputs"] = unreadable
    tables = _rank_tables(events, steps_frame, layers_frame, features)
    manifest["step_start_source"] = next((s for s in tables[schema.STEP_SEGMENTS]["start_source"] if s), None)
    return StageResult(tables=tables, manifest=manifest)


def _forward_windows(steps: list[StepWindow], training: bool, memo: StepLayerMemo, arrays: dict) -> list[StepWindow]:
    """An inference rank's steps found from structure with the forwards nothing sampled (dummy forwards)
    cut out of the steps they joined (forward_split.py); any other rank's as they are."""
    if training or not steps or steps[0].source != "structure":
        return steps
    probe = lambda window: memo.layers(window.start, window.end, {}).layers  # noqa: E731 (fresh templates)
    return split_unsampled_forwards(steps, probe, arrays["start_ns"], arrays["end_ns"])


def _rank_tables(events: pa.Table, steps: pd.DataFrame, layers: pd.DataFrame, features: EventFeatures) -> dict:
    """The rank's steps and layers; on an inference rank (each step one forward) also its forwards with
    what each one's batch was and how it ran (forwards.py; ``events`` in device order), and forwards no
    profiler step marks each start where the previous one ended (``forward_heads``)."""
    inference = not features.backward.any() and len(steps)
    tables = {schema.LAYER_SEGMENTS: layers}
    if inference:
        frame = events.select(["row_idx", "type", "input_shapes", "model_id"]).to_pandas()
        frame["step_ordinal"] = step_of_events(len(frame), steps)
        frame["samples"] = features.role_flags["selection"] | features.role_flags["sampling"]
        forwards = forward_summary(frame, steps)  # over the device's spans
        if forwards is not None:
            tables[schema.FORWARD_SUMMARY] = forwards
    if inference and (steps["source"] == "structure").all():
        steps = forward_heads(steps)
    tables[schema.STEP_SEGMENTS] = steps
    return tables


def _own_columns(table: schema.Table) -> list[str]:
    """The columns a segment table holds before its evidence columns and profiler start are added."""
    evidence = {name for name, _ in schema.WINDOW_EVIDENCE} | {"head_ms", "start_source"}
    return [c for c in table.columns if c not in evidence]


def _rank_manifest(
    rank: int,
    event_count: int,
    training: bool,
    family: str,
    steps: list[StepWindow],
    step_rows: list[dict],
    islands: list[tuple[int, int]],
    hard_errors: list[dict],
    note: str,
) -> dict:
    complete_layers = [r["layers_per_pass"] for r in step_rows if r["complete"] and r["layer_count"]]
    passes = Counter(r["forward_passes"] for r in step_rows if r["complete"])
    return {
        "rank_id": rank,
        "event_count": event_count,
        "training": training,
        "attention_family": family or None,
        "step_count": len(steps),
        "complete_step_count": sum(1 for s in steps if s.complete),
        "partial_steps": [s.step_id if s.step_id is not None else s.ordinal for s in steps if not s.complete],
        "step_source": steps[0].source if steps else None,
        "layers_per_pass_inventory": dict(Counter(complete_layers)),
        "decoder_layers_observed": Counter(complete_layers).most_common(1)[0][0] if complete_layers else None,
        "micro_batches_per_step": passes.most_common(1)[0][0] if step_rows else 0,
        "layer_confidence": _rank_confidence(step_rows),
        "interior_island_total": int(sum(e - s + 1 for s, e in islands)),
        "hard_errors": hard_errors,
        "notes": [note] if note else [],
    }


def _rank_confidence(step_rows: list[dict]) -> str:
    """The weakest layer confidence over the rank's complete steps that have layers ("none" without any)."""
    levels = {r["layer_confidence"] for r in step_rows if r["complete"] and r["layer_count"]}
    for level in ("low", "medium", "high"):
        if level in levels:
            return level
    return "none"


def _pp_groups(capture: dict, stages: object) -> dict[int, tuple[str, int]] | None:
    """rank → (PP group, stage) when the capture names every stage of its groups, else None."""
    table = pp_stages(capture)
    if table.empty or not isinstance(stages, int) or (table["stages"] != stages).any():
        return None
    return {int(r): (str(g), int(s)) for r, g, s in table[["rank_id", "pp_group", "stage"]].itertuples(index=False)}


def reduce_root(ctx: RootContext) -> StageResult:
    """segment_manifest.json: hard errors, interior islands and the layer inventory of every rank."""
    ranks = sorted(ctx.rank_manifests, key=lambda m: m["rank_id"])
    hard_errors = [e for m in ranks for e in m["hard_errors"]]
    inventory = Counter()
    for m in ranks:
        inventory.update({int(k): v for k, v in m["layers_per_pass_inventory"].items()})
    expected = expected_model(ctx.options.model_config, ctx.options.model_id, ctx.inputs.root)
    capture = io.read_json_or_empty(ctx.out_dir / schema.CAPTURE_INFO)
    stages = ((capture.get("common") or {}).get("distributed_args") or {}).get("pipeline_model_parallel_size")
    manifest = {
        "rank_count": len(ranks),
        "layer_validation": layer_validation(
            expected, ranks, stages if isinstance(stages, int) else None, _pp_groups(capture, stages)
        ),
        "hard_error_count": len(hard_errors),
        "interior_island_total": sum(m["interior_island_total"] for m in ranks),
        "hard_errors": hard_errors[:200],
        "layers_per_pass_inventory": {str(k): v for k, v in sorted(inventory.items())},
        "expected_layers": expected["expected_layers"],
        "expected_layers_source": expected["source"],
        "rank_summaries": ranks,
        "unreadable_inputs": [note for m in ranks for note in m.get("unreadable_inputs", [])],
    }
    forwards = ctx.read_frame(schema.FORWARD_SUMMARY)  # an inference capture's: its serving view
    manifest["serving"] = serving_view(forwards)
    views = {schema.FORWARD_SUMMARY_CSV: schema.join_view(schema.FORWARD_SUMMARY_CSV, [forwards])}
    return StageResult(csv_views=views if not forwards.empty else {}, manifest=manifest)


def headline(manifest: dict) -> tuple[dict, list[str]]:
    """segment's part of the result JSON: hard errors, layer inventory and validation, per-rank counts."""
    validation = manifest["layer_validation"]
    summary = {
        "hard_error_count": manifest["hard_error_count"],
        "interior_island_total": manifest["interior_island_total"],
        "layers_per_pass_inventory": manifest["layers_per_pass_inventory"],
        "layer_validation": {
            k: validation[k]
            for k in ("status", "expected_layers", "expected_source", "pipeline_stages", "observed_total_layers")
        },
        "ranks": {
            str(r["rank_id"]): {
                "steps": r["step_count"],
                "complete_steps": r["complete_step_count"],
                "decoder_layers_observed": r["decoder_layers_observed"],
                "micro_batches_per_step": r["micro_batches_per_step"],
                "layer_confidence": r["layer_confidence"],
            }
            for r in manifest["rank_summaries"]
        },
    }
    warnings = []
    if manifest["hard_error_count"] or manifest["interior_island_total"]:
        warnings.append(
            f"segment: {manifest['hard_error_count']} hard errors, {manifest['interior_island_total']} rows in "
            f"interior islands (see {schema.stage_manifest_name('segment')})"
        )
    ranks = manifest["rank_summaries"]
    warnings += [f"segment: rank {r['rank_id']}: {note}" for r in ranks for note in r.get("quarantine_notes", [])]
    if validation["status"] == "mismatch":
        warnings.append(
            f"segment: observed {validation['observed_total_layers']} decoder layers, "
            f"the {validation['expected_source']} says {validation['expected_layers']}"
        )
    return summary, warnings
