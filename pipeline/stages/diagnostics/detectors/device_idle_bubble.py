"""device_idle_bubble and recurring_bubble_pattern: ranks whose steps hold heavy idle windows."""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline.evidence_ids import step_evidence_id
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, priced, rule
from npuprof.pipeline.stages.diagnostics.registry import detector
from npuprof.pipeline.stages.diagnostics.retiming import close_windows
from npuprof.pipeline.stages.diagnostics.step_tags import has_tag
from npuprof.pipeline.summaries.gap_kinds import head_idle_name


def _heavy_steps(steps: pd.DataFrame, step_tags: pd.DataFrame, tags: list[str], bubbles: pd.DataFrame) -> pd.Series:
    """Steps tagged heavy that also hold a bubble window to cite: idle made only of launch-sized
    gaps (below bubble_min_us) is host launch overhead, not a bubble."""
    keys = ["rank_id", "step_ordinal"]

    def index(frame: pd.DataFrame) -> pd.MultiIndex:
        return pd.MultiIndex.from_frame(frame[keys].astype("int64"))

    tagged = index(step_tags[has_tag(step_tags["anomaly_tags"], tags)])
    with_window = index(bubbles[keys].drop_duplicates())
    own = index(steps)
    return pd.Series(own.isin(tagged) & own.isin(with_window), index=steps.index)


def _bubbles_of(bubbles: pd.DataFrame, rank: int, ordinals: pd.Series) -> pd.DataFrame:
    return bubbles[(bubbles["rank_id"] == rank) & bubbles["step_ordinal"].isin(ordinals)]


def _closed(inputs: DiagnosisContext, windows: pd.DataFrame, rank: int, ordinals: pd.Series) -> dict:
    """What the rank's steps would save with its idle ``windows`` in ``ordinals`` closed (replayed)."""
    mine = _bubbles_of(windows, rank, ordinals)
    windows = mine.assign(start_us=mine["start_ns"] / 1000.0)[["rank_id", "start_us", "duration_us"]]
    return priced(inputs.step_model, close_windows(inputs.step_model, windows))


def _largest_bubbles(bubbles: pd.DataFrame, rank: int, ordinals: pd.Series) -> list[str]:
    mine = _bubbles_of(bubbles, rank, ordinals)
    return mine.sort_values("duration_us", ascending=False).drop_duplicates("step_ordinal")["evidence_id"].tolist()


@detector(
    finding_types=("device_idle_bubble", "recurring_bubble_pattern"),
    reads={
        "steps": ("rank_id", "step_ordinal", "step_id", "complete", "largest_internal_bubble_ms"),
        "step_tags": ("rank_id", "step_ordinal", "anomaly_tags"),
        "bubbles": ("rank_id", "step_ordinal", "kind", "start_ns", "duration_us", "evidence_id"),
        "step_model": (),
    },
)
def bubble_findings(inputs: DiagnosisContext) -> list[Finding]:
    """device_idle_bubble per rank with heavy steps; recurring_bubble_pattern where they recur."""
    spec, recurring = rule("device_idle_bubble"), rule("recurring_bubble_pattern")
    steps = inputs.steps
    if steps.empty:
        return []
    # the idle before a step's first kernel is the host's (its causes: host_causes), not a bubble inside
    windows = inputs.bubbles[inputs.bubbles["kind"] != head_idle_name()]
    heavy = steps[_heavy_steps(steps, inputs.step_tags, spec["tags"], windows)]
    findings = []
    for rank, own in heavy.groupby("rank_id"):  # a loop over ranks
        rank = int(rank)
        total = int((steps["rank_id"] == rank).sum())
        worst = own.sort_values("largest_internal_bubble_ms", ascending=False).iloc[0]
        bubbles = _largest_bubbles(windows, rank, own["step_ordinal"])
        evidence = bubbles + [step_evidence_id(rank, o) for o in own["step_ordinal"]]
        findings.append(
            Finding(
                finding_type="device_idle_bubble",
                scope="rank",
                rank_ids=[rank],
                evidence_ids=evidence,
                statistic={
                    "name": "heavy_idle_steps",
                    "value": float(len(own)),
                    "threshold": 1.0,
                    "test": " or ".join(spec["tags"]),
                },
                values={
                    "rank": rank,
                    "count": len(own),
                    "total": total,
                    "largest_ms": float(worst["largest_internal_bubble_ms"]),
                    "step_id": None if pd.isna(worst["step_id"]) else int(worst["step_id"]),
                    "in_step": "" if pd.isna(worst["step_id"]) else f", step {int(worst['step_id'])}",
                },
                **_closed(inputs, windows, rank, own["step_ordinal"]),
            )
        )
        complete = steps[(steps["rank_id"] == rank) & steps["complete"].astype(bool)]
        heavy_complete = own[own["complete"].astype(bool)]
        share = len(heavy_complete) / len(complete) if len(complete) else 0.0
        if len(complete) >= recurring["min_complete_steps"] and share >= recurring["recurrence_min"]:
            findings.append(
                Finding(
                    finding_type="recurring_bubble_pattern",
                    scope="rank",
                    rank_ids=[rank],
                    evidence_ids=[step_evidence_id(rank, o) for o in heavy_complete["step_ordinal"]],
                    statistic={
                        "name": "bubble_recurrence_ratio",
                        "value": share,
                        "threshold": recurring["recurrence_min"],
                    },
                    values={"rank": rank, "count": len(heavy_complete), "total": len(complete), "share": share},
                    **_closed(inputs, windows, rank, heavy_complete["step_ordinal"]),
                )
            )
    return findings
