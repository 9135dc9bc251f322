"""analysis_summary.json: the conclusions of one root in a small, agent-first JSON document.

Everything is re-derived from the artifacts of earlier stages; a number whose input is missing is
an explicit null with a limitation saying why. Findings are rolled up by type, severity and summary,
each group with its affected ranks, an evidence sample that resolves to rows and windows, and the
knowledge notes that explain it.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from npuprof.pipeline import __version__, io
from npuprof.pipeline.stages.report.headline import headline_costs
from npuprof.pipeline.stages.report.inputs import ReportInputs
from npuprof.pipeline.stages.report.notes import knowledge_refs, remedy
from npuprof.pipeline.summaries.operators import by_kernel_total

MAX_FINDING_GROUPS = 50
MAX_ANNOTATIONS = 20
MAX_BYTES = 50_000
CONFIDENCE_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}
SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}


def _number(value: object, digits: int = 3) -> float | None:
    if value is None or (isinstance(value, float) and not np.isfinite(value)) or pd.isna(value):
        return None
    return round(float(value), digits)


def _quantiles(values: pd.Series) -> dict:
    values = values.dropna()
    if values.empty:
        return {"count": 0, "mean": None, "p50": None, "p90": None}
    return {
        "count": int(len(values)),
        "mean": _number(values.mean()),
        "p50": _number(values.quantile(0.5)),
        "p90": _number(values.quantile(0.9)),
    }


def identity(inputs: ReportInputs) -> dict:
    """Root, ranks, events, capture span and source kind."""
    normalize = inputs.manifest("normalize")
    ranks = normalize.get("rank_summaries", [])
    # each rank's main stretch (normalize's body span): a far-off corrupt row does not stretch the capture
    starts = [r.get("body_start_ns", r["start_ns"]) for r in ranks if r.get("start_ns") is not None]
    ends = [r.get("body_end_ns", r["end_ns"]) for r in ranks if r.get("end_ns") is not None]
    kinds = {r.get("source_kind") for r in ranks if r.get("source_kind")}
    segment = inputs.manifest("segment")
    return {
        "profile_root": normalize.get("profile_root"),
        "rank_count": normalize.get("rank_count"),
        "ranks_with_events": normalize.get("ranks_with_events"),
        "event_count": normalize.get("event_count"),
        "capture": {
            "start_us": _number(min(starts) / 1000.0) if starts else None,
            "end_us": _number(max(ends) / 1000.0) if ends else None,
            "wall_ms": _number((max(ends) - min(starts)) / 1e6) if starts and ends else None,
        },
        "source": (kinds.pop() if len(kinds) == 1 else "mixed") if kinds else None,
        "model": {
            "model_id": inputs.model_insights.get("model_id"),
            "config_path": ((inputs.model_insights.get("config") or {}).get("path")),
            "candidate_names": (
                inputs.candidates[inputs.candidates["status"] != "ruled_out"]["model"].head(3).tolist()
                if len(inputs.candidates)
                else []
            ),
            "expected_layers": segment.get("expected_layers"),
            "expected_layers_source": segment.get("expected_layers_source"),
        },
    }


def layer_validation(inputs: ReportInputs) -> dict:
    """Expected vs detected decoder layers, per-rank outliers, and a status."""
    segment = inputs.manifest("segment")
    validation = segment.get("layer_validation") or {}
    observed = validation.get("observed_layers_per_rank") or {}
    counts = pd.Series({int(k): v for k, v in observed.items()}, dtype="float64")
    usual = counts.mode().iloc[0] if len(counts) else None
    outliers = [int(r) for r, v in counts.items() if usual is not None and v != usual][:8]
    status = validation.get("status", "unknown")
    if segment.get("hard_error_count") or segment.get("interior_island_total") or outliers:
        status = "degraded"
    return {
        "status": status,
        "expected_layers": validation.get("expected_layers"),
        "expected_source": validation.get("expected_source", "unknown"),
        "detected_layers": {
            "min": _number(counts.min(), 0) if len(counts) else None,
            "max": _number(counts.max(), 0) if len(counts) else None,
            "per_rank_outliers": outliers,
        },
        "per_rank_consistent": validation.get("per_rank_consistent"),
        "hard_error_count": segment.get("hard_error_count"),
        "interior_island_total": segment.get("interior_island_total"),
    }


def _anatomy_means(anatomy: pd.DataFrame) -> dict:
    if anatomy.empty:
        return {}
    per_step = anatomy.pivot_table(index=["rank_id", "step_ordinal"], columns="window", values="wall_ms", aggfunc="sum")
    return {str(window): _number(per_step[window].mean()) for window in per_step.columns}


def _primary_split(accounting: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    primary = accounting[accounting["breakdown"] == "primary"] if len(accounting) else accounting
    if primary.empty:
        return pd.Series(dtype=float), pd.Series(dtype=float)
    by_category = primary.groupby("category")["ms"].sum()
    compute = primary[primary["category"] == "compute"].groupby("component")["ms"].sum()
    return by_category, compute


def _idle_by_cause(idle_causes: pd.DataFrame, wall_ms: float) -> dict[str, float]:
    """Each idle cause's share of the wall of every step (the idle_by_cause rows; the causes of a
    rank with a host trace add up to its idle share), largest first; empty without host traces."""
    if idle_causes.empty or not wall_ms:
        return {}
    by_cause = idle_causes.groupby("component")["ms"].sum().sort_values(ascending=False)
    return {str(cause): _number(ms / wall_ms, 4) for cause, ms in by_cause.items()}


def warmup_left_out(inputs: ReportInputs) -> tuple[list[int], list[str]]:
    """The step ordinals (and their step ids) the KPIs leave out: the warm-up steps capture health names,
    while a complete step outside them remains (a capture of one warm-up step keeps it, named)."""
    warm = sorted({int(item["step_ordinal"]) for item in inputs.capture_health if item["kind"] == "warmup_step"})
    steps = inputs.steps
    if not warm or not len(steps):
        return [], []
    steady = steps["complete"].astype(bool) & ~steps["step_ordinal"].isin(warm)
    if not steady.any():
        return [], []
    named = [item["step"] for item in inputs.capture_health if item["kind"] == "warmup_step"]
    return warm, named


def _steady(frame: pd.DataFrame, left_out: list[int]) -> pd.DataFrame:
    """``frame``'s rows of the steps the KPIs keep (all where none is left out)."""
    if not left_out or not len(frame) or "step_ordinal" not in frame.columns:
        return frame
    return frame[~frame["step_ordinal"].isin(left_out)]


