"""model: what the capture ran and how close to the hardware's peak it came.

Map (per rank): one row per distinct kernel + shapes + dtypes with its FLOPs and bytes, and the
FLOPs of each step. Reduce: the model fingerprint (fields read from kernel shapes, each with its
evidence), the catalog candidates, the layer types, the config tables when --model-config (or
ROOT/config.json) gives one, the hardware's peaks and the roofline / MFU views.
"""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline import io, schema
from npuprof.pipeline.segmentation.features import ordered_events
from npuprof.pipeline.stages.base import RankContext, RootContext, StageResult, conformed
from npuprof.pipeline.stages.model.context import model_context
from npuprof.pipeline.stages.model.shape_ops import SHAPE_KEY, shape_operators, step_flops
from npuprof.pipeline.stages.rank_reads import add_block_columns, rank_steps, step_of_events

MODEL_INPUT_COLUMNS = ["row_idx", "start_ns", "duration_ns", "primary_category", *SHAPE_KEY]
OPERATOR_KEY = ["name", "type", "op_type"]


def map_rank(ctx: RankContext) -> StageResult:
    """Shape operators and step FLOPs of one rank."""
    events = ordered_events(ctx, MODEL_INPUT_COLUMNS).to_pandas()
    steps = rank_steps(ctx)
    events["step_ordinal"] = step_of_events(len(events), steps)
    add_block_columns(ctx, events)
    shapes, shape_of_event = shape_operators(events)
    operators = ctx.read_table(schema.OPERATOR_SUMMARY, columns=[*OPERATOR_KEY, "evidence_id"]).to_pandas()
    shapes = _with_operator_ids(shapes, operators)
    tables = {schema.OPERATOR_SHAPES: shapes, schema.STEP_FLOPS: step_flops(events, shape_of_event, shapes, steps)}
    return StageResult(tables=tables, manifest=_rank_manifest(ctx.rank.rank_id, len(shapes)))


def map_eventless(ctx: RankContext) -> StageResult:
    """map_rank for a rank without device events: no shapes, no FLOPs."""
    return StageResult(manifest=_rank_manifest(ctx.rank.rank_id, 0))


def _rank_manifest(rank_id: int, shape_operator_count: int) -> dict[str, int]:
    return {"rank_id": rank_id, "shape_operator_count": shape_operator_count}


def _with_operator_ids(shapes: pd.DataFrame, operators: pd.DataFrame) -> pd.DataFrame:
    """Shape ops with the evidence id of the operator (name, type, op type) they are calls of."""
    if shapes.empty:
        return shapes.assign(evidence_id=pd.Series(dtype=object))
    ids = operators[[*OPERATOR_KEY, "evidence_id"]].fillna({"type": ""})
    joined = shapes.fillna({"type": ""}).merge(ids, on=OPERATOR_KEY, how="left")
    joined["type"] = joined["type"].replace("", None)
    return joined


def reduce_root(ctx: RootContext) -> StageResult:
    """The model fingerprint, hardware and efficiency views of the root."""
    shapes = ctx.read_frame(schema.OPERATOR_SHAPES)
    layer_classes = conformed(schema.LAYER_CLASS_SUMMARY, ctx.read_view(schema.LAYER_CLASS_SUMMARY_CSV))
    views, documents, manifest = model_context(
        shapes,
        ctx.read_frame(schema.STEP_FLOPS),
        ctx.read_frame(schema.STEP_TIME_ACCOUNTING),
        layer_classes,
        io.read_json_or_empty(ctx.out_dir / schema.stage_manifest_name("segment")),
        io.read_json_or_empty(ctx.out_dir / schema.CAPTURE_INFO),
        ctx.options,
        ctx.inputs.root if ctx.inputs else None,
    )
    csv_views = {view: conformed(view.tables[0], frame) for view, frame in views.items()}
    csv_views[schema.OPERATOR_SHAPES_CSV] = schema.join_view(schema.OPERATOR_SHAPES_CSV, [shapes])
    return StageResult(csv_views=csv_views, json_files=documents, manifest=manifest)


def headline(manifest: dict) -> tuple[dict, list[str]]:
    """model's part of the result JSON: the closest catalog model, the hardware, and the limits."""
    return {
        "best_candidate": manifest["best_candidate"],
        "hardware": manifest["hardware"],
        "mfu_mean": manifest["mfu_mean"],
        "limitations": manifest["limitations"],
    }, []
