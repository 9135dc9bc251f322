"""host_bound_suspected: ranks that idle much of their wall while the host lags launching."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from npuprof.pipeline import schema
from npuprof.pipeline.diagnosis.context import DiagnosisContext
from npuprof.pipeline.diagnosis.findings import Finding, rule
from npuprof.pipeline.diagnosis.registry import derived_input, detector
from npuprof.pipeline.diagnosis.retiming import close_windows, recoverable_ms
from npuprof.pipeline.io import int_ranks

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext


@derived_input("soft_labels")
def soft_labels(ctx: RootContext) -> pd.DataFrame:
    """Idle windows the host trace labelled: rank_id, evidence_id, start_us, duration_us, labels ('|'-joined)."""
    columns = ["rank_id", "evidence_id", "start_ns", "duration_us", "soft_labels"]
    bubbles = int_ranks(ctx.read_frame(schema.BUBBLE_WINDOWS)[columns])
    bubbles = bubbles.assign(start_us=bubbles["start_ns"] / 1000.0).drop(columns="start_ns")
    labelled = bubbles[bubbles["soft_labels"].notna()] if len(bubbles) else bubbles
    return labelled.rename(columns={"soft_labels": "labels"})


@detector(
    finding_types=("host_bound_suspected",),
    reads={"soft_labels": (), "steps": ("rank_id", "wall_ms", "underfeed_ms"), "step_model": ()},
    notes=("host_bound",),
)
def host_bound(inputs: DiagnosisContext) -> list[Finding]:
    """Ranks that idle much of their wall while the host trace shows launch lag in the gaps."""
    spec = rule("host_bound_suspected")
    labels = inputs.soft_labels
    if labels.empty or inputs.steps.empty:
        return []
    wall = inputs.steps.groupby("rank_id")["wall_ms"].sum()
    idle = inputs.steps.groupby("rank_id")["underfeed_ms"].sum()
    lag = labels[labels["labels"].str.contains("possible_host_launch_lag", regex=False)]
    lag_us = lag.groupby("rank_id")["duration_us"].sum()
    labelled_us = labels.groupby("rank_id")["duration_us"].sum()
    findings = []
    for rank in labelled_us.index:  # a loop over ranks with a host trace
        bubble_share = float(idle.get(rank, 0.0) / wall.get(rank, float("inf")))
        lag_share = float(lag_us.get(rank, 0.0) / labelled_us[rank]) if labelled_us[rank] > 0 else 0.0
        if bubble_share < spec["bubble_share_min"] or lag_share < spec["launch_lag_share_min"]:
            continue
        mine = lag[lag["rank_id"] == rank]
        evidence = mine.sort_values("duration_us", ascending=False)["evidence_id"].tolist()
        findings.append(
            Finding(
                "host_bound_suspected",
                "rank",
                [int(rank)],
                evidence,
                {"name": "idle_share_of_wall", "value": bubble_share, "threshold": spec["bubble_share_min"]},
                {"rank": int(rank), "bubble_share": bubble_share, "lag_share": lag_share},
                limitations=["host-trace labels are candidates, not established causes"],
                # the host keeping up: the windows it lagged in closed, replayed
                recoverable_ms_per_step=recoverable_ms(inputs.step_model, close_windows(inputs.step_model, mine)),
            )
        )
    return findings
