"""classify: blocks of every layer, step / layer / block classes and step anatomy.

Map (per rank): split each layer into attention + FFN/MoE blocks at segment's anchor, compute time
metrics of steps, layers, blocks and of each step's head / main / tail windows (idle gaps count from
``bubble_min_us`` of knowledge/classify_rules.yaml) and each step's gaps to its neighbours, give every
step, layer and block a class id (strict, order-sensitive equality of kernels and shapes). Measurements
only: diagnostics turns them into anomaly tags. Reduce: the class signatures, the classify manifest,
the CSV views of steps, layers, blocks and anatomy, and the layer and step class summaries.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from npuprof import knowledge
from npuprof.pipeline import schema
from npuprof.pipeline.segmentation.features import EventFeatures, ordered_events, rank_event_features
from npuprof.pipeline.segmentation.windows import window_evidence, window_metrics
from npuprof.pipeline.stages.base import RankContext, RootContext, StageResult, conformed
from npuprof.pipeline.stages.classify.blocks import split_layers
from npuprof.pipeline.stages.classify.classes import class_ids, event_tokens
from npuprof.pipeline.summaries.classes import layer_class_summary, step_class_summary

# The event columns classify reads (a projection of the normalized events).
CLASSIFY_INPUT_COLUMNS = [
    "row_idx",
    "step_id",
    "start_ns",
    "end_ns",
    "wait_ns",
    "name",
    "type",
    "op_type",
    "input_shapes",
    "categories",
    "roles",
    "primary_category",
]


def _with_metrics(frame: pd.DataFrame, times: dict, bubble_min_ns: int) -> pd.DataFrame:
    starts, ends = frame["pos_start"].to_numpy(), frame["pos_end"].to_numpy()
    metrics = window_metrics(starts, ends, times["start"], times["end"], times["wait"], bubble_min_ns)
    return pd.concat([frame.reset_index(drop=True), metrics], axis=1)


def _neighbour_gaps(steps: pd.DataFrame) -> pd.DataFrame:
    """Idle time since the previous step of the rank ended and until the next one starts (unknown,
    null, at the edges of the capture)."""
    return steps.assign(
        prelaunch_gap_ms=(steps["start_ns"] - steps["end_ns"].shift(1)) / 1e6,
        tail_gap_ms=(steps["start_ns"].shift(-1) - steps["end_ns"]) / 1e6,
    )


def _blocks(layers: pd.DataFrame, features: EventFeatures, no_attention_family: str) -> pd.DataFrame:
    """The blocks of every layer, split at the layer's own anchor (all layers at once)."""
    found = split_layers(
        layers["pos_start"].to_numpy(),
        layers["pos_end"].to_numpy(),
        layers["anchor_pos"].to_numpy(),
        (layers["direction"] == "backward").to_numpy(bool),
        (layers["attention_family"] != no_attention_family).to_numpy(bool),
        features,
    )
    of_layer = layers.iloc[found.layer]
    blocks = {
        "step_ordinal": of_layer["step_ordinal"].to_numpy(),
        "step_id": of_layer["step_id"].to_numpy(),
        "layer_ordinal": of_layer["layer_ordinal"].to_numpy(),
        "block_ordinal": found.ordinal,
        "block_kind": found.kind,
        "layer_role": of_layer["layer_role"].to_numpy(),
        "pos_start": found.start,
        "pos_end": found.end,
        "event_count": found.end - found.start + 1,
    }
    return pd.DataFrame(blocks, columns=list(schema.BLOCK_SEGMENTS.columns[:9]))


def _classified_blocks(
    blocks: pd.DataFrame, evidence_arrays: dict, tokens, has_shape, times, bubble_min_ns
) -> pd.DataFrame:
    starts, ends = blocks["pos_start"].to_numpy(), blocks["pos_end"].to_numpy()
    for key, values in window_evidence(starts, ends, **evidence_arrays).items():
        blocks[key] = values
    scopes = blocks["block_kind"].astype(str) + "|" + blocks["layer_role"].astype(str)
    blocks["block_class_id"], blocks["has_unknown_shape"] = class_ids(
        "block", tokens, has_shape, starts, ends, scopes, times["floating"]
    )
    return _with_metrics(blocks, times, bubble_min_ns)


