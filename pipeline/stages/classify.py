"""classify: blocks of every layer, step / layer / block classes, step anatomy and anomaly tags.

Map (per rank): split each layer into attention + FFN/MoE blocks, compute time metrics of steps,
layers, blocks and of each step's head / main / tail windows, give every step, layer and block a
class id (strict, order-sensitive equality of kernels and shapes), tag anomalous steps with the
thresholds of knowledge/diagnosis_rules.yaml. Reduce: class_signatures.json, classify_manifest.json
and the CSV views step_summary.csv, layer_summary.csv, block_summary.csv, step_anatomy.csv.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pyarrow as pa

from npuprof import knowledge
from npuprof.pipeline.segmentation.blocks import split_layer
from npuprof.pipeline.segmentation.classes import class_ids, event_tokens
from npuprof.pipeline.segmentation.features import event_features
from npuprof.pipeline.segmentation.layers import choose_family
from npuprof.pipeline.segmentation.windows import window_metrics, window_reduce
from npuprof.pipeline.stages.base import RankContext, RootContext, StageResult
from npuprof.pipeline.stages.segment import ordered_events

EVENT_COLUMNS = ["row_idx", "step_id", "start_ns", "end_ns", "wait_ns", "name", "type", "op_type", "input_shapes", "categories", "roles", "primary_category"]


def _with_metrics(frame: pd.DataFrame, starts: np.ndarray, ends: np.ndarray, times: dict, bubble_min_ns: int) -> pd.DataFrame:
    metrics = window_metrics(starts, ends, times["start"], times["end"], times["wait"], bubble_min_ns)
    return pd.concat([frame.reset_index(drop=True), metrics], axis=1)


def _anomaly_tags(steps: pd.DataFrame, rules: dict) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Anomaly tags per step; gaps to neighbouring steps are unknown (never tagged) at the edges."""
    tags = []
    prev_end = steps["end_ns"].shift(1)
    next_start = steps["start_ns"].shift(-1)
    steps = steps.assign(prelaunch_gap_ms=(steps["start_ns"] - prev_end) / 1e6, tail_gap_ms=(next_start - steps["end_ns"]) / 1e6)
    for row in steps.itertuples():
        found = [t for t in str(row.tags or "").split(";") if t]
        if row.underfeed_ratio >= rules["DEVICE_IDLE_GAP_HEAVY"]["underfeed_ratio_min"]:
            found.append("DEVICE_IDLE_GAP_HEAVY")
        bubble = rules["INTERNAL_BUBBLE_HEAVY"]
        if row.largest_internal_bubble_ms >= max(bubble["min_ms"], bubble["min_wall_share"] * row.wall_ms):
            found.append("INTERNAL_BUBBLE_HEAVY")
        for tag, gap in (("PRELAUNCH_GAP_HEAVY", row.prelaunch_gap_ms), ("TAIL_GAP_HEAVY", row.tail_gap_ms)):
            if pd.notna(gap) and gap >= max(rules[tag]["min_ms"], rules[tag]["min_wall_share"] * row.wall_ms):
                found.append(tag)
        tags.append(";".join(dict.fromkeys(found)))
    return tags, steps["prelaunch_gap_ms"].to_numpy(), steps["tail_gap_ms"].to_numpy()


