"""Operator findings: AI CPU work nothing hides, and operators that look hot only because they wait."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.diagnosis.findings import Finding, rule
from npuprof.pipeline.diagnosis.inputs import DiagnosisInputs

AICORE_OP_TYPES = ("aic", "aiv", "mix_cv", "mix_comm_aiv")


def masked_time_ns(aicpu: pd.DataFrame, busy: pd.DataFrame) -> np.ndarray:
    """For each AI CPU interval (start_ns, end_ns), the ns of it that AI core work overlaps.

    ``busy`` are the AI core intervals of the same rank; their union is built once (sorted starts,
    running max of ends), then each AI CPU interval is measured against it with sorted searches and
    prefix sums — no loop over events.
    """
    if aicpu.empty or busy.empty:
        return np.zeros(len(aicpu))
    order = np.argsort(busy["start_ns"].to_numpy(), kind="stable")
    starts = busy["start_ns"].to_numpy()[order]
    ends = np.maximum.accumulate(busy["end_ns"].to_numpy()[order])
    new = np.r_[True, starts[1:] > ends[:-1]]
    union_start = starts[new]
    union_end = np.r_[ends[np.flatnonzero(new)[1:] - 1], ends[-1]]
    covered = np.r_[0, np.cumsum(union_end - union_start)]

    def covered_until(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(union_start, t, side="right")
        inside = np.clip(t - union_start[np.maximum(k - 1, 0)], 0, None)
        partial = np.where(k > 0, np.minimum(inside, (union_end - union_start)[np.maximum(k - 1, 0)]), 0)
        return covered[np.maximum(k - 1, 0)] * (k > 0) + partial

    a, b = aicpu["start_ns"].to_numpy(), aicpu["end_ns"].to_numpy()
    return covered_until(b) - covered_until(a)


def aicpu_exposed(inputs: DiagnosisInputs) -> list[Finding]:
    """AI CPU ops that run with almost no AI core work beside them, per op name over ranks."""
    spec = rule("aicpu_exposed")
    exposure = inputs.aicpu_exposure
    if exposure.empty:
        return []
    per_op = exposure.groupby(["name"]).agg(duration_us=("duration_us", "sum"), masked_us=("masked_us", "sum"))
    per_op["masked_ratio"] = per_op["masked_us"] / per_op["duration_us"].where(per_op["duration_us"] > 0)
    per_op["exposed_us"] = per_op["duration_us"] - per_op["masked_us"]
    flagged = per_op[
        (per_op["masked_ratio"] < spec["masked_ratio_max"]) & (per_op["exposed_us"] >= spec["min_exposed_us"])
    ]
    findings = []
    for name, row in flagged.iterrows():  # a loop over flagged AI CPU op names
        ranks = sorted(exposure[exposure["name"] == name]["rank_id"].unique().tolist())
        ops = inputs.operators[(inputs.operators["name"] == name) & (inputs.operators["op_type"] == "aicpu")]
        findings.append(
            Finding(
                "aicpu_exposed",
                "operator",
                ranks,
                ops["evidence_id"].tolist(),
                {"name": "masked_ratio", "value": float(row["masked_ratio"]), "threshold": spec["masked_ratio_max"]},
                {
                    "name": name,
                    "ranks": ", ".join(map(str, ranks)),
                    "exposed_ms": float(row["exposed_us"]) / 1000.0,
                    "masked": float(row["masked_ratio"]),
                },
                limitations=["masking is measured against AI core kernels on any stream of the same rank"],
            )
        )
    return findings


def wait_anchor_false_hotspot(inputs: DiagnosisInputs) -> list[Finding]:
    """Among each rank's costliest operators, tiny ones whose cost is nearly all wait."""
    spec = rule("wait_anchor_false_hotspot")
    ops = inputs.operators
    if ops.empty:
        return []
    ranked = (
        ops.sort_values(["rank_id", "total_cost_us"], ascending=[True, False]).groupby("rank_id").head(spec["top_n"])
    )
    hits = ranked[(ranked["wait_ratio"] > spec["wait_ratio_min"]) & (ranked["duration_avg_us"] < spec["max_avg_us"])]
    return [
        Finding(
            "wait_anchor_false_hotspot",
            "operator",
            [int(row.rank_id)],
            [row.evidence_id],
            {"name": "wait_ratio", "value": float(row.wait_ratio), "threshold": spec["wait_ratio_min"]},
            {
                "name": row.name,
                "rank": int(row.rank_id),
                "cost_ms": float(row.total_cost_us) / 1000.0,
                "wait": float(row.wait_ratio),
            },
            limitations=[
                f"rows {int(row.row_start)}..{int(row.row_end)}: its wait is queueing before it, not its work"
            ],
        )
        for row in hits.itertuples(index=False)  # a loop over at most top_n operators per rank
    ]
