"""segment: steps and transformer layers of every rank, from the kernel sequence alone.

Map (per rank): order the rank's events on the device timeline, find steps (Step Id, else
structure), then layer instances per step (anchors of the rank's attention family), their role
(forward / backward / recompute), passes (micro-batches) and the head / tail / interlude windows.
Reduce: ``segment_manifest.json`` with hard errors and interior islands (classify writes the CSV views).
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pyarrow as pa

from npuprof.pipeline import schema
from npuprof.pipeline.segmentation.expected import expected_model, layer_validation
from npuprof.pipeline.segmentation.features import event_features
from npuprof.pipeline.sources.discovery import read_json
from npuprof.pipeline.segmentation.layers import StepLayers, choose_family, fallback_anchors, modal_gaps, step_layers
from npuprof.pipeline.segmentation.windows import window_reduce
from npuprof.pipeline.segmentation.steps import step_windows
from npuprof.pipeline.stages.base import RankContext, RootContext, StageResult

EVENT_COLUMNS = ["row_idx", "step_id", "start_ns", "end_ns", "name", "type", "op_type", "categories", "roles", "primary_category"]


def ordered_events(ctx: RankContext, columns: list[str] = EVENT_COLUMNS) -> pa.Table:
    """The rank's events in device order (start time, then source row): the order segments index."""
    table = ctx.read_table(schema.NORMALIZED_EVENTS).select(columns)
    return table.sort_by([("start_ns", "ascending"), ("row_idx", "ascending")])


def _window_facts(starts: np.ndarray, ends: np.ndarray, row_idx: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray) -> dict[str, np.ndarray]:
    """Evidence anchors of windows [start, end] (positions): the source rows and times they span."""
    return {
        "row_start": window_reduce(np.minimum, row_idx, starts, ends),
        "row_end": window_reduce(np.maximum, row_idx, starts, ends),
        "start_ns": window_reduce(np.minimum, start_ns, starts, ends),
        "end_ns": window_reduce(np.maximum, end_ns, starts, ends),
    }


def map_rank(ctx: RankContext) -> StageResult:
    """Steps and layers of one rank."""
    events = ordered_events(ctx)
    rank = ctx.rank.rank_id
    n = events.num_rows
    features = event_features(events)
    training = bool(features.backward.any())
    family, anchors = choose_family(features)
    note = ""
    if not anchors.any():
        anchors = fallback_anchors(features)
        family = "fallback_periodic" if anchors.any() else ""
        note = "no attention kernels: transformer layers cannot be identified" if not anchors.any() else "no attention kernels: layers from a periodic fallback anchor (low confidence)"
    step_ids = events.column("step_id").to_numpy(zero_copy_only=False).astype(float)
    steps, islands = step_windows(step_ids, features, training)
    gaps = modal_gaps(anchors, features.backward)
    templates: dict = {}
    names = events.column("name").to_numpy(zero_copy_only=False)
    row_idx = events.column("row_idx").to_numpy()
    start_ns = events.column("start_ns").to_numpy()
    end_ns = events.column("end_ns").to_numpy()

    step_rows, layer_rows, hard_errors = [], [], []
    for step in steps:
        found: StepLayers = step_layers(step.start, step.end, anchors, features, family, gaps, templates)
        if family == "fallback_periodic" and found.layers:
            found.confidence = "low"
        layers = found.layers
        covered = sum(l.end - l.start + 1 for l in layers)
        for a, b in zip(layers[:-1], layers[1:]):
            if b.start <= a.end:
                hard_errors.append({"kind": "overlapping_layers", "rank_id": rank, "step_ordinal": step.ordinal, "positions": [a.start, b.end]})
        head = layers[0].start - step.start if layers else step.event_count
        tail = step.end - layers[-1].end if layers else 0
        interlude = step.event_count - covered - head - tail
        if interlude < 0:
            hard_errors.append({"kind": "coverage_mismatch", "rank_id": rank, "step_ordinal": step.ordinal})
        forward_passes = Counter(l.pass_index for l in layers if l.role == "forward")
        roles = Counter(l.role for l in layers)
        step_rows.append({
            "step_ordinal": step.ordinal, "step_id": step.step_id, "source": step.source, "complete": step.complete,
            "tags": ";".join(step.tags), "pos_start": step.start, "pos_end": step.end, "event_count": step.event_count,
            "layer_count": len(layers), "main_layer_count": len(layers) - roles.get("speculative", 0), "forward_layers": roles.get("forward", 0), "backward_layers": roles.get("backward", 0),
            "recompute_layers": roles.get("recompute", 0), "speculative_layers": roles.get("speculative", 0), "forward_passes": len(forward_passes),
            "layers_per_pass": Counter(forward_passes.values()).most_common(1)[0][0] if forward_passes else 0,
            "head_events": head, "tail_events": tail, "interlude_events": interlude,
            "attention_family": found.family or None, "layer_confidence": found.confidence if layers else "none",
        })
        for ordinal, layer in enumerate(layers):
            layer_rows.append({
                "step_ordinal": step.ordinal, "step_id": step.step_id, "layer_ordinal": ordinal, "pass_index": layer.pass_index,
                "layer_index": layer.layer_index, "layer_role": layer.role, "direction": layer.direction,
                "pos_start": layer.start, "pos_end": layer.end, "event_count": layer.end - layer.start + 1,
                "anchor_name": names[layer.anchor], "boundary_source": layer.boundary_source,
            })
    steps_frame = pd.DataFrame(step_rows, columns=STEP_COLUMNS[:-4])
    layers_frame = pd.DataFrame(layer_rows, columns=LAYER_COLUMNS[:-4])
    for frame in (steps_frame, layers_frame):
        if len(frame):
            facts = _window_facts(frame["pos_start"].to_numpy(), frame["pos_end"].to_numpy(), row_idx, start_ns, end_ns)
        else:  # a rank without steps still writes a table with every column
            facts = {key: np.array([], dtype=np.int64) for key in ("row_start", "row_end", "start_ns", "end_ns")}
        for key, values in facts.items():
            frame[key] = values
        # µs floats for people; start_ns / end_ns stay the exact evidence anchor
        frame["start_us"] = frame["start_ns"] / 1000.0
        frame["end_us"] = frame["end_ns"] / 1000.0
    island_rows = int(sum(e - s + 1 for s, e in islands))
    for s, e in islands:
        hard_errors.append({"kind": "interior_unclassified_island", "rank_id": rank, "positions": [s, e], "rows": [int(row_idx[s:e + 1].min()), int(row_idx[s:e + 1].max())]})
    complete_layers = [r["layers_per_pass"] for r in step_rows if r["complete"] and r["layer_count"]]
    manifest = {
        "rank_id": rank, "event_count": n, "training": training, "attention_family": family or None,
        "step_count": len(steps), "complete_step_count": sum(1 for s in steps if s.complete),
        "partial_steps": [s.step_id if s.step_id is not None else s.ordinal for s in steps if not s.complete],
        "step_source": steps[0].source if steps else None,
        "layers_per_pass_inventory": dict(Counter(complete_layers)),
        "decoder_layers_observed": Counter(complete_layers).most_common(1)[0][0] if complete_layers else None,
        "micro_batches_per_step": Counter(r["forward_passes"] for r in step_rows if r["complete"]).most_common(1)[0][0] if step_rows else 0,
        "layer_confidence": _rank_confidence(step_rows),
        "interior_island_total": island_rows, "hard_errors": hard_errors, "notes": [note] if note else [],
    }
    return StageResult(tables={"step_segments": _to_table(steps_frame), "layer_segments": _to_table(layers_frame)}, manifest=manifest)