def map_rank(ctx: RankContext) -> StageResult:
    """Blocks, classes, anatomy and tags of one rank."""
    rules = knowledge.load("diagnosis_rules")
    bubble_min_ns = int(rules["bubble_min_us"] * 1000)
    events = ordered_events(ctx, EVENT_COLUMNS)  # the order segment's positions index
    features = event_features(events)
    times = {"start": events.column("start_ns").to_numpy(), "end": events.column("end_ns").to_numpy(),
             "wait": events.column("wait_ns").fill_null(0).to_numpy()}
    tokens, has_shape = event_tokens(events.column("name").to_pandas(), events.column("input_shapes").to_pandas())
    steps = ctx.read_table("step_segments").to_pandas().sort_values("step_ordinal").reset_index(drop=True)
    layers = ctx.read_table("layer_segments").to_pandas().sort_values(["step_ordinal", "layer_ordinal"]).reset_index(drop=True)
    anchors = _anchor_positions(layers, features) if len(layers) else {}

    block_rows = []
    for layer in layers.itertuples():  # a loop over layers, not events
        anchor = anchors.get((layer.step_ordinal, layer.layer_ordinal), layer.pos_start)
        for ordinal, (lo, hi, kind) in enumerate(split_layer(layer.pos_start, layer.pos_end, anchor, layer.direction, features)):
            block_rows.append({"step_ordinal": layer.step_ordinal, "step_id": layer.step_id, "layer_ordinal": layer.layer_ordinal,
                               "block_ordinal": ordinal, "block_kind": kind, "layer_role": layer.layer_role, "pos_start": lo, "pos_end": hi,
                               "row_start": 0, "row_end": 0, "event_count": hi - lo + 1})
    blocks = pd.DataFrame(block_rows, columns=["step_ordinal", "step_id", "layer_ordinal", "block_ordinal", "block_kind", "layer_role", "pos_start",
                                               "pos_end", "row_start", "row_end", "event_count"])
    row_idx = events.column("row_idx").to_numpy()
    if len(blocks):
        blocks["row_start"] = _span(np.minimum, row_idx, blocks)
        blocks["row_end"] = _span(np.maximum, row_idx, blocks)
        blocks["start_ns"] = _span(np.minimum, times["start"], blocks)
        blocks["end_ns"] = _span(np.maximum, times["end"], blocks)
        blocks["start_us"], blocks["end_us"] = blocks["start_ns"] / 1000.0, blocks["end_ns"] / 1000.0
        blocks["block_class_id"], blocks["has_unknown_shape"] = class_ids("block", tokens, has_shape, blocks["pos_start"].to_numpy(), blocks["pos_end"].to_numpy(), [f"{k}|{r}" for k, r in zip(blocks["block_kind"], blocks["layer_role"])])
        blocks = _with_metrics(blocks, blocks["pos_start"].to_numpy(), blocks["pos_end"].to_numpy(), times, bubble_min_ns)

    layer_classes = layers[["step_ordinal", "layer_ordinal", "layer_role"]].copy()
    if len(layers):
        layer_classes["block_kinds"] = _block_kinds(blocks, layers)
        layer_classes["layer_class_id"], layer_classes["has_unknown_shape"] = class_ids(
            "layer", tokens, has_shape, layers["pos_start"].to_numpy(), layers["pos_end"].to_numpy(),
            [f"{r}|{k}" for r, k in zip(layer_classes["layer_role"], layer_classes["block_kinds"])])
        layer_classes = _with_metrics(layer_classes, layers["pos_start"].to_numpy(), layers["pos_end"].to_numpy(), times, bubble_min_ns)

    step_classes = steps[["step_ordinal", "step_id", "complete", "tags", "start_ns", "end_ns", "layer_count", "main_layer_count"]].copy()
    anatomy = pd.DataFrame()
    if len(steps):
        step_classes["step_class_id"], step_classes["has_unknown_shape"] = class_ids(
            "step", tokens, has_shape, steps["pos_start"].to_numpy(), steps["pos_end"].to_numpy(),
            [f"layers={n}|main={m}" for n, m in zip(steps["layer_count"], steps["main_layer_count"])])
        step_classes = _with_metrics(step_classes, steps["pos_start"].to_numpy(), steps["pos_end"].to_numpy(), times, bubble_min_ns)
        step_classes["anomaly_tags"], step_classes["prelaunch_gap_ms"], step_classes["tail_gap_ms"] = _anomaly_tags(step_classes, rules["anomaly_tags"])
        anatomy = _anatomy(steps, layers, times, bubble_min_ns)
    step_classes = step_classes.drop(columns=["tags"])
    manifest = {
        "rank_id": ctx.rank.rank_id,
        "block_count": len(blocks),
        "block_kinds": dict(Counter(blocks["block_kind"])) if len(blocks) else {},
        "step_class_count": int(step_classes["step_class_id"].nunique()) if len(step_classes) else 0,
        "layer_class_count": int(layer_classes["layer_class_id"].nunique()) if len(layer_classes) and "layer_class_id" in layer_classes else 0,
        "block_class_count": int(blocks["block_class_id"].nunique()) if len(blocks) else 0,
        "anomaly_tag_counts": dict(Counter(t for tags in step_classes.get("anomaly_tags", []) for t in str(tags).split(";") if t)),
    }
    tables = {"block_segments": _table(blocks), "step_classes": _table(step_classes), "layer_classes": _table(layer_classes), "step_anatomy": _table(anatomy)}
    return StageResult(tables=tables, manifest=manifest)


