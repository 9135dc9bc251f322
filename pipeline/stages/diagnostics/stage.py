"""diagnostics (per root): findings with their statistic, threshold and evidence, and each step's
anomaly tags (step_anomalies.csv).

Every detector registered in ``pipeline/stages/diagnostics/detectors/`` reads the inputs it declares from a
lazy context and returns findings; thresholds and wording come from
``knowledge/diagnosis_rules.yaml``. Every evidence id a finding cites must resolve in the evidence
index (and every alignment id in the alignment), or the stage fails.
"""

from __future__ import annotations

from collections import Counter

import pandas as pd

from npuprof import knowledge
from npuprof.pipeline import __version__, io, schema
from npuprof.pipeline.io import int_ranks
from npuprof.pipeline.stages.base import RootContext, StageResult, conformed
from npuprof.pipeline.stages.diagnostics.capture_health import COMM_READS, capture_health, lower_confidence
from npuprof.pipeline.stages.diagnostics.cited_evidence import check_evidence
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.critical_path import critical_path
from npuprof.pipeline.stages.diagnostics.findings import (
    is_annotation,
    link_causes,
    merge_symptoms,
    rank_by_cost,
    recoverable_by_rank,
    recoverable_together,
    saves_nothing,
)
from npuprof.pipeline.stages.diagnostics.ledger import ledger_lines, step_ledger, unexplained_share
from npuprof.pipeline.stages.diagnostics.ledger_credit import window_lines
from npuprof.pipeline.stages.diagnostics.registry import detectors
from npuprof.pipeline.stages.diagnostics.savings import replay_savings
from npuprof.pipeline.stages.diagnostics.slow_card import peers_of, slow_card_diff


def reduce_root(ctx: RootContext) -> StageResult:
    """Run every registered detector, check the evidence chain, write diagnosis_findings.json."""
    inputs = DiagnosisContext(ctx)
    found = [finding for item in detectors() if item.phase == "findings" for finding in item.detect(inputs)]
    # what the findings leave unexplained in the step ledger is the ledger-phase detectors' to report
    lines = ledger_lines(*_ledger_sources(ctx))  # the same lines, explained once by each set of findings
    first_claimed = [f for f in found if not is_annotation(f.finding_type)]
    first = link_causes([f.to_dict() for f in first_claimed])
    savings = _savings(inputs, first_claimed, first, {})
    inputs.provide("ledger", step_ledger(lines, first, savings))
    inputs.provide("first_findings", list(found))
    found += [finding for item in detectors() if item.phase == "ledger" for finding in item.detect(inputs)]
    rules = knowledge.load("diagnosis_rules")
    order = {name: position for position, name in enumerate([*rules["findings"], *rules["annotations"]])}
    found.sort(key=lambda finding: order[finding.finding_type])  # stable: a detector's own order within a type
    steps = inputs.steps
    step_wall_ms = float(steps["wall_ms"].mean()) if len(steps) and "wall_ms" in steps else None
    claimed = [finding for finding in found if not is_annotation(finding.finding_type)]
    claims = [finding.to_dict() for finding in claimed]
    changes = {c["claim_id"]: f.what_if for c, f in zip(claims, claimed, strict=True) if f.what_if is not None}
    findings = merge_symptoms(link_causes(rank_by_cost(claims, step_wall_ms)))
    _say_what_the_missing_members_absorb(inputs.step_model, findings, changes)
    health = capture_health(steps, _comm_events(ctx))
    lower_confidence(findings, health)
    savings = _savings(inputs, claimed, claims, savings)
    for finding in findings:
        finding["recoverable_ms_by_rank"] = recoverable_by_rank(inputs.step_model, finding, savings)
    together = recoverable_together(inputs.step_model, findings, changes, step_wall_ms, lines)
    annotations = [finding.to_dict() for finding in found if is_annotation(finding.finding_type)]
    evidence_ids = set(ctx.read_table(schema.EVIDENCE_INDEX, columns=["evidence_id"]).column(0).to_pylist())
    alignment_ids = set(ctx.read_frame(schema.CROSS_RANK_ALIGNMENT)["alignment_id"].astype(str))
    check_evidence(findings + annotations, evidence_ids, alignment_ids)
    step_tags = inputs.step_tags
    path = conformed(schema.CRITICAL_PATH, critical_path(inputs.step_model))
    ledger = conformed(schema.STEP_LEDGER, step_ledger(lines, findings, savings, _alignment(ctx)))
    counts = {
        "finding_count": len(findings),
        "by_type": dict(Counter(f["finding_type"] for f in findings)),
        "by_severity": dict(Counter(f["severity"] for f in findings)),
        "annotation_count": len(annotations),
        "anomaly_tag_counts": dict(Counter(t for tags in step_tags["anomaly_tags"] for t in str(tags).split(";") if t)),
        "ledger_unexplained_share": {str(r): round(float(v), 4) for r, v in unexplained_share(ledger).items()},
        "recoverable_together_ms_per_step": together["ms_per_step"],
        "capture_health": dict(Counter(item["kind"] for item in health)),
    }
    document = _findings_document(findings, together, annotations, counts, inputs.not_judged)
    document["capture_health"] = health  # steps that are not what the findings assume (capture_health.py)
    return StageResult(
        tables={schema.STEP_LEDGER: ledger, schema.CRITICAL_PATH: path},
        json_files={schema.DIAGNOSIS_FINDINGS: document},
        csv_views={
            schema.STEP_ANOMALIES_CSV: conformed(schema.STEP_ANOMALIES, step_tags),
            schema.SLOW_RANK_DIFF_CSV: conformed(schema.SLOW_RANK_DIFF, _slow_rank_diff(inputs, findings)),
            schema.STEP_LEDGER_CSV: ledger,
            schema.CRITICAL_PATH_CSV: path,
        },
        manifest=counts,
    )


