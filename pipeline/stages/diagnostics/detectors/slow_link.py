"""slow_link_suspected: links whose bandwidth is far below comparable links."""

from __future__ import annotations

import pandas as pd

from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, priced, rule
from npuprof.pipeline.stages.diagnostics.registry import detector
from npuprof.pipeline.stages.diagnostics.retiming import scaled_transit
from npuprof.pipeline.summaries.links import LINK_INPUT_COLUMNS, link_bandwidths


def _at_median_bandwidth(inputs: DiagnosisContext, src: int, dst: int, ratio: float) -> dict:
    """What the step saves if the link ran at its comparable links' median bandwidth: the transit of every
    collective both ends join shrinks by the bandwidth ratio (the slowest link bounds a ring), replayed."""
    alignment = inputs.alignment
    ends = alignment[alignment["rank_id"].isin([src, dst])].groupby("alignment_id")["rank_id"].nunique()
    over_link = ends[ends == 2].index
    return priced(inputs.step_model, scaled_transit(inputs.step_model, pd.Series(ratio, index=over_link)))


@detector(
    finding_types=("slow_link_suspected",),
    reads={
        "links": LINK_INPUT_COLUMNS,
        "alignment": ("alignment_id", "rank_id", "name", "evidence_id"),
        "group_ranks": (),
        "step_model": (),
    },
)
def slow_link(inputs: DiagnosisContext) -> list[Finding]:
    """Links whose bandwidth is far below comparable links (same group, op kind, transport, size)."""
    spec = rule("slow_link_suspected")
    per_link = link_bandwidths(inputs.links, inputs.group_ranks)
    slow = per_link[(per_link["peers"] >= spec["min_comparable"]) & (per_link["ratio"] <= spec["bandwidth_ratio_max"])]
    findings = []
    for row in slow.itertuples(index=False):  # a loop over slow links
        src, dst = int(row.src), int(row.dst)
        ops = inputs.alignment[(inputs.alignment["rank_id"] == row.reporter)]
        family = str(row.op_name).rsplit("_", 2)[0]
        evidence = ops[ops["name"].str.startswith(family)]["evidence_id"].head(4).tolist()
        findings.append(
            Finding(
                finding_type="slow_link_suspected",
                scope="link",
                rank_ids=[int(src), int(dst)],
                evidence_ids=evidence,
                statistic={
                    "name": "bandwidth_over_comparable_median",
                    "value": float(row.ratio),
                    "threshold": spec["bandwidth_ratio_max"],
                },
                values={
                    "src": int(src),
                    "dst": int(dst),
                    "transport": row.transport,
                    "role": row.parallel_role,
                    "bandwidth": float(row.bandwidth),
                    "ratio": float(row.ratio),
                    "median": float(row.median),
                    "ops": int(row.ops),
                },
                **_at_median_bandwidth(inputs, int(src), int(dst), float(row.ratio)),
            )
        )
    return findings