def _span(ufunc: np.ufunc, values: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    return window_reduce(ufunc, values, windows["pos_start"].to_numpy(), windows["pos_end"].to_numpy())


def _block_kinds(blocks: pd.DataFrame, layers: pd.DataFrame) -> np.ndarray:
    """'attention->ffn'-style block sequence of each layer (blocks are ordered within a layer)."""
    if blocks.empty:
        return np.full(len(layers), "", dtype=object)
    grouped = blocks.groupby(["step_ordinal", "layer_ordinal"], sort=False)["block_kind"]
    first, last, count = grouped.first(), grouped.last(), grouped.size()
    joined = first.where(count == 1, first + "->" + last)
    index = pd.MultiIndex.from_arrays([layers["step_ordinal"], layers["layer_ordinal"]])
    return joined.reindex(index).fillna("").to_numpy()


def _anchor_positions(layers: pd.DataFrame, features) -> dict:
    """Each layer's anchor position: its first event whose family anchors layers (segment's choice)."""
    _family, mask = choose_family(features)
    positions = np.flatnonzero(mask)
    starts, ends = layers["pos_start"].to_numpy(), layers["pos_end"].to_numpy()
    first = np.searchsorted(positions, starts) if len(positions) else np.zeros(len(starts), dtype=np.int64)
    found = first < len(positions)
    anchor = np.where(found, positions[np.clip(first, 0, max(len(positions) - 1, 0))] if len(positions) else starts, starts)
    anchor = np.where(found & (anchor <= ends), anchor, starts)
    return dict(zip(zip(layers["step_ordinal"].tolist(), layers["layer_ordinal"].tolist()), anchor.tolist()))


def _anatomy(steps: pd.DataFrame, layers: pd.DataFrame, times: dict, bubble_min_ns: int) -> pd.DataFrame:
    """Head / main / tail windows of every step (main = first layer start .. last layer end)."""
    rows = []
    first_last = layers.groupby("step_ordinal").agg(first=("pos_start", "min"), last=("pos_end", "max")) if len(layers) else pd.DataFrame()
    for step in steps.itertuples():
        if step.step_ordinal in first_last.index:
            first, last = first_last.loc[step.step_ordinal, ["first", "last"]]
            windows = [("head", step.pos_start, first - 1), ("main", first, last), ("tail", last + 1, step.pos_end)]
            kind = "layered"
        else:
            windows = [("head", step.pos_start, step.pos_end)]
            kind = "head_only"
        for name, lo, hi in windows:
            rows.append({"step_ordinal": step.step_ordinal, "step_id": step.step_id, "anatomy_kind": kind, "window": name,
                         "pos_start": int(lo), "pos_end": int(hi), "event_count": int(max(hi - lo + 1, 0))})
    frame = pd.DataFrame(rows)
    present = frame["event_count"] > 0
    metrics = window_metrics(frame.loc[present, "pos_start"].to_numpy(), frame.loc[present, "pos_end"].to_numpy(), times["start"], times["end"], times["wait"], bubble_min_ns)
    metrics.index = frame.index[present]
    frame = frame.join(metrics)
    step_wall = frame.groupby("step_ordinal")["wall_ms"].transform("sum")
    frame["wall_share"] = np.where(step_wall > 0, frame["wall_ms"].fillna(0) / step_wall, 0.0)
    return frame


def _table(frame: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)


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
            "scope": {c: (first[c].item() if hasattr(first[c], "item") else first[c]) for c in scope_columns if c in members},
            "wall_ms_mean": float(members["wall_ms"].mean()),
            "wall_ms_p50": _percentile(members["wall_ms"], 50),
            "wall_ms_p90": _percentile(members["wall_ms"], 90),
            "example": {"rank_id": int(first["rank_id"]), "step_ordinal": int(first["step_ordinal"]),
                        **({"layer_ordinal": int(first["layer_ordinal"])} if "layer_ordinal" in members else {})},
        }
    return classes


