"""The segment stage, in one package: its declaration (``STAGE``), its code (``stage.py``) and what only
it uses — step windows (``steps.py``), decoder layers found from the kernel sequence (``layers.py``,
``step_memo.py``), the expected model's layer count (``expected.py``), and an inference capture's
forwards by batch and graph mode (``forwards.py``; dummy forwards cut out: ``forward_split.py``) with the
root's serving view (``serving_view.py``).
The event features and window metrics classify and later stages share stay in
``pipeline/segmentation/``."""

from __future__ import annotations

from npuprof.pipeline import schema
from npuprof.pipeline.segmentation.features import EVENT_FEATURES
from npuprof.pipeline.stages.base import RankRead, Stage
from npuprof.pipeline.stages.segment import stage

STAGE = Stage(
    name="segment",
    requires=(schema.stage_manifest_name("normalize"), schema.NORMALIZED_EVENTS),
    produces=(schema.STEP_SEGMENTS, schema.LAYER_SEGMENTS),
    optional=(schema.FORWARD_SUMMARY, schema.FORWARD_SUMMARY_CSV),  # an inference capture's forwards
    map_rank=stage.map_rank,
    map_eventless=stage.map_eventless,
    map_reads=(RankRead(schema.NORMALIZED_EVENTS, tuple(stage.SEGMENT_INPUT_COLUMNS)),),
    map_uses=(EVENT_FEATURES,),
    reduce_root=stage.reduce_root,
    headline=stage.headline,
)
