"""Rank-level findings: the slow rank, ranks that run different work, DP compute imbalance."""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline.diagnosis.findings import Finding, rule
from npuprof.pipeline.diagnosis.inputs import DiagnosisInputs
from npuprof.pipeline.diagnosis.moe import is_ep_collective
from npuprof.pipeline.diagnosis.outliers import low_outliers
from npuprof.pipeline.summaries.evidence import step_evidence_id

STRUCTURAL_ROLES = ("DP", "TP", "EP", "CP")  # members of these groups run the same layers


def _tested_collectives(alignment: pd.DataFrame, spec: dict) -> pd.DataFrame:
    return alignment[
        (alignment["member_count"] >= 3)
        & ~alignment["kind"].isin(spec["excluded_kinds"])
        & ~is_ep_collective(alignment)
    ]


def slow_rank(inputs: DiagnosisInputs) -> list[Finding]:
    """The rank voted the late arrival in most collectives, persistently across steps."""
    spec = rule("slow_rank_suspected")
    usable = _tested_collectives(inputs.alignment, spec)
    if usable.empty:
        return []
    votes = low_outliers(
        usable[["alignment_id", "rank_id"]].assign(value=usable["duration_us"]),
        {int(k): float(v) for k, v in spec["dixon_q_critical"].items()},
        float(spec["robust_z_min"]),
        float(spec["min_imposed_wait_us"]),
    )
    # only instances where someone waited materially can name a late rank; back-to-back
    # collectives with nothing to wait for neither accuse nor acquit anyone
    votes = votes[votes["gap"] >= float(spec["min_imposed_wait_us"])]
    tested = len(votes)
    step_of = usable.drop_duplicates("alignment_id").set_index("alignment_id")["step_id"]
    votes["step_id"] = step_of.reindex(votes["alignment_id"]).to_numpy()
    step_total = max(usable["step_id"].nunique(dropna=False), 1)
    voted = votes[votes["outlier"]]
    findings = []
    for rank, own in voted.groupby("rank_id"):  # a loop over voted ranks
        share, step_share = len(own) / tested, own["step_id"].nunique(dropna=False) / step_total
        if share < spec["vote_share_min"] or step_share < spec["step_share_min"]:
            continue
        mine = usable[(usable["rank_id"] == rank) & usable["alignment_id"].isin(own["alignment_id"])]
        others = usable[(usable["rank_id"] != rank) & usable["alignment_id"].isin(own["alignment_id"])]
        strongest = own.sort_values("gap", ascending=False)["alignment_id"]
        evidence = mine.set_index("alignment_id").reindex(strongest)["evidence_id"].dropna().tolist()
        findings.append(
            Finding(
                "slow_rank_suspected",
                "cross_rank",
                [int(rank)],
                evidence,
                {
                    "name": "late_arrival_vote_share",
                    "value": share,
                    "threshold": spec["vote_share_min"],
                    "test": f"{'/'.join(sorted(own['test'].unique()))} low outlier of duration per collective",
                },
                {
                    "rank": int(rank),
                    "votes": len(own),
                    "tested": tested,
                    "share": share,
                    "roles": "/".join(sorted(usable["parallel_role"].dropna().unique())),
                    "steps": int(own["step_id"].nunique(dropna=False)),
                    "step_total": step_total,
                    "wait_ms": float(others["late_by_us"].sum()) / 1000.0,
                },
                alignment_ids=strongest.tolist(),
                confidence="high" if step_total >= 3 and share >= 0.8 else None,
                limitations=[] if step_total >= 2 else ["one step only: persistence across steps is not shown"],
            )
        )
    return findings


def _groups(units: pd.DataFrame) -> pd.DataFrame:
    """Distinct member sets of collectives per structural role."""
    collectives = units[(units["alignment_type"] == "collective") & units["parallel_role"].isin(STRUCTURAL_ROLES)]
    return collectives.drop_duplicates(["parallel_role", "rank_ids"])[["parallel_role", "rank_ids"]]


def workload_asymmetry(inputs: DiagnosisInputs) -> list[Finding]:
    """Ranks of one DP / TP / EP / CP group that run a different number of layers per step."""
    complete = inputs.steps[inputs.steps["complete"].astype(bool)]
    if complete.empty:
        return []
    usual = complete.groupby("rank_id")["main_layer_count"].agg(lambda c: c.mode().iloc[0])  # a loop over ranks
    findings = []
    for role, members in _groups(inputs.units).itertuples(index=False):  # a loop over groups
        ranks = [int(r) for r in str(members).split(";")]
        counts = usual.reindex(ranks).dropna()
        if counts.nunique() <= 1:
            continue
        majority = counts.mode().iloc[0]
        odd = counts[counts != majority].index.tolist()
        evidence = [step_evidence_id(r, o) for r in odd for o in complete[complete["rank_id"] == r]["step_ordinal"][:2]]
        findings.append(
            Finding(
                "rank_workload_asymmetry",
                "cross_rank",
                odd,
                evidence,
                {"name": "distinct_layer_counts", "value": float(counts.nunique()), "threshold": 1.0},
                {"role": role, "counts": ", ".join(f"rank {r}: {int(c)}" for r, c in counts.items())},
            )
        )
    return findings


def dp_workload_imbalance(inputs: DiagnosisInputs) -> list[Finding]:
    """DP ranks whose mean compute per step differs by more than the rule's ratio."""
    spec = rule("dp_workload_imbalance")
    primary = inputs.accounting[
        (inputs.accounting["breakdown"] == "primary") & (inputs.accounting["category"] == "compute")
    ]
    if primary.empty:
        return []
    compute = primary.groupby(["rank_id", "step_ordinal"])["ms"].sum().groupby("rank_id").mean()
    findings = []
    for _, members in _groups(inputs.units[inputs.units["parallel_role"] == "DP"]).itertuples(index=False):
        ranks = [int(r) for r in str(members).split(";")]
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
                "dp_workload_imbalance",
                "cross_rank",
                extremes,
                evidence,
                {"name": "compute_ratio_max_min", "value": ratio, "threshold": spec["compute_ratio_min"]},
                {
                    "ranks": ", ".join(map(str, ranks)),
                    "ratio": ratio,
                    "low_ms": float(group.min()),
                    "high_ms": float(group.max()),
                },
                limitations=["compute per step from the time accounting; input sizes per rank are not visible"],
            )
        )
    return findings