def _layer_classes(layers: pd.DataFrame, blocks: pd.DataFrame, tokens, has_shape, times, bubble_min_ns) -> pd.DataFrame:
    frame = layers[["step_ordinal", "layer_ordinal", "layer_role", "pos_start", "pos_end"]].copy()
    frame["block_kinds"] = _block_kinds(blocks, layers)
    scopes = frame["layer_role"].astype(str) + "|" + frame["block_kinds"].astype(str)
    starts, ends = frame["pos_start"].to_numpy(), frame["pos_end"].to_numpy()
    frame["layer_class_id"], frame["has_unknown_shape"] = class_ids(
        "layer", tokens, has_shape, starts, ends, scopes, times["floating"]
    )
    return _with_metrics(frame, times, bubble_min_ns).drop(columns=["pos_start", "pos_end"])


def _step_classes(steps: pd.DataFrame, tokens, has_shape, times, bubble_min_ns) -> pd.DataFrame:
    keep = ["step_ordinal", "step_id", "complete", "start_ns", "end_ns", "layer_count", "main_layer_count"]
    frame = steps[keep + ["pos_start", "pos_end"]].copy()
    scopes = "layers=" + frame["layer_count"].astype(str) + "|main=" + frame["main_layer_count"].astype(str)
    starts, ends = frame["pos_start"].to_numpy(), frame["pos_end"].to_numpy()
    frame["step_class_id"], frame["has_unknown_shape"] = class_ids(
        "step", tokens, has_shape, starts, ends, scopes, times["floating"]
    )
    frame = _with_metrics(frame, times, bubble_min_ns).drop(columns=["pos_start", "pos_end"])
    # the step starts where the profiler started it: the time before its first event is its wall's;
    # busy and underfeed stay the device span's (a head is the host's: its causes are evidence's)
    frame["wall_ms"] += steps["head_ms"].fillna(0.0).to_numpy(float)
    return _neighbour_gaps(frame)


def map_rank(ctx: RankContext) -> StageResult:
    """Blocks, classes and anatomy of one rank."""
    no_attention = knowledge.load("segmentation_rules")["fallback_anchors"]["family"]
    bubble_min_ns = int(knowledge.load("classify_rules")["bubble_min_us"] * 1000)
    events = ordered_events(ctx, CLASSIFY_INPUT_COLUMNS)  # the order segment's positions index
    features = rank_event_features(ctx, events)
    times = {
        "start": events.column("start_ns").to_numpy(),
        "end": events.column("end_ns").to_numpy(),
        "wait": events.column("wait_ns").fill_null(0).to_numpy(),
        "floating": features.floating_communication,  # hashed as a set in class ids
    }
    evidence_arrays = {
        "row_idx": events.column("row_idx").to_numpy(),
        "start_ns": times["start"],
        "end_ns": times["end"],
    }
    tokens, has_shape = event_tokens(events.column("name").to_pandas(), events.column("input_shapes").to_pandas())
    steps = ctx.read_table(schema.STEP_SEGMENTS).to_pandas().sort_values("step_ordinal").reset_index(drop=True)
    layers = (
        ctx.read_table(schema.LAYER_SEGMENTS)
        .to_pandas()
        .sort_values(["step_ordinal", "layer_ordinal"])
        .reset_index(drop=True)
    )
    blocks = _blocks(layers, features, no_attention)
    if len(blocks):
        blocks = _classified_blocks(blocks, evidence_arrays, tokens, has_shape, times, bubble_min_ns)
    layer_classes = _layer_classes(layers, blocks, tokens, has_shape, times, bubble_min_ns) if len(layers) else layers
    step_classes = _step_classes(steps, tokens, has_shape, times, bubble_min_ns) if len(steps) else steps
    anatomy = _anatomy(steps, layers, times, bubble_min_ns) if len(steps) else pd.DataFrame()
    tables = {
        schema.BLOCK_SEGMENTS: blocks,
        schema.STEP_CLASSES: step_classes,
        schema.LAYER_CLASSES: layer_classes,
        schema.STEP_ANATOMY: anatomy,
    }
    return StageResult(tables=tables, manifest=_rank_manifest(ctx.rank.rank_id, blocks, step_classes, layer_classes))


