"""The nine stages, registered in order (docs/architecture.md): what each requires and produces,
and its map (per rank) and reduce (per root) functions. ``STAGE_NAMES`` (stage_order.py) is the pipeline order."""

from __future__ import annotations

from npuprof.pipeline import schema
from npuprof.pipeline.stage_order import STAGE_NAMES
from npuprof.pipeline.stages import (
    classify,
    cross_rank,
    diagnostics,
    evidence,
    model,
    normalize,
    report,
    segment,
    summarize,
)
from npuprof.pipeline.stages.base import RankRead, Stage


def _events(columns: list[str]) -> RankRead:
    return RankRead(schema.NORMALIZED_EVENTS, tuple(columns))


_STEPS, _LAYERS, _BLOCKS = (RankRead(t) for t in (schema.STEP_SEGMENTS, schema.LAYER_SEGMENTS, schema.BLOCK_SEGMENTS))
_OPERATORS = RankRead(schema.OPERATOR_SUMMARY)

STAGES: tuple[Stage, ...] = (
    Stage(
        name="normalize",
        requires=(),
        produces=(schema.NORMALIZED_EVENTS, schema.AICORE_FREQ, schema.SOURCE_INDEX, schema.CAPTURE_INFO),
        map_rank=normalize.map_rank,
        reduce_root=normalize.reduce_root,
    ),
    segment.STAGE,
    classify.STAGE,
    Stage(
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
        map_rank=summarize.map_rank,
        map_reads=(_events(summarize.SUMMARIZE_INPUT_COLUMNS), _STEPS, _LAYERS, _BLOCKS),
        reduce_root=summarize.reduce_root,
        headline=summarize.headline,
    ),
    evidence.STAGE,
    Stage(
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
        map_rank=model.map_rank,
        map_reads=(_events(model.MODEL_INPUT_COLUMNS), _STEPS, _BLOCKS, _OPERATORS),
        reduce_root=model.reduce_root,
        headline=model.headline,
    ),
    Stage(
        name="cross_rank",
        requires=(
            schema.stage_manifest_name("model"),
            schema.COMMUNICATION_EVENTS,
            schema.STEP_SEGMENTS,
            schema.LAYER_SEGMENTS,
        ),
        produces=(schema.COLLECTIVE_ALIGNMENT, schema.CROSS_RANK_ALIGNMENT, schema.CROSS_RANK_ALIGNMENT_CSV),
        reduce_root=cross_rank.reduce_root,
        headline=cross_rank.headline,
    ),
    Stage(
        name="diagnostics",
        requires=(
            schema.stage_manifest_name("cross_rank"),
            schema.COLLECTIVE_ALIGNMENT,
            schema.CROSS_RANK_ALIGNMENT,
            schema.EVIDENCE_INDEX,
        ),
        produces=(
            schema.DIAGNOSIS_FINDINGS,
            schema.STEP_ANOMALIES_CSV,
            schema.SLOW_RANK_DIFF_CSV,
            schema.STEP_LEDGER,
            schema.STEP_LEDGER_CSV,
            schema.CRITICAL_PATH,
            schema.CRITICAL_PATH_CSV,
        ),
        reduce_root=diagnostics.reduce_root,
        headline=diagnostics.headline,
    ),
    Stage(
        name="report",
        requires=(schema.stage_manifest_name("diagnostics"), schema.DIAGNOSIS_FINDINGS),
        produces=(schema.REPORT_DIR,),
        reduce_root=report.reduce_root,
        headline=report.headline,
    ),
)

if tuple(s.name for s in STAGES) != STAGE_NAMES:  # the CLI's --help reads the light list
    raise RuntimeError("npuprof.pipeline.stage_order.STAGE_NAMES differs from the registered stages")


def stage(name: str) -> Stage:
    """The registered stage called ``name``."""
    for candidate in STAGES:
        if candidate.name == name:
            return candidate
    raise KeyError(name)
