"""The nine stages, registered in order (docs/architecture.md). Each stage is a package
(``pipeline/stages/<stage>/``) holding its declaration (``STAGE``: what it requires and produces, its
map (per rank) and reduce (per root) functions) and its code; ``STAGE_NAMES`` (stage_order.py) is
the pipeline order."""

from __future__ import annotations

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
from npuprof.pipeline.stages.base import Stage

STAGES: tuple[Stage, ...] = tuple(
    package.STAGE
    for package in (normalize, segment, classify, summarize, evidence, model, cross_rank, diagnostics, report)
)

if tuple(s.name for s in STAGES) != STAGE_NAMES:  # the CLI's --help reads the light list
    raise RuntimeError("npuprof.pipeline.stage_order.STAGE_NAMES differs from the registered stages")


def stage(name: str) -> Stage:
    """The registered stage called ``name``."""
    for candidate in STAGES:
        if candidate.name == name:
            return candidate
    raise KeyError(name)
