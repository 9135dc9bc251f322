"""The model stage, in one package: its declaration (``STAGE``), its code (``stage.py``) and what only
it uses — shape operators and FLOPs (``shape_ops.py``, ``flops.py``, ``shapes.py``), the model
fingerprint (``fingerprint.py``, ``fingerprint_fields.py``), the roofline and MFU (``efficiency.py``)
and the root's model and hardware context (``context.py``). The catalog, the config reader and the
hardware peaks, which the CLI and a detector read too, stay in ``pipeline/modelinfo/``; its tables
are declared in ``schema/model.py``."""

from __future__ import annotations

from npuprof.pipeline import schema
from npuprof.pipeline.stages.base import RankRead, Stage
from npuprof.pipeline.stages.model import stage

STAGE = Stage(
    name="model",
    requires=(
        schema.stage_manifest_name("evidence"),
        schema.OPERATOR_SUMMARY,
        schema.STEP_TIME_ACCOUNTING,
        schema.LAYER_CLASS_SUMMARY_CSV,
    ),
    produces=(
        schema.OPERATOR_SHAPES,
        schema.STEP_FLOPS,
        schema.OPERATOR_SHAPES_CSV,
        *schema.MODEL_CSVS,
        *schema.EFFICIENCY_CSVS,
        schema.MODEL_INSIGHTS,
        schema.HARDWARE_INSIGHTS,
    ),
    optional=schema.MODEL_CONFIG_CSVS,  # only with --model-config
    map_rank=stage.map_rank,
    map_eventless=stage.map_eventless,
    map_reads=(
        RankRead(schema.NORMALIZED_EVENTS, tuple(stage.MODEL_INPUT_COLUMNS)),
        RankRead(schema.STEP_SEGMENTS),
        RankRead(schema.BLOCK_SEGMENTS),
        RankRead(schema.OPERATOR_SUMMARY),
    ),
    reduce_root=stage.reduce_root,
    headline=stage.headline,
)