def kpis(inputs: ReportInputs) -> dict:
    """Step wall quantiles, anatomy means, shares of wall, bound-family time, top classes and kinds — over
    the steady steps: a warm-up step's one-time cost (warmup_left_out) is not the workload's."""
    left_out, left_out_ids = warmup_left_out(inputs)
    steps = _steady(inputs.steps, left_out)
    complete = steps[steps["complete"].astype(bool)] if len(steps) else steps
    by_category, compute = _primary_split(_steady(inputs.accounting, left_out))
    wall = float(by_category.sum()) if len(by_category) else 0.0
    operators = inputs.operator_classes
    compute_ops = (
        by_kernel_total(operators[~operators["op_type"].isin(["communication", "mix_comm_aiv"])])
        if len(operators)
        else operators
    )
    hccl = inputs.hccl_classes
    top_hccl = hccl.groupby("kind")["duration_sum_us"].sum().sort_values(ascending=False).head(5) if len(hccl) else {}
    return {
        "step_wall_ms": _quantiles(complete["wall_ms"]) if len(complete) else _quantiles(pd.Series(dtype=float)),
        "warmup_steps_left_out": left_out_ids,
        "step_anatomy_ms_mean": _anatomy_means(_steady(inputs.anatomy, left_out)),
        "bubble_share_of_wall": _number(by_category.get("idle", 0.0) / wall, 4) if wall else None,
        "idle_share_by_cause": _idle_by_cause(_steady(inputs.idle_causes, left_out), wall),
        "comm_share_of_wall": _number(by_category.get("communication", 0.0) / wall, 4) if wall else None,
        "compute_share_of_wall": _number(by_category.get("compute", 0.0) / wall, 4) if wall else None,
        "bound_family_wall_ms": {str(k): _number(v) for k, v in compute.sort_values(ascending=False).items()},
        "top_step_classes": [
            {"step_class_id": r.step_class_id, "members": int(r.member_count), "wall_ms_mean": _number(r.wall_ms_mean)}
            for r in inputs.step_classes.sort_values("wall_ms_sum", ascending=False).head(5).itertuples()
        ]
        if len(inputs.step_classes)
        else [],
        "top_operator_classes": [
            {
                "name": r.name,
                "op_type": r.op_type,
                "bound_family": r.bound_family,
                "duration_ms": _number(r.duration_sum_us / 1000.0),
                "calls": int(r.call_count),
                "all_cores_duration_ms": _number(r.all_cores_duration_sum_us / 1000.0),
                "core_split": None if pd.isna(r.core_split) else r.core_split,
            }
            for r in compute_ops.head(10).itertuples()
        ],
        "top_hccl_kinds": [{"kind": str(k), "duration_ms": _number(v / 1000.0)} for k, v in dict(top_hccl).items()],
    }


