"""communication_collective_slow: collective instances that transmit far slower than comparable ones."""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, priced, rule
from npuprof.pipeline.stages.diagnostics.registry import detector
from npuprof.pipeline.stages.diagnostics.retiming import scaled_transit


def _transmit_per_instance(frame: pd.DataFrame) -> pd.DataFrame:
    """Per instance: its transmit time (the fastest member's), kind, role and op family (the name
    without its sequence digits: the same op of the same group)."""
    transmit = frame["transit_us"].where(frame["transit_us"].notna(), frame["duration_us"] - frame["late_by_us"])
    per_instance = (
        frame.assign(transmit_us=transmit)
        .groupby("alignment_id")
        .agg(
            transmit_us=("transmit_us", "min"),
            kind=("kind", "first"),
            role=("parallel_role", "first"),
            family=("name", "first"),
        )
    )
    per_instance["family"] = per_instance["family"].str.replace(r"_\d+_\d+$", "", regex=True)
    return per_instance


@detector(
    finding_types=("communication_collective_slow",),
    reads={
        "alignment": (
            "alignment_id",
            "rank_id",
            "member_count",
            "transit_us",
            "duration_us",
            "late_by_us",
            "kind",
            "parallel_role",
            "name",
            "evidence_id",
        ),
        "step_model": (),
    },
)
def collective_slow(inputs: DiagnosisContext) -> list[Finding]:
    """Instances whose transmit time is far above that of comparable ones (same kind, role, name family).

    Transmit is communication.json's transit where the rank has it, else the duration minus the
    wait for the last member (``late_by_us``): waiting is never mistaken for slow transmission.
    """
    spec = rule("communication_collective_slow")
    frame = inputs.alignment[inputs.alignment["member_count"] >= 2]
    if frame.empty:
        return []
    per_instance = _transmit_per_instance(frame)
    keys = ["kind", "role", "family"]
    sizes = per_instance.groupby(keys, dropna=False)["transmit_us"].transform("size")
    median = per_instance.groupby(keys, dropna=False)["transmit_us"].transform("median")
    per_instance["median"] = median
    per_instance["ratio"] = per_instance["transmit_us"] / median.where(median > 0)
    slow = per_instance[
        (sizes >= spec["min_comparable"])
        & (per_instance["ratio"] >= spec["transit_ratio_min"])
        & (per_instance["transmit_us"] - median >= spec["excess_us_min"])
    ]
    findings = []
    for (kind, role, _), group in slow.groupby(keys, dropna=False):  # a loop over op families
        ids = group.sort_values("ratio", ascending=False).index
        members = frame[frame["alignment_id"].isin(ids)]
        findings.append(
            Finding(
                finding_type="communication_collective_slow",
                scope="cross_rank",
                rank_ids=sorted(members["rank_id"].unique().tolist()),
                evidence_ids=members.set_index("alignment_id").loc[ids[:4], "evidence_id"].tolist(),
                statistic={
                    "name": "transmit_over_comparable_median",
                    "value": float(group["ratio"].max()),
                    "threshold": spec["transit_ratio_min"],
                },
                values={
                    "count": len(group),
                    "kind": kind,
                    "role": role,
                    "ratio": float(group["ratio"].max()),
                    "median_us": float(group["median"].iloc[0]),
                    "worst_us": float(group["transmit_us"].max()),
                    "ranks": ", ".join(map(str, sorted(members["rank_id"].unique()))),
                },
                alignment_ids=list(ids),
                # these instances transmitting at their comparable median, replayed
                **priced(inputs.step_model, scaled_transit(inputs.step_model, group["median"] / group["transmit_us"])),
            )
        )
    return findings