def map_eventless(ctx: RankContext) -> StageResult:
    """map_rank for a rank without device events: no blocks and no classes."""
    return StageResult(manifest=_rank_manifest(ctx.rank.rank_id, *[pd.DataFrame()] * 3))


def _rank_manifest(
    rank_id: int, blocks: pd.DataFrame, step_classes: pd.DataFrame, layer_classes: pd.DataFrame
) -> dict[str, Any]:
    return {
        "rank_id": rank_id,
        "block_count": len(blocks),
        "block_kinds": dict(Counter(blocks["block_kind"])) if len(blocks) else {},
        "step_class_count": int(step_classes["step_class_id"].nunique()) if len(step_classes) else 0,
        "layer_class_count": int(layer_classes["layer_class_id"].nunique()) if len(layer_classes) else 0,
        "block_class_count": int(blocks["block_class_id"].nunique()) if len(blocks) else 0,
    }


def _block_kinds(blocks: pd.DataFrame, layers: pd.DataFrame) -> np.ndarray:
    """'attention->ffn'-style block sequence of each layer (blocks are ordered within a layer)."""
    if blocks.empty:
        return np.full(len(layers), "", dtype=object)
    grouped = blocks.groupby(["step_ordinal", "layer_ordinal"], sort=False)["block_kind"]
    first, last, count = grouped.first(), grouped.last(), grouped.size()
    joined = first.where(count == 1, first + "->" + last)
    index = pd.MultiIndex.from_arrays([layers["step_ordinal"], layers["layer_ordinal"]])
    return joined.reindex(index).fillna("").to_numpy()


def _anatomy(steps: pd.DataFrame, layers: pd.DataFrame, times: dict, bubble_min_ns: int) -> pd.DataFrame:
    """Head / main / tail windows of every step (main = first layer start .. last layer end); a step
    without layers is one head window. All steps at once: decode captures have tens of thousands."""
    first_last = (
        layers.groupby("step_ordinal").agg(first=("pos_start", "min"), last=("pos_end", "max"))
        if len(layers)
        else pd.DataFrame(columns=["first", "last"], dtype=np.int64)
    ).reindex(steps["step_ordinal"])
    layered = first_last["first"].notna().to_numpy()
    first = first_last["first"].fillna(0).to_numpy(np.int64)
    last = first_last["last"].fillna(0).to_numpy(np.int64)
    step_start, step_end = steps["pos_start"].to_numpy(np.int64), steps["pos_end"].to_numpy(np.int64)
    head_end = np.where(layered, first - 1, step_end)
    lo = np.stack([step_start, first, last + 1], axis=1).ravel()
    hi = np.stack([head_end, last, step_end], axis=1).ravel()
    keep = np.stack([np.ones_like(layered), layered, layered], axis=1).ravel()
    step_index = np.repeat(np.arange(len(steps)), 3)[keep]
    lo, hi = lo[keep], hi[keep]
    frame = pd.DataFrame(
        {
            "step_ordinal": steps["step_ordinal"].to_numpy()[step_index],
            "step_id": steps["step_id"].iloc[step_index].to_numpy(),
            "anatomy_kind": np.where(layered, "layered", "head_only")[step_index].astype(object),
            "window": np.tile(np.array(["head", "main", "tail"], dtype=object), len(steps))[keep],
            "pos_start": lo,
            "pos_end": hi,
            "event_count": np.maximum(hi - lo + 1, 0),
        }
    )
    present = frame["event_count"] > 0
    metrics = window_metrics(
        frame.loc[present, "pos_start"].to_numpy(),
        frame.loc[present, "pos_end"].to_numpy(),
        times["start"],
        times["end"],
        times["wait"],
        bubble_min_ns,
    )
    metrics.index = frame.index[present]
    frame = frame.join(metrics)
    step_wall = frame.groupby("step_ordinal")["wall_ms"].transform("sum")
    frame["wall_share"] = np.where(step_wall > 0, frame["wall_ms"].fillna(0) / step_wall, 0.0)
    return frame


