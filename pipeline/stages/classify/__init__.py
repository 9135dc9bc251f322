"""The classify stage, in one package: its declaration (``STAGE``), its code (``stage.py``) and what only
it uses — the split of layers into attention / FFN / MoE blocks (``blocks.py``) and the class ids of
steps, layers and blocks (``classes.py``)."""

from __future__ import annotations

from npuprof.pipeline import schema
from npuprof.pipeline.segmentation.features import EVENT_FEATURES
from npuprof.pipeline.stages.base import RankRead, Stage
from npuprof.pipeline.stages.classify import stage

STAGE = Stage(
    name="classify",
    requires=(schema.stage_manifest_name("segment"), schema.STEP_SEGMENTS, schema.LAYER_SEGMENTS),
    produces=(
        schema.BLOCK_SEGMENTS,
        schema.STEP_CLASSES,
        schema.LAYER_CLASSES,
        schema.STEP_ANATOMY,
        schema.CLASS_SIGNATURES,
        *schema.CSV_VIEWS,
        *schema.CLASS_SUMMARY_CSVS,
    ),
    map_rank=stage.map_rank,
    map_eventless=stage.map_eventless,
    map_reads=(
        RankRead(schema.NORMALIZED_EVENTS, tuple(stage.CLASSIFY_INPUT_COLUMNS)),
        RankRead(schema.STEP_SEGMENTS),
        RankRead(schema.LAYER_SEGMENTS),
    ),
    map_uses=(EVENT_FEATURES,),
    reduce_root=stage.reduce_root,
    headline=stage.headline,
)