def _evidence_sample(finding_ids: list[str], evidence: pd.DataFrame) -> list[dict]:
    if evidence.empty or not finding_ids:
        return []
    rows = evidence[evidence["evidence_id"].isin(finding_ids[:4])]
    return [
        {
            "evidence_id": r.evidence_id,
            "rank_id": int(r.rank_id),
            "kind": r.kind,
            "rows": [int(r.row_start), int(r.row_end)],
            "window_us": [_number(r.start_us), _number(r.end_us)],
            "source_path": r.source_path,
        }
        for r in rows.itertuples()
    ]


def finding_groups(inputs: ReportInputs) -> tuple[list[dict], int]:
    """Findings rolled up by (type, severity, summary), the most recoverable time first; (groups, overflow)."""
    groups: dict[tuple, dict] = {}
    for finding in inputs.findings:
        key = (finding["finding_type"], finding["severity"], finding["summary"])
        group = groups.setdefault(key, {"findings": [], "key": key})
        group["findings"].append(finding)
    for group in groups.values():
        saved = [
            f["recoverable_ms_per_step"] for f in group["findings"] if f.get("recoverable_ms_per_step") is not None
        ]
        group["saved"] = max(saved) if saved else None
    # the most recoverable time first; then the most severe
    ordered = sorted(
        groups.values(),
        key=lambda g: (g["saved"] is None, -(g["saved"] or 0.0), SEVERITY_ORDER.get(g["key"][1], 9), *g["key"][::2]),
    )
    rolled = []
    for group in ordered[:MAX_FINDING_GROUPS]:  # a loop over finding groups (≤ 50)
        members = group["findings"]
        finding_type, severity, summary = group["key"]
        evidence = [e for f in members for e in f["evidence_ids"]]
        rolled.append(
            {
                "finding_type": finding_type,
                "severity": severity,
                "summary": summary,
                "recoverable_ms_per_step": group["saved"],
                # a cause whose fix lies outside the capture: the ms it causes, not a saving
                **_caused(members),
                "recoverable_share_of_step": max(
                    (f["recoverable_share_of_step"] for f in members if f.get("recoverable_share_of_step") is not None),
                    default=None,
                ),
                "occurrences": len(members),
                "confidence": min((f["confidence"] for f in members), key=lambda c: CONFIDENCE_ORDER.get(c, 9)),
                "affected": {"rank_ids": sorted({r for f in members for r in f["rank_ids"]})[:8]},
                "claim_ids": [f["claim_id"] for f in members][:4],
                "statistic": members[0]["statistic"],
                "evidence_sample": _evidence_sample(evidence, inputs.evidence),
                "limitations": list(dict.fromkeys(lim for f in members for lim in f["limitations"]))[:3],
                "knowledge_refs": knowledge_refs(finding_type, summary),
                "remedy": remedy(finding_type),  # what to try, from the note written for the type
                # the same cost as another type told it, merged into this finding (one cause, one finding)
                "merged": [
                    {"finding_type": m["finding_type"], "summary": m["summary"]}
                    for f in members
                    for m in f.get("merged", [])
                ][:4],
            }
        )
    return rolled, max(len(ordered) - MAX_FINDING_GROUPS, 0)


def _caused(members: list[dict]) -> dict:
    caused = [f["caused_ms_per_step"] for f in members if f.get("caused_ms_per_step") is not None]
    return {"caused_ms_per_step": max(caused)} if caused else {}


def closest_candidate(candidates: pd.DataFrame, insights: dict) -> pd.Series | None:
    """The catalog model nearest the capture, or None where no candidate matched a width or count (a model
    "closest" on features alone — no MLA, no QK-norm — while 5 of its 126 layers ran is no evidence)."""
    if not len(candidates):
        return None
    features = {*insights.get("features", {}), "kind"}
    first = candidates.iloc[0]
    matched = {f for f in str(first.get("matched_fields") or "").split(";") if f}
    return first if matched - features else None


def model_brief(inputs: ReportInputs) -> dict | None:
    """The fingerprint in brief: each visible field with its confidence, features, the closest model."""
    insights = inputs.model_insights
    if not insights:
        return None
    fields = {
        k: {"value": v["value"], "confidence": v["confidence"]}
        for k, v in insights.get("fingerprint", {}).items()
        if v.get("value") is not None
    }
    closest = closest_candidate(inputs.candidates, insights)
    return {
        "fields": fields,
        "features": sorted(k for k, v in insights.get("features", {}).items() if v.get("present")),
        "best_candidate": insights.get("best_candidate"),
        "closest_candidate": None
        if closest is None
        else {
            "model": closest["model"],
            "mismatched_fields": None if pd.isna(closest["mismatched_fields"]) else closest["mismatched_fields"],
        },
        "limitations": insights.get("limitations", [])[:3],
    }


