"""The cross_rank stage, in one package: its declaration (``STAGE``), its code (``stage.py``) and what
only it uses — collectives matched across ranks (``matching.py``), each rank's clock offset
(``clock.py``), the alignment of collectives, steps and layers (``alignment.py``) and the HCCL
tables with rank skew (``hccl.py``). Its tables are declared in ``schema/cross_rank.py``."""

from __future__ import annotations

from npuprof.pipeline import schema
from npuprof.pipeline.stages.base import Stage
from npuprof.pipeline.stages.cross_rank import stage

STAGE = Stage(
    name="cross_rank",
    requires=(
        schema.stage_manifest_name("model"),
        schema.COMMUNICATION_EVENTS,
        schema.STEP_SEGMENTS,
        schema.LAYER_SEGMENTS,
    ),
    produces=(
        schema.COLLECTIVE_ALIGNMENT,
        schema.CROSS_RANK_ALIGNMENT,
        schema.CROSS_RANK_ALIGNMENT_CSV,
        *schema.COLLECTIVE_CSVS,
    ),
    reduce_root=stage.reduce_root,
    headline=stage.headline,
)
