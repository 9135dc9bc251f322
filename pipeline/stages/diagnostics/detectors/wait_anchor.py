"""wait_anchor_false_hotspot, an annotation: costly operators whose cost is nearly all waiting.

It fires on healthy runs too (every stream that waits has such an op), so it qualifies the operator
evidence it names instead of claiming a cause: no severity, no recoverable time.
"""

from __future__ import annotations

from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, rule
from npuprof.pipeline.stages.diagnostics.registry import detector


@detector(
    finding_types=("wait_anchor_false_hotspot",),
    reads={
        "operators": (
            "rank_id",
            "name",
            "total_cost_us",
            "wait_ratio",
            "duration_avg_us",
            "evidence_id",
            "row_start",
            "row_end",
        ),
    },
)
def wait_anchor_false_hotspot(inputs: DiagnosisContext) -> list[Finding]:
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
            finding_type="wait_anchor_false_hotspot",
            scope="operator",
            rank_ids=[int(row.rank_id)],
            evidence_ids=[row.evidence_id],
            statistic={"name": "wait_ratio", "value": float(row.wait_ratio), "threshold": spec["wait_ratio_min"]},
            values={
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
