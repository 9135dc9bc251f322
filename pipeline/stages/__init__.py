"""The seven stages, registered in order (design.md §2).

Stages whose module is not built yet are registered without functions; the runner refuses them
clearly instead of pretending they ran.
"""
from __future__ import annotations

from npuprof.pipeline import schema
from npuprof.pipeline.stages import classify, normalize, segment
from npuprof.pipeline.stages.base import Stage

STAGES: tuple[Stage, ...] = (
    Stage(
        name="normalize",
        requires=(),
        produces=(schema.NORMALIZED_EVENTS, schema.SOURCE_INDEX, schema.CAPTURE_INFO),
        map_rank=normalize.map_rank,
        reduce_root=normalize.reduce_root,
        map_in_threads=True,
    ),
    Stage(
        name="segment",
        requires=(schema.stage_manifest_name("normalize"), schema.NORMALIZED_EVENTS),
        produces=("step_segments", "layer_segments"),
        map_rank=segment.map_rank,
        reduce_root=segment.reduce_root,
    ),
    Stage(
        name="classify",
        requires=(schema.stage_manifest_name("segment"), "step_segments", "layer_segments"),
        produces=("block_segments", "step_classes", "layer_classes", "step_anatomy", "class_signatures.json",
                  "step_summary.csv", "layer_summary.csv", "block_summary.csv", "step_anatomy.csv"),
        map_rank=classify.map_rank,
        reduce_root=classify.reduce_root,
    ),
    Stage(name="summarize", requires=(schema.stage_manifest_name("classify"),)),
    Stage(name="cross_rank", requires=(schema.stage_manifest_name("summarize"),)),
    Stage(name="diagnostics", requires=(schema.stage_manifest_name("cross_rank"),)),
    Stage(name="report", requires=(schema.stage_manifest_name("diagnostics"),)),
)

STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)


def stage(name: str) -> Stage:
    """The registered stage called ``name``."""
    for candidate in STAGES:
        if candidate.name == name:
            return candidate
    raise KeyError(name)
