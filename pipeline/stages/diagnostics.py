"""diagnostics (per root): findings with their statistic, threshold and evidence.

Each detector in ``pipeline/diagnosis/`` reads the loaded tables and returns findings; thresholds
and wording come from ``knowledge/diagnosis_rules.yaml``. Every evidence id a finding cites must
resolve in the evidence index (and every alignment id in the alignment), or the stage fails.
"""

from __future__ import annotations

from collections import Counter

import pandas as pd
import pyarrow.compute as pc

from npuprof.pipeline import __version__, io, schema
from npuprof.pipeline.diagnosis.communication import collective_slow, slow_link
from npuprof.pipeline.diagnosis.evidence import check_evidence
from npuprof.pipeline.diagnosis.idle import bubble_findings, host_bound
from npuprof.pipeline.diagnosis.inputs import DiagnosisInputs
from npuprof.pipeline.diagnosis.moe import ep_findings
from npuprof.pipeline.diagnosis.operators import (
    AICORE_OP_TYPES,
    aicpu_exposed,
    masked_time_ns,
    wait_anchor_false_hotspot,
)
from npuprof.pipeline.diagnosis.ranks import dp_workload_imbalance, slow_rank, workload_asymmetry
from npuprof.pipeline.stages.base import RootContext, StageResult, int_ranks
from npuprof.pipeline.summaries.communication import global_ranks_by_group_hash

DETECTORS = (
    slow_rank,
    collective_slow,
    slow_link,
    ep_findings,
    workload_asymmetry,
    dp_workload_imbalance,
    bubble_findings,
    host_bound,
    aicpu_exposed,
    wait_anchor_false_hotspot,
)
EXPERT_OP_TYPE = "GroupedMatmul"
SOFT_LABEL_COLUMNS = ["rank_id", "evidence_id", "duration_us", "labels"]


def _expert_calls(ctx: RootContext, operators: pd.DataFrame) -> pd.DataFrame:
    if operators.empty or not (operators["type"] == EXPERT_OP_TYPE).any():
        return pd.DataFrame(columns=["rank_id", "row_idx", "input_shapes", "duration_ns"])
    table = ctx.read_table(
        schema.NORMALIZED_EVENTS,
        columns=["row_idx", "input_shapes", "duration_ns"],
        filter=pc.field("type") == EXPERT_OP_TYPE,
    )
    return int_ranks(table.to_pandas())


def _aicpu_exposure(ctx: RootContext, operators: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, AI CPU op name): its time and the part AI core work on the rank overlaps."""
    columns = ["rank_id", "name", "duration_us", "masked_us"]
    if operators.empty or not (operators["op_type"] == "aicpu").any():
        return pd.DataFrame(columns=columns)
    events = int_ranks(
        ctx.read_table(
            schema.NORMALIZED_EVENTS,
            columns=["name", "op_type", "start_ns", "end_ns"],
            filter=pc.field("op_type").isin(["aicpu", *AICORE_OP_TYPES]),
        ).to_pandas()
    )
    parts = []
    for rank, own in events.groupby("rank_id"):  # a loop over ranks
        aicpu = own[own["op_type"] == "aicpu"]
        masked = masked_time_ns(aicpu, own[own["op_type"] != "aicpu"])
        parts.append(
            pd.DataFrame(
                {
                    "rank_id": rank,
                    "name": aicpu["name"].to_numpy(),
                    "duration_us": (aicpu["end_ns"] - aicpu["start_ns"]).to_numpy() / 1000.0,
                    "masked_us": masked / 1000.0,
                }
            )
        )
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
    return frame.groupby(["rank_id", "name"], as_index=False)[["duration_us", "masked_us"]].sum()


def _inputs(ctx: RootContext) -> DiagnosisInputs:
    frames = {table: ctx.read_frame(table) for table in schema.STEP_SUMMARY.tables}
    steps = schema.join_view(schema.STEP_SUMMARY, [frames[t] for t in schema.STEP_SUMMARY.tables])
    operators = int_ranks(ctx.read_frame(schema.OPERATOR_SUMMARY))
    bubbles = int_ranks(ctx.read_frame(schema.BUBBLE_WINDOWS))
    labelled = bubbles[bubbles["soft_labels"].notna()] if len(bubbles) else bubbles
    capture = io.read_json_or_empty(ctx.out_dir / schema.CAPTURE_INFO)
    groups = [r.get("parallel_group_info") for r in capture.get("ranks", [])]
    return DiagnosisInputs(
        alignment=int_ranks(ctx.read_frame(schema.COLLECTIVE_ALIGNMENT)),
        units=ctx.read_frame(schema.CROSS_RANK_ALIGNMENT),
        steps=int_ranks(steps),
        accounting=int_ranks(ctx.read_frame(schema.STEP_TIME_ACCOUNTING)),
        operators=operators,
        links=int_ranks(ctx.read_frame(schema.COMMUNICATION_LINKS)),
        bubbles=bubbles,
        expert_calls=_expert_calls(ctx, operators),
        aicpu_exposure=_aicpu_exposure(ctx, operators),
        group_ranks=global_ranks_by_group_hash(groups),
        soft_labels=labelled.rename(columns={"soft_labels": "labels"})[SOFT_LABEL_COLUMNS],
    )


def reduce_root(ctx: RootContext) -> StageResult:
    """Run every detector, check the evidence chain, write diagnosis_findings.json."""
    inputs = _inputs(ctx)
    findings = [finding.to_dict() for detect in DETECTORS for finding in detect(inputs)]
    evidence_ids = set(ctx.read_table(schema.EVIDENCE_INDEX, columns=["evidence_id"]).column(0).to_pylist())
    check_evidence(findings, evidence_ids, set(inputs.units["alignment_id"].astype(str)))
    counts = {
        "finding_count": len(findings),
        "by_type": dict(Counter(f["finding_type"] for f in findings)),
        "by_severity": dict(Counter(f["severity"] for f in findings)),
    }
    document = {
        "schema_version": 1,
        "tool_version": __version__,
        "analysis_stage": "diagnostics",
        "created_at": io.utc_now(),
        "diagnosis_findings": findings,
        "counts": counts,
    }
    return StageResult(json_files={schema.DIAGNOSIS_FINDINGS: document}, manifest=counts)


def headline(manifest: dict) -> tuple[dict, list[str]]:
    """diagnostics' part of the result JSON: finding counts by type and severity."""
    return {k: manifest[k] for k in ("finding_count", "by_type", "by_severity")}, []
