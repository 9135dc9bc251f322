"""Idle-device findings: heavy bubbles, bubbles that recur step after step, and host-bound ranks."""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline.diagnosis.findings import Finding, rule
from npuprof.pipeline.diagnosis.inputs import DiagnosisInputs
from npuprof.pipeline.summaries.evidence import step_evidence_id


def _heavy_steps(steps: pd.DataFrame, tags: list[str], bubbles: pd.DataFrame) -> pd.Series:
    """Steps tagged heavy that also hold a bubble window to cite: idle made only of launch-sized
    gaps (below bubble_min_us) is host launch overhead, not a bubble."""
    text = steps["anomaly_tags"].fillna("").astype(str)
    tagged = pd.concat([text.str.contains(tag, regex=False) for tag in tags], axis=1).any(axis=1)
    with_window = pd.MultiIndex.from_frame(bubbles[["rank_id", "step_ordinal"]].drop_duplicates().astype("int64"))
    keys = pd.MultiIndex.from_frame(steps[["rank_id", "step_ordinal"]].astype("int64"))
    return tagged & keys.isin(with_window)


def _largest_bubbles(bubbles: pd.DataFrame, rank: int, ordinals: pd.Series) -> list[str]:
    mine = bubbles[(bubbles["rank_id"] == rank) & bubbles["step_ordinal"].isin(ordinals)]
    return mine.sort_values("duration_us", ascending=False).drop_duplicates("step_ordinal")["evidence_id"].tolist()


def bubble_findings(inputs: DiagnosisInputs) -> list[Finding]:
    """device_idle_bubble per rank with heavy steps; recurring_bubble_pattern where they recur."""
    spec, recurring = rule("device_idle_bubble"), rule("recurring_bubble_pattern")
    steps = inputs.steps
    if steps.empty:
        return []
    heavy = steps[_heavy_steps(steps, spec["tags"], inputs.bubbles)]
    findings = []
    for rank, own in heavy.groupby("rank_id"):  # a loop over ranks
        rank = int(rank)
        total = int((steps["rank_id"] == rank).sum())
        worst = own.sort_values("largest_internal_bubble_ms", ascending=False).iloc[0]
        bubbles = _largest_bubbles(inputs.bubbles, rank, own["step_ordinal"])
        evidence = bubbles + [step_evidence_id(rank, o) for o in own["step_ordinal"]]
        findings.append(
            Finding(
                "device_idle_bubble",
                "rank",
                [rank],
                evidence,
                {
                    "name": "heavy_idle_steps",
                    "value": float(len(own)),
                    "threshold": 1.0,
                    "test": " or ".join(spec["tags"]),
                },
                {
                    "rank": rank,
                    "count": len(own),
                    "total": total,
                    "largest_ms": float(worst["largest_internal_bubble_ms"]),
                    "step_id": None if pd.isna(worst["step_id"]) else int(worst["step_id"]),
                },
            )
        )
        complete = steps[(steps["rank_id"] == rank) & steps["complete"].astype(bool)]
        heavy_complete = own[own["complete"].astype(bool)]
        share = len(heavy_complete) / len(complete) if len(complete) else 0.0
        if len(complete) >= recurring["min_complete_steps"] and share >= recurring["recurrence_min"]:
            findings.append(
                Finding(
                    "recurring_bubble_pattern",
                    "rank",
                    [rank],
                    [step_evidence_id(rank, o) for o in heavy_complete["step_ordinal"]],
                    {"name": "bubble_recurrence_ratio", "value": share, "threshold": recurring["recurrence_min"]},
                    {"rank": rank, "count": len(heavy_complete), "total": len(complete), "share": share},
                )
            )
    return findings


def host_bound(inputs: DiagnosisInputs) -> list[Finding]:
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
        evidence = lag[lag["rank_id"] == rank].sort_values("duration_us", ascending=False)["evidence_id"].tolist()
        findings.append(
            Finding(
                "host_bound_suspected",
                "rank",
                [int(rank)],
                evidence,
                {"name": "idle_share_of_wall", "value": bubble_share, "threshold": spec["bubble_share_min"]},
                {"rank": int(rank), "bubble_share": bubble_share, "lag_share": lag_share},
                limitations=["host-trace labels are candidates, not established causes"],
            )
        )
    return findings
