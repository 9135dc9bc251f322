"""slow_rank_suspected: the rank that arrives last at most collectives, persistently across steps."""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, priced, rule
from npuprof.pipeline.stages.diagnostics.groups import is_ep_collective
from npuprof.pipeline.stages.diagnostics.outliers import low_outliers
from npuprof.pipeline.stages.diagnostics.registry import detector
from npuprof.pipeline.stages.diagnostics.retiming import at_peer_median
from npuprof.pipeline.stages.diagnostics.slow_card import peers_of, slow_card_diff, what_differs

ALIGNMENT_COLUMNS = (
    "alignment_id",
    "rank_id",
    "member_count",
    "kind",
    "name",
    "parallel_role",
    "duration_us",
    "step_id",
    "late_by_us",
    "evidence_id",
)


def _tested_collectives(alignment: pd.DataFrame, spec: dict) -> pd.DataFrame:
    return alignment[
        (alignment["member_count"] >= 3)
        & ~alignment["kind"].isin(spec["excluded_kinds"])
        & ~is_ep_collective(alignment)
    ]


def _votes(usable: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """Per tested collective: the low-outlier test of its members' durations (the late arrival)."""
    votes = low_outliers(
        usable[["alignment_id", "rank_id"]].assign(value=usable["duration_us"]),
        {int(k): float(v) for k, v in spec["dixon_q_critical"].items()},
        float(spec["robust_z_min"]),
        float(spec["min_imposed_wait_us"]),
    )
    # only instances where someone waited materially can name a late rank; back-to-back
    # collectives with nothing to wait for neither accuse nor acquit anyone
    return votes[votes["gap"] >= float(spec["min_imposed_wait_us"])]


@detector(
    finding_types=("slow_rank_suspected",),
    reads={
        "alignment": ALIGNMENT_COLUMNS,
        "step_model": (),
        "card_profile": (),
        "steps": ("rank_id", "main_layer_count"),
    },
)
def slow_rank(inputs: DiagnosisContext) -> list[Finding]:
    """The rank voted the late arrival in most collectives, persistently across steps."""
    spec = rule("slow_rank_suspected")
    usable = _tested_collectives(inputs.alignment, spec)
    if usable.empty:
        return []
    votes = _votes(usable, spec)
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
                finding_type="slow_rank_suspected",
                scope="cross_rank",
                rank_ids=[int(rank)],
                evidence_ids=evidence,
                statistic={
                    "name": "late_arrival_vote_share",
                    "value": share,
                    "threshold": spec["vote_share_min"],
                    "test": f"{'/'.join(sorted(own['test'].unique()))} low outlier of duration per collective",
                },
                values={
                    "rank": int(rank),
                    "votes": len(own),
                    "tested": tested,
                    "share": share,
                    "roles": "/".join(sorted(usable["parallel_role"].dropna().unique())),
                    "steps": int(own["step_id"].nunique(dropna=False)),
                    "step_total": step_total,
                    "wait_ms": float(others["late_by_us"].sum()) / 1000.0,
                    "differs": what_differs(
                        slow_card_diff(inputs.card_profile, int(rank), peers_of(inputs.steps, int(rank)))
                    ),
                },
                alignment_ids=strongest.tolist(),
                confidence="high" if step_total >= 3 and share >= 0.8 else None,
                limitations=[] if step_total >= 2 else ["one step only: persistence across steps is not shown"],
                # the rank's work between collectives at its peers' median, replayed
                **priced(inputs.step_model, at_peer_median(inputs.step_model, rank)),
            )
        )
    return findings