def hardware_brief(inputs: ReportInputs) -> dict | None:
    """Which NPU, how it was chosen, its bf16 peak and the MFU over steps (null when unresolved)."""
    hardware = inputs.hardware
    if not hardware:
        return None
    return {
        "name": hardware.get("name"),
        "chosen_by": hardware.get("chosen_by"),
        "capture_devices": hardware.get("capture_devices"),
        "cube_tflops": hardware.get("cube_tflops"),
        "hbm_gbps": hardware.get("hbm_gbps"),
        "mfu": hardware.get("mfu"),
        "limitations": hardware.get("limitations", [])[:3],
    }


def limitations(inputs: ReportInputs) -> list[str]:
    """What the data could not say, from every stage that ran (and the stages that did not)."""
    found = []
    for stage in ("summarize", "evidence", "model", "cross_rank"):
        found += inputs.manifest(stage).get("limitations", [])
    found += inputs.manifest("normalize").get("notes", [])[:10]
    if not inputs.manifest("diagnostics"):
        found.append("diagnostics did not run: no findings")
    return list(dict.fromkeys(found))


def _finding_counts(inputs: ReportInputs, groups: int, overflow: int) -> dict:
    """How many findings, by type and severity, and how many roll-up groups the summary holds."""
    return {
        "total": len(inputs.findings),
        "by_type": dict(sorted(Counter(f["finding_type"] for f in inputs.findings).items())),
        "by_severity": dict(sorted(Counter(f["severity"] for f in inputs.findings).items())),
        "rollup_groups": groups,
        "rollup_overflow": overflow,
    }


def analysis_summary(inputs: ReportInputs, status: str, artifacts: dict[str, str]) -> dict:
    """The whole document (≤ 50 KB: finding groups are trimmed until it fits)."""
    groups, overflow = finding_groups(inputs)
    document = {
        "schema_version": 1,
        "tool": "npuprof",
        "tool_version": __version__,
        "generated_at": io.utc_now(),
        "status": status,
        # the step's biggest costs, in words, before anything else (findings or not)
        "headline": headline_costs(
            inputs.accounting,
            [r["rank_id"] for r in inputs.manifest("normalize").get("rank_summaries", [])],
            inputs.step_trace,
        ),
        "identity": identity(inputs),
        "layer_validation": layer_validation(inputs),
        "kpis": kpis(inputs),
        # an inference capture's forwards by phase (segment's serving view)
        **({"serving": inputs.manifest("segment")["serving"]} if inputs.manifest("segment").get("serving") else {}),
        "clock": {
            "offsets_us": inputs.manifest("cross_rank").get("clock_offsets_us"),
            "match_rate": inputs.manifest("cross_rank").get("match_rate"),
        },
        "findings": groups,
        "finding_counts": _finding_counts(inputs, len(groups), overflow),
        # every finding fixed at once, replayed together: two findings about the same time count it once
        "recoverable_together": {
            key: inputs.together.get(key) for key in ("ms_per_step", "share_of_step", "sum_ms_per_step")
        }
        if inputs.together
        else None,
        # a re-asked analysis's rules (npuprof diagnose --set): the findings hold under these, not the file's
        **({"rules_overridden": inputs.rules_overridden} if inputs.rules_overridden else {}),
        # checks that lacked their data (a capture without core counts ...): silence there is no clean bill
        **({"not_judged": inputs.not_judged} if inputs.not_judged else {}),
        # steps that are not what the findings assume: an idle capture, a warm-up step (never silent)
        "capture_health": [
            {k: item[k] for k in ("kind", "rank_ids", "step", "text")} for item in inputs.capture_health
        ],
        # qualifiers of evidence, not claims: e.g. an op that looks hot only because a stream waits in it
        "annotations": [
            {k: a[k] for k in ("finding_type", "summary", "rank_ids", "evidence_ids")}
            for a in inputs.annotations[:MAX_ANNOTATIONS]
        ],
        "annotation_count": len(inputs.annotations),
        "model_brief": model_brief(inputs),
        "hardware_brief": hardware_brief(inputs),
        "artifacts": artifacts,
        "report_mode": inputs.mode,
        "stage_timings": {s: inputs.manifest(s).get("seconds") for s in inputs.manifests if s != "top"},
        "limitations": limitations(inputs),
    }
    while len(io.json_text(document)) > MAX_BYTES and document["findings"]:
        document["findings"].pop()
        document["finding_counts"]["rollup_overflow"] += 1
    return document