def reduce_root(ctx: RootContext) -> StageResult:
    """class_signatures.json, classify_manifest.json and the CSV views."""
    read = lambda name: ctx.read_table(name).to_pandas() if (ctx.out_dir / name).exists() else pd.DataFrame()  # noqa: E731
    steps, layers = read("step_segments"), read("layer_segments")
    step_classes, layer_classes, blocks, anatomy = read("step_classes"), read("layer_classes"), read("block_segments"), read("step_anatomy")
    step_summary = steps.merge(step_classes.drop(columns=[c for c in ("step_id", "complete", "start_ns", "end_ns", "start_us", "end_us", "layer_count", "main_layer_count") if c in step_classes]),
                               on=["rank_id", "step_ordinal"], how="left") if len(steps) else steps
    layer_summary = layers.merge(layer_classes.drop(columns=["layer_role"]), on=["rank_id", "step_ordinal", "layer_ordinal"], how="left") if len(layers) else layers
    complete_steps = step_summary[step_summary["complete"]] if len(step_summary) else step_summary
    signatures = {
        "step_classes": _class_table(complete_steps, "step_class_id", ["layer_count", "main_layer_count", "forward_passes", "attention_family"]),
        "layer_classes": _class_table(layer_summary, "layer_class_id", ["layer_role", "block_kinds", "event_count"]),
        "block_classes": _class_table(blocks, "block_class_id", ["block_kind", "layer_role", "event_count"]),
    }
    ranks = sorted(ctx.rank_manifests, key=lambda m: m["rank_id"])
    tags = Counter()
    for m in ranks:
        tags.update(m["anomaly_tag_counts"])
    manifest = {
        "rank_count": len(ranks),
        "step_class_count": len(signatures["step_classes"]),
        "layer_class_count": len(signatures["layer_classes"]),
        "block_class_count": len(signatures["block_classes"]),
        "block_kinds": dict(sum((Counter(m["block_kinds"]) for m in ranks), Counter())),
        "anomaly_tag_counts": dict(tags),
        "rank_summaries": ranks,
    }
    order = lambda frame, keys: frame.sort_values([k for k in keys if k in frame]).reset_index(drop=True) if len(frame) else frame  # noqa: E731
    views = {
        "step_summary.csv": order(step_summary, ["rank_id", "step_ordinal"]),
        "layer_summary.csv": order(layer_summary, ["rank_id", "step_ordinal", "layer_ordinal"]),
        "block_summary.csv": order(blocks, ["rank_id", "step_ordinal", "layer_ordinal", "block_ordinal"]),
        "step_anatomy.csv": order(anatomy, ["rank_id", "step_ordinal"]),
    }
    return StageResult(csv_views=views, json_files={"class_signatures.json": signatures}, manifest=manifest)