def _percentile(values: pd.Series, q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def _class_table(frame: pd.DataFrame, id_column: str, scope_columns: list[str]) -> dict:
    classes = {}
    if frame.empty or id_column not in frame:
        return classes
    for class_id, members in frame.groupby(id_column):
        first = members.iloc[0]
        classes[class_id] = {
            "member_count": int(len(members)),
            "rank_count": int(members["rank_id"].nunique()),
            "ranks": sorted(int(r) for r in members["rank_id"].unique())[:32],
            "has_unknown_shape": bool(first["has_unknown_shape"]),
            "scope": {
                c: (first[c].item() if hasattr(first[c], "item") else first[c]) for c in scope_columns if c in members
            },
            "wall_ms_mean": float(members["wall_ms"].mean()),
            "wall_ms_p50": _percentile(members["wall_ms"], 50),
            "wall_ms_p90": _percentile(members["wall_ms"], 90),
            "example": {
                "rank_id": int(first["rank_id"]),
                "step_ordinal": int(first["step_ordinal"]),
                **({"layer_ordinal": int(first["layer_ordinal"])} if "layer_ordinal" in members else {}),
            },
        }
    return classes


def reduce_root(ctx: RootContext) -> StageResult:
    """class_signatures.json, the classify manifest and the CSV views."""
    frames = {table: ctx.read_frame(table) for view in schema.CSV_VIEWS for table in view.tables}
    views = {view: schema.join_view(view, [frames[t] for t in view.tables]) for view in schema.CSV_VIEWS}
    step_summary = views[schema.STEP_SUMMARY]
    complete_steps = step_summary[step_summary["complete"].astype(bool)] if len(step_summary) else step_summary
    scopes = {
        "step": (complete_steps, ["layer_count", "main_layer_count", "forward_passes", "attention_family"]),
        "layer": (views[schema.LAYER_SUMMARY], ["layer_role", "block_kinds", "event_count"]),
        "block": (views[schema.BLOCK_SUMMARY], ["block_kind", "layer_role", "event_count"]),
    }
    signatures = {
        f"{scope}_classes": _class_table(frame, f"{scope}_class_id", columns)
        for scope, (frame, columns) in scopes.items()
    }
    ranks = sorted(ctx.rank_manifests, key=lambda m: m["rank_id"])
    manifest = {
        "rank_count": len(ranks),
        **{f"{scope}_class_count": len(signatures[f"{scope}_classes"]) for scope in scopes},
        "block_kinds": dict(sum((Counter(m["block_kinds"]) for m in ranks), Counter())),
        "rank_summaries": ranks,
    }
    views.update(_class_summaries(ctx))
    return StageResult(csv_views=views, json_files={schema.CLASS_SIGNATURES: signatures}, manifest=manifest)


def _class_summaries(ctx: RootContext) -> dict:
    """layer and step class summaries over every member of every rank."""
    blocks, layers = ctx.read_frame(schema.BLOCK_SEGMENTS), ctx.read_frame(schema.LAYER_CLASSES)
    steps, anatomy = ctx.read_frame(schema.STEP_CLASSES), ctx.read_frame(schema.STEP_ANATOMY)
    tables = {
        schema.LAYER_CLASS_SUMMARY_CSV: layer_class_summary(layers, blocks) if len(layers) else pd.DataFrame(),
        schema.STEP_CLASS_SUMMARY_CSV: step_class_summary(steps, anatomy, layers) if len(steps) else pd.DataFrame(),
    }
    return {view: conformed(view.tables[0], frame) for view, frame in tables.items()}


def headline(manifest: dict) -> tuple[dict, list[str]]:
    """classify's part of the result JSON: class counts and block kinds."""
    keys = ("step_class_count", "layer_class_count", "block_class_count", "block_kinds")
    return {k: manifest[k] for k in keys}, []
