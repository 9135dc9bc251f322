"""Workload asymmetry across the ranks of one group: rank_workload_asymmetry (ranks of one DP / TP / EP / CP
group that run a different number of layers) and dp_workload_imbalance (DP ranks whose mean compute per
step differs by more than the rule's ratio)."""

from __future__ import annotations

from npuprof.pipeline.evidence_ids import step_evidence_id
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, priced, rule
from npuprof.pipeline.stages.diagnostics.groups import members, structural_groups
from npuprof.pipeline.stages.diagnostics.registry import detector
from npuprof.pipeline.stages.diagnostics.retiming import at_peer_median, combined


@detector(
    finding_types=("rank_workload_asymmetry",),
    reads={
        "steps": ("rank_id", "step_ordinal", "complete", "main_layer_count"),
        "units": ("alignment_type", "parallel_role", "rank_ids"),
        "step_model": (),
    },
)
def workload_asymmetry(inputs: DiagnosisContext) -> list[Finding]:
    """Ranks of one DP / TP / EP / CP group that run a different number of layers per step."""
    complete = inputs.steps[inputs.steps["complete"].astype(bool)]
    if complete.empty:
        return []
    usual = complete.groupby("rank_id")["main_layer_count"].agg(lambda c: c.mode().iloc[0])  # a loop over ranks
    findings = []
    for role, member_ids in structural_groups(inputs.units).itertuples(index=False):  # a loop over groups
        ranks = members(member_ids)
        counts = usual.reindex(ranks).dropna()
        if counts.nunique() <= 1:
            continue
        majority = counts.mode().iloc[0]
        odd = counts[counts != majority].index.tolist()
        evidence = [step_evidence_id(r, o) for r in odd for o in complete[complete["rank_id"] == r]["step_ordinal"][:2]]
        findings.append(
            Finding(
                finding_type="rank_workload_asymmetry",
                scope="cross_rank",
                rank_ids=odd,
                evidence_ids=evidence,
                statistic={"name": "distinct_layer_counts", "value": float(counts.nunique()), "threshold": 1.0},
                values={"role": role, "counts": ", ".join(f"rank {r}: {int(c)}" for r, c in counts.items())},
                # the odd ranks' work at their peers' median (only a rank doing more lengthens the step)
                **priced(
                    inputs.step_model,
                    combined(inputs.step_model, [at_peer_median(inputs.step_model, int(r)) for r in odd]),
                ),
            )
        )
    return findings


@detector(
    finding_types=("dp_workload_imbalance",),
    reads={
        "accounting": ("rank_id", "step_ordinal", "breakdown", "category", "ms"),
        "units": ("alignment_type", "parallel_role", "rank_ids"),
        "step_model": (),
    },
)
def dp_workload_imbalance(inputs: DiagnosisContext) -> list[Finding]:
    """DP ranks whose mean compute per step differs by more than the rule's ratio."""
    spec = rule("dp_workload_imbalance")
    primary = inputs.accounting[
        (inputs.accounting["breakdown"] == "primary") & (inputs.accounting["category"] == "compute")
    ]
    if primary.empty:
        return []
    compute = primary.groupby(["rank_id", "step_ordinal"])["ms"].sum().groupby("rank_id").mean()
    findings = []
    for _, member_ids in structural_groups(inputs.units[inputs.units["parallel_role"] == "DP"]).itertuples(index=False):
        ranks = members(member_ids)
        group = compute.reindex(ranks).dropna()
        if len(group) < 2 or group.min() <= 0:
            continue
        ratio = float(group.max() / group.min())
        if ratio < spec["compute_ratio_min"]:
            continue
        extremes = [int(group.idxmin()), int(group.idxmax())]
        evidence = [
            step_evidence_id(r, o) for r in extremes for o in primary[primary["rank_id"] == r]["step_ordinal"][:2]
        ]
        findings.append(
            Finding(
                finding_type="dp_workload_imbalance",
                scope="cross_rank",
                rank_ids=extremes,
                evidence_ids=evidence,
                statistic={"name": "compute_ratio_max_min", "value": ratio, "threshold": spec["compute_ratio_min"]},
                values={
                    "ranks": ", ".join(map(str, ranks)),
                    "ratio": ratio,
                    "low_ms": float(group.min()),
                    "high_ms": float(group.max()),
                },
                limitations=["compute per step from the time accounting; input sizes per rank are not visible"],
                # the heaviest rank's work at its DP peers' median, replayed
                **priced(inputs.step_model, at_peer_median(inputs.step_model, int(group.idxmax()))),
            )
        )
    return findings
