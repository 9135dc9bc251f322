"""communication_collective_slow: collective instances that transmit far slower than comparable ones: the
same kind, role and op family, moving as much (within a factor of two) — a 4-byte all-reduce of the same
communicator is no yardstick for a 100 MB gradient bucket."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.stages.diagnostics.collective_sizes import SIZE_COLUMNS, op_sizes, size_classes
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, priced, rule
from npuprof.pipeline.stages.diagnostics.registry import detector
from npuprof.pipeline.stages.diagnostics.retiming import scaled_transit

UNKNOWN_SIZE = -1000  # the size class of an instance no member's communication.json sizes
# the alignment columns the per-instance transmit reads (this detector's, and rdma_retransmission's)
TRANSMIT_READS = (
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
)
COMPARABLE = ["kind", "role", "family", "size_class"]


def transmit_per_instance(frame: pd.DataFrame, comm_ops: pd.DataFrame) -> pd.DataFrame:
    """Per instance: its transmit time (the fastest member's), kind, role, op family (the name without
    its sequence digits: the same op of the same group), size class (log2 of the MB its busiest
    transport moved, ``UNKNOWN_SIZE`` where no member says) and that transport."""
    transmit = frame["transit_us"].where(frame["transit_us"].notna(), frame["duration_us"] - frame["late_by_us"])
    sized = frame.assign(transmit_us=transmit)
    if len(comm_ops):
        sized = sized.merge(
            op_sizes(comm_ops)[["rank_id", "name", "size_mb", "transport"]], on=["rank_id", "name"], how="left"
        )
    else:
        sized = sized.assign(size_mb=np.nan, transport=None)
    per_instance = sized.groupby("alignment_id").agg(
        transmit_us=("transmit_us", "min"),
        kind=("kind", "first"),
        role=("parallel_role", "first"),
        family=("name", "first"),
        size_mb=("size_mb", "max"),
        transport=("transport", "first"),
    )
    per_instance["family"] = per_instance["family"].str.replace(r"_\d+_\d+$", "", regex=True)
    per_instance["size_class"] = np.nan_to_num(size_classes(per_instance["size_mb"]), nan=UNKNOWN_SIZE)
    return per_instance.drop(columns="size_mb")


def against_comparables(frame: pd.DataFrame, comm_ops: pd.DataFrame) -> pd.DataFrame:
    """``transmit_per_instance`` with each instance's comparable median transmit (``median``) and how many
    instances it is the median of (``comparable``): same kind, role, op family and size class."""
    per_instance = transmit_per_instance(frame, comm_ops)
    grouped = per_instance.groupby(COMPARABLE, dropna=False)["transmit_us"]
    return per_instance.assign(median=grouped.transform("median"), comparable=grouped.transform("size"))


@detector(
    finding_types=("communication_collective_slow",),
    reads={
        "alignment": TRANSMIT_READS,
        "comm_ops": SIZE_COLUMNS,
        "step_model": (),
    },
)
def collective_slow(inputs: DiagnosisContext) -> list[Finding]:
    """Instances whose transmit time is far above that of comparable ones (same kind, role, name family and
    size class).

    Transmit is communication.json's transit where the rank has it, else the duration minus the
    wait for the last member (``late_by_us``): waiting is never mistaken for slow transmission.
    """
    spec = rule("communication_collective_slow")
    frame = inputs.alignment[inputs.alignment["member_count"] >= 2]
    if frame.empty:
        return []
    per_instance = against_comparables(frame, inputs.comm_ops)
    median = per_instance["median"]
    per_instance["ratio"] = per_instance["transmit_us"] / median.where(median > 0)
    slow = per_instance[
        (per_instance["comparable"] >= spec["min_comparable"])
        & (per_instance["ratio"] >= spec["transit_ratio_min"])
        & (per_instance["transmit_us"] - median >= spec["excess_us_min"])
    ]
    findings = []
    for (kind, role, _), group in slow.groupby(COMPARABLE[:3], dropna=False):  # a loop over op families
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
