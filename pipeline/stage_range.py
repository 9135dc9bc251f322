"""Which stages a run executes: the whole pipeline, or a --from / --to / --only stage_range, and
whether the artifacts the stage_range builds on exist."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from npuprof.pipeline import schema
from npuprof.pipeline.errors import MissingPrerequisites, UsageError
from npuprof.pipeline.stages import STAGE_NAMES, stage
from npuprof.pipeline.stages.base import Stage


@dataclass(frozen=True)
class StageRange:
    """Which stages to run: the whole pipeline, or a --from/--to/--only stage_range."""

    from_stage: str | None = None
    to_stage: str | None = None
    only_stage: str | None = None

    @property
    def resumes(self) -> bool:
        """True when the stage_range builds on artifacts of an earlier run."""
        return self.only_stage is not None or self.from_stage is not None


def resolve_stage_range(stage_range: StageRange) -> list[Stage]:
    """The stages to run, in pipeline order."""
    for name in (stage_range.from_stage, stage_range.to_stage, stage_range.only_stage):
        if name is not None and name not in STAGE_NAMES:
            raise UsageError(f"unknown stage {name!r}; stages are: {', '.join(STAGE_NAMES)}")
    if stage_range.only_stage and (stage_range.from_stage or stage_range.to_stage):
        raise UsageError("--only-stage cannot be combined with --from-stage or --to-stage")
    if stage_range.only_stage:
        names = [stage_range.only_stage]
    else:
        first = STAGE_NAMES.index(stage_range.from_stage) if stage_range.from_stage else 0
        last = STAGE_NAMES.index(stage_range.to_stage) if stage_range.to_stage else len(STAGE_NAMES) - 1
        if last < first:
            raise UsageError(f"--to-stage {stage_range.to_stage} comes before --from-stage {stage_range.from_stage}")
        names = list(STAGE_NAMES[first : last + 1])
    return [stage(n) for n in names]


def check_prerequisites(out_dir: Path, stages: list[Stage]) -> None:
    """Every artifact a selected stage needs exists, or an earlier selected stage makes it."""
    will_exist: set[str] = set()
    for current in stages:
        needed = [schema.as_path(a) for a in current.requires]
        missing = [a for a in needed if a not in will_exist and not (out_dir / a).exists()]
        if missing:
            raise MissingPrerequisites(current.name, missing)
        will_exist.update(schema.as_path(a) for a in current.produces)
        will_exist.add(current.manifest_name)