def _savings(inputs: DiagnosisContext, found: list, claims: list[dict], known: dict) -> dict[str, pd.DataFrame]:
    """Where each replayed finding saves its time (savings.replay_savings), by claim id: ``found`` the
    Finding objects and ``claims`` their dicts in the same order; ``known`` those already replayed."""
    savings = dict(known)
    for finding, claim in zip(found, claims, strict=True):
        change = finding.what_if
        if change is not None and claim["claim_id"] not in savings:
            lines = None if change.windows is None else window_lines(change.windows, inputs.blocks)
            savings[claim["claim_id"]] = replay_savings(inputs.step_model, change, lines)
    return savings


def _findings_document(findings: list, together: dict, annotations: list, counts: dict, not_judged: dict) -> dict:
    """diagnosis_findings.json: the findings, what fixing them together recovers, the annotations, the
    counts, the checks that lacked their data and the rules a re-asked analysis set."""
    document = {
        "schema_version": 1,
        "tool_version": __version__,
        "analysis_stage": "diagnostics",
        "created_at": io.utc_now(),
        "diagnosis_findings": findings,
        # every finding fixed at once, replayed together (not the sum: two findings may name the same ms)
        "recoverable_together": together,
        "evidence_annotations": annotations,  # qualify evidence, claim no cause (rules: annotations)
        "counts": counts,
    }
    if not_judged:  # checks that lacked their data: silence there is not a clean bill
        document["not_judged"] = [{"finding_type": t, "reason": r} for t, r in sorted(not_judged.items())]
    overridden = knowledge.overrides("diagnosis_rules")
    if overridden:  # a re-asked analysis (npuprof diagnose --set): the rules it was asked with
        document["rules_overridden"] = overridden
    return document


def _say_what_the_missing_members_absorb(model, findings: list[dict], changes: dict) -> None:
    """A replayed finding that saves nothing where the capture lacks members of its collectives' groups
    says why: its ranks would arrive sooner and wait longer for the members it does not hold."""
    pinned = model.pinned_us
    if pinned is None or not (pinned == pinned).any():  # NaN != NaN: no instance is pinned
        return
    for finding in findings:
        if finding["claim_id"] in changes and saves_nothing(finding):
            finding["limitations"].append(
                "fixing it alone saves nothing this capture can show: its ranks would reach their collectives "
                "sooner and wait longer for the group members the capture does not hold"
            )


def _comm_events(ctx: RootContext) -> pd.DataFrame:
    """Every rank's communication events, as capture health reads them (one-time collectives per step)."""
    if not (ctx.out_dir / schema.COMMUNICATION_EVENTS).exists():
        return pd.DataFrame(columns=list(COMM_READS))
    return int_ranks(ctx.read_table(schema.COMMUNICATION_EVENTS, columns=list(COMM_READS[1:])).to_pandas())


def _alignment(ctx: RootContext) -> pd.DataFrame:
    """Who waited for whom at each collective instance (cross_rank), for the ledger's blame."""
    path = ctx.out_dir / schema.COLLECTIVE_ALIGNMENT.path
    columns = ["alignment_id", "rank_id", "step_id", "kind", "parallel_role", "late_by_us"]
    return int_ranks(pd.read_parquet(path, columns=columns)) if path.exists() else pd.DataFrame(columns=columns)


def _ledger_sources(ctx: RootContext) -> tuple[pd.DataFrame, pd.DataFrame]:
    """What the step ledger (ledger.py) is made of: summarize's accounting, evidence's idle causes."""
    return int_ranks(ctx.read_frame(schema.STEP_TIME_ACCOUNTING)), int_ranks(ctx.read_frame(schema.IDLE_BY_CAUSE))


def _slow_rank_diff(inputs: DiagnosisContext, findings: list[dict]) -> pd.DataFrame:
    """slow_rank_diff.csv: each rank a slow-rank finding names, against its peers."""
    slow = sorted({int(r) for f in findings if f["finding_type"] == "slow_rank_suspected" for r in f["rank_ids"]})
    diffs = [slow_card_diff(inputs.card_profile, rank, peers_of(inputs.steps, rank)) for rank in slow]
    return pd.concat(diffs, ignore_index=True) if diffs else pd.DataFrame()


def headline(manifest: dict) -> tuple[dict, list[str]]:
    """diagnostics' part of the result JSON: finding counts by type and severity, anomaly tag counts."""
    return {k: manifest[k] for k in ("finding_count", "by_type", "by_severity", "anomaly_tag_counts")}, []
