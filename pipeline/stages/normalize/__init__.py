"""The normalize stage, in one package: its declaration (``STAGE``) and its code (``stage.py``: one
rank's kernels, communication ops and AI Core frequency from whichever source the rank has, as the
normalized event table). The source readers it shares with later stages (capture info, step trace,
communication files) stay in ``pipeline/sources/``; its tables are declared in ``schema/normalize.py``."""

from __future__ import annotations

from npuprof.pipeline import schema
from npuprof.pipeline.stages.base import Stage
from npuprof.pipeline.stages.normalize import stage

STAGE = Stage(
    name="normalize",
    requires=(),
    produces=(schema.NORMALIZED_EVENTS, schema.AICORE_FREQ, schema.SOURCE_INDEX, schema.CAPTURE_INFO),
    map_rank=stage.map_rank,
    reduce_root=stage.reduce_root,
    headline=stage.headline,
)