STEP_COLUMNS = ["step_ordinal", "step_id", "source", "complete", "tags", "pos_start", "pos_end", "event_count", "layer_count", "main_layer_count",
                "forward_layers", "backward_layers", "recompute_layers", "speculative_layers", "forward_passes", "layers_per_pass", "head_events", "tail_events", "interlude_events",
                "attention_family", "layer_confidence", "row_start", "row_end", "start_ns", "end_ns"]


LAYER_COLUMNS = ["step_ordinal", "step_id", "layer_ordinal", "pass_index", "layer_index", "layer_role", "direction", "pos_start", "pos_end",
                 "event_count", "anchor_name", "boundary_source", "row_start", "row_end", "start_ns", "end_ns"]


def _rank_confidence(step_rows: list[dict]) -> str:
    """The weakest layer confidence over the rank's complete steps that have layers ("none" without any)."""
    levels = {r["layer_confidence"] for r in step_rows if r["complete"] and r["layer_count"]}
    for level in ("low", "medium", "high"):
        if level in levels:
            return level
    return "none"


def _to_table(frame: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(frame, preserve_index=False)


def reduce_root(ctx: RootContext) -> StageResult:
    """segment_manifest.json: hard errors, interior islands and the layer inventory of every rank."""
    ranks = sorted(ctx.rank_manifests, key=lambda m: m["rank_id"])
    hard_errors = [e for m in ranks for e in m["hard_errors"]]
    inventory = Counter()
    for m in ranks:
        inventory.update({int(k): v for k, v in m["layers_per_pass_inventory"].items()})
    expected = expected_model(ctx.options.model_config, ctx.options.model_id, ctx.inputs.root)
    capture = read_json(ctx.out_dir / schema.CAPTURE_INFO) if (ctx.out_dir / schema.CAPTURE_INFO).exists() else {}
    stages = ((capture.get("common") or {}).get("distributed_args") or {}).get("pipeline_model_parallel_size")
    manifest = {
        "rank_count": len(ranks),
        "layer_validation": layer_validation(expected, ranks, stages if isinstance(stages, int) else None),
        "hard_error_count": len(hard_errors),
        "interior_island_total": sum(m["interior_island_total"] for m in ranks),
        "hard_errors": hard_errors[:200],
        "layers_per_pass_inventory": {str(k): v for k, v in sorted(inventory.items())},
        "expected_layers": expected["expected_layers"],
        "expected_layers_source": expected["source"],
        "rank_summaries": ranks,
    }
    return StageResult(manifest=manifest)
