"""The summarize stage, in one package: its declaration (``STAGE``), its code (``stage.py``) and what
only it uses (``ranks.py``: the rank summary). The labels, operator, communication and accounting
functions later stages share stay in ``pipeline/summaries/``; its tables are declared in
``schema/summarize.py``."""

from __future__ import annotations

from npuprof.pipeline import schema
from npuprof.pipeline.stages.base import RankRead, Stage
from npuprof.pipeline.stages.summarize import stage

STAGE = Stage(
    name="summarize",
    requires=(
        schema.stage_manifest_name("classify"),
        schema.STEP_CLASSES,
        schema.STEP_SEGMENTS,
        schema.BLOCK_SEGMENTS,
    ),
    produces=(
        schema.OPERATOR_SUMMARY,
        schema.STEP_TIME_ACCOUNTING,
        schema.COMMUNICATION_EVENTS,
        schema.COMMUNICATION_OPS,
        schema.COMMUNICATION_LINKS,
        schema.BLOCK_CLASS_OPS,
        *schema.SUMMARY_CSVS,
    ),
    map_rank=stage.map_rank,
    map_eventless=stage.map_eventless,
    map_reads=(
        RankRead(schema.NORMALIZED_EVENTS, tuple(stage.SUMMARIZE_INPUT_COLUMNS)),
        RankRead(schema.STEP_SEGMENTS),
        RankRead(schema.LAYER_SEGMENTS),
        RankRead(schema.BLOCK_SEGMENTS),
    ),
    reduce_root=stage.reduce_root,
    headline=stage.headline,
)
