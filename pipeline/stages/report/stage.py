"""report (per root): analysis_summary.json and report.md (fast mode), plus the Perfetto trace.json
(fast mode with ``--trace``), the Excel workbook and report.html in full mode; report/manifest.json
says what was written and the root's status.

A root ends ``degraded`` (never a plain ``ok``) when segmentation had hard errors or interior
islands, or a finding cites evidence that does not resolve; the required artifacts of the mode are
checked before the status is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from npuprof.pipeline import io, schema
from npuprof.pipeline.io import int_ranks
from npuprof.pipeline.sources.auxiliary import note_text
from npuprof.pipeline.stage_order import STAGE_NAMES
from npuprof.pipeline.stages.base import RootContext, StageResult
from npuprof.pipeline.stages.report.glossary import GLOSSARY
from npuprof.pipeline.stages.report.html import html_report, longest_windows
from npuprof.pipeline.stages.report.inputs import ReportInputs
from npuprof.pipeline.stages.report.markdown import report_markdown
from npuprof.pipeline.stages.report.perfetto import MAX_KERNELS_PER_RANK, NO_STREAMS, RankSpans, held_spans, trace_json
from npuprof.pipeline.stages.report.pp_chart import stage_passes
from npuprof.pipeline.stages.report.sheet_notes import TIMES, sheet_note
from npuprof.pipeline.stages.report.summary import analysis_summary

MANIFEST_STAGES = STAGE_NAMES[: STAGE_NAMES.index("report")]
TRACE_COLUMNS = ["stream_id", "name", "start_ns", "end_ns"]  # what trace.json draws of a kernel
BUBBLE_TRACE_COLUMNS = ["start_ns", "end_ns", "kind", "evidence_id"]
REQUIRED = {
    "fast": (schema.ANALYSIS_SUMMARY, schema.REPORT_MD),
    "full": (schema.ANALYSIS_SUMMARY, schema.REPORT_MD, schema.REPORT_TRACE, schema.REPORT_XLSX, schema.REPORT_HTML),
}


def _drawn_kernels(ctx: RootContext, rank_id: int, columns: list[str]) -> pd.DataFrame:
    """One rank's kernels as the trace and report.html draw them: by start, the first MAX_KERNELS_PER_RANK."""
    part = io.read_dataset(ctx.out_dir, schema.NORMALIZED_EVENTS, rank_id, columns=columns).to_pandas()
    return part.sort_values("start_ns", kind="stable").head(MAX_KERNELS_PER_RANK)


def _event_ranks(ctx: RootContext) -> list[int]:
    """The root's ranks with normalized events, in rank order."""
    events = schema.NORMALIZED_EVENTS
    return sorted(r.rank_id for r in ctx.inputs.ranks if (ctx.out_dir / events.partition(r.rank_id)).exists())


def _held_events(ctx: RootContext) -> pd.DataFrame:
    """Every rank's drawn kernels with every normalized field: report.html (full mode) draws them and
    its operator card shows the fields. Fast mode holds none (the trace reads them rank by rank)."""
    columns = list(schema.EVENT_COLUMNS)
    ranks = _event_ranks(ctx) if ctx.options.mode == "full" else []
    if not ranks:
        return pd.DataFrame(columns=["rank_id", *columns])
    drawn = [_drawn_kernels(ctx, r, columns).assign(rank_id=r)[["rank_id", *columns]] for r in ranks]
    return pd.concat(drawn, ignore_index=True)


def _trace_spans(ctx: RootContext, held: pd.DataFrame) -> RankSpans:
    """trace.json's kernels and idle windows, read rank by rank as it is written (full mode's kernels
    are held for report.html already). In fast mode a first pass over two numeric columns gives the
    streams and the earliest start that the trace's head needs."""
    bubbles = partial(ctx.rank_frames, schema.BUBBLE_WINDOWS, columns=BUBBLE_TRACE_COLUMNS)
    if ctx.options.mode == "full":
        return held_spans(held, bubbles)
    ranks = _event_ranks(ctx)
    streams, starts = [NO_STREAMS], []
    for rank_id in ranks:
        drawn = _drawn_kernels(ctx, rank_id, ["start_ns", "stream_id"])
        streams.append(drawn[["stream_id"]].drop_duplicates().assign(rank_id=rank_id)[["rank_id", "stream_id"]])
        starts += [int(drawn["start_ns"].min())] if len(drawn) else []
    return RankSpans(
        streams=pd.concat(streams, ignore_index=True),
        first_ns=min(starts) if starts else None,
        kernels=lambda: (_drawn_kernels(ctx, r, TRACE_COLUMNS).assign(rank_id=r) for r in ranks),
        bubbles=bubbles,
    )


def _longest_bubbles(ctx: RootContext) -> pd.DataFrame:
    """The idle windows report.html can draw, read rank by rank."""
    return int_ranks(longest_windows(ctx.rank_frames(schema.BUBBLE_WINDOWS)))


def _cited_evidence(ctx: RootContext, findings: list[dict]) -> tuple[pd.DataFrame, dict[str, int]]:
    """The evidence_index rows the findings cite, and the index's row count by kind: the index has a
    row per idle window (hundreds of thousands on a big root) and the report needs only these."""
    if not (ctx.out_dir / schema.EVIDENCE_INDEX.path).exists():
        return ctx.read_frame(schema.EVIDENCE_INDEX), {}
    cited = pa.array(sorted({e for f in findings for e in f["evidence_ids"]}), pa.string())
    rows = ctx.read_table(schema.EVIDENCE_INDEX, filter=pc.field("evidence_id").isin(cited)).to_pandas()
    kinds = ctx.read_table(schema.EVIDENCE_INDEX, columns=["kind"]).column("kind").to_pandas()
    return int_ranks(rows), kinds.value_counts().to_dict()


def cited_evidence_csv(evidence: pd.DataFrame, findings: list[dict]) -> Iterable[bytes]:
    """report/cited_evidence.csv: every evidence row a finding cites — rank, kind, step, source rows,
    time window, source file — and the findings that cite it (``cited_by``): in fast mode the
    evidence views list only each rank's longest idle windows, and every cited id resolves here."""
    citing: dict[str, list[str]] = {}
    for finding in findings:
        for evidence_id in finding["evidence_ids"]:
            citing.setdefault(evidence_id, []).append(str(finding.get("claim_id")))
    columns = ["rank_id", *(c for c in schema.EVIDENCE_INDEX.columns)]
    rows = evidence.reindex(columns=columns).sort_values(["rank_id", "evidence_id"], kind="stable")
    rows = rows.assign(cited_by=rows["evidence_id"].map(lambda e: ";".join(citing.get(e, []))))
    return io.csv_chunks(rows.reset_index(drop=True))


# the workbook's sheets, titled by their CSV: (view, row cap; None keeps a class table whole)
SHEETS = (
    (schema.RANK_SUMMARY_CSV, None),
    (schema.STEP_SUMMARY, 50_000),
    (schema.STEP_ANOMALIES_CSV, 50_000),
    (schema.STEP_ANATOMY_CSV, 50_000),
    (schema.STEP_CLASS_SUMMARY_CSV, None),
    (schema.STEP_TIME_ACCOUNTING_CSV, 50_000),
    (schema.STEP_TRACE_ACCOUNTING_CSV, None),
    (schema.HOST_API_SUMMARY_CSV, 50_000),
    (schema.LAYER_SUMMARY, 20_000),
    (schema.LAYER_CLASS_SUMMARY_CSV, None),
    (schema.BLOCK_SUMMARY, 5_000),
    (schema.BLOCK_CLASS_SUMMARY_CSV, None),
    (schema.OPERATOR_SUMMARY_CSV, 20_000),
    (schema.OPERATOR_CLASS_SUMMARY_CSV, None),
    (schema.OPERATOR_EFFICIENCY_SUMMARY_CSV, 20_000),
    (schema.STEP_EFFICIENCY_CSV, 50_000),
    *((view, None) for view in schema.MODEL_CSVS),
    *((view, None) for view in schema.MODEL_CONFIG_CSVS),
    (schema.HCCL_OP_SUMMARY_CSV, 50_000),
    (schema.HCCL_CLASS_SUMMARY_CSV, None),
    (schema.COMMUNICATION_SUMMARY_CSV, 50_000),
    (schema.COMMUNICATION_LINKS_CSV, 50_000),
    (schema.CROSS_RANK_ALIGNMENT_CSV, 50_000),
    (schema.EVIDENCE_INDEX_CSV, 50_000),
)


def _render_html(ctx: RootContext, inputs: ReportInputs, summary: dict, bubbles, offsets, rendered: dict) -> str:
    """Add report.html (and its assets) to ``rendered``; its status for the report manifest."""
    try:
        pages = html_report(inputs, summary, bubbles, offsets, ctx.options.html_single_file)
    except (ValueError, TypeError, KeyError, OSError) as error:  # the page must never cost the root its report
        return f"error: {' '.join(str(error).split())}"
    for name, data in pages.items():
        rendered[f"{schema.REPORT_DIR}/{name}"] = data
    return "ok (single file)" if ctx.options.html_single_file else "ok"


def _statistic_text(statistic: dict) -> str:
    return f"{statistic.get('name')} = {statistic.get('value')} (threshold {statistic.get('threshold')})"


def _workbook(ctx: RootContext, inputs: ReportInputs, summary: dict) -> bytes:
    """report.xlsx: README, a case summary, every user-facing table, the findings."""
    from npuprof.pipeline.stages.report.xlsx import relative_times, workbook  # openpyxl: full mode only

    case = pd.DataFrame(
        [
            ("status", summary["status"]),
            *[(k, v) for k, v in summary["identity"].items() if not isinstance(v, dict)],
            *[(f"kpi.{k}", v) for k, v in summary["kpis"].items() if not isinstance(v, (dict, list))],
        ],
        columns=["field", "value"],
    )
    # numbers stay numbers (a spreadsheet sums them); lists as text
    case["value"] = [", ".join(map(str, v)) if isinstance(v, list) else v for v in case["value"]]
    findings = pd.DataFrame(
        [
            {
                **{k: f[k] for k in ("claim_id", "finding_type", "severity", "confidence", "summary")},
                "rank_ids": ";".join(map(str, f["rank_ids"])),
                "evidence_ids": ";".join(f["evidence_ids"]),
                "statistic": _statistic_text(f["statistic"]),
            }
            for f in inputs.findings
        ],
        columns=[
            "claim_id",
            "finding_type",
            "severity",
            "confidence",
            "summary",
            "rank_ids",
            "evidence_ids",
            "statistic",
        ],
    )
    base_ns = int(inputs.steps["start_ns"].min()) if len(inputs.steps) else None
    tables = [("case_summary", case, None, None)]
    tables += [(Path(view.file).stem, ctx.read_view(view), cap, view.file) for view, cap in SHEETS]
    tables.append(("diagnosis_findings", findings, None, schema.DIAGNOSIS_FINDINGS))
    sheets = [
        (title, relative_times(frame, base_ns), cap, file, sheet_note(title)[1]) for title, frame, cap, file in tables
    ]
    readme = [("(times)", TIMES), *((f"(glossary) {term}", text) for term, text in GLOSSARY)] + [
        (title, sheet_note(title)[0] + (f" — {file}" if file else "") + (f", first {cap} rows" if cap else ""))
        for title, _, cap, file, _ in sheets
    ]
    return workbook(readme, sheets)


def _layers(ctx: RootContext) -> pd.DataFrame:
    """Layer spans with their class (for the timeline and the step inspector)."""
    keys = ["rank_id", "step_ordinal", "layer_ordinal"]
    spans = int_ranks(ctx.read_frame(schema.LAYER_SEGMENTS))
    classes = int_ranks(ctx.read_frame(schema.LAYER_CLASSES))
    if spans.empty or classes.empty:
        return spans
    return spans.merge(classes[[*keys, "layer_class_id"]], on=keys, how="left")


def _steps(ctx: RootContext, frames: dict) -> pd.DataFrame:
    """step_summary with diagnostics' anomaly tags and their wording."""
    steps = int_ranks(schema.join_view(schema.STEP_SUMMARY, [frames[t] for t in schema.STEP_SUMMARY.tables]))
    tags = int_ranks(ctx.read_view(schema.STEP_ANOMALIES_CSV))
    if steps.empty or tags.empty:  # diagnostics did not run: no tags to show
        return steps.assign(anomaly_tags=None, anomaly_text=None)
    keys = ["rank_id", "step_ordinal"]
    return steps.merge(tags[[*keys, "anomaly_tags", "anomaly_text"]], on=keys, how="left")


def _inputs(ctx: RootContext) -> ReportInputs:
    manifests = {s: io.read_json_or_empty(ctx.out_dir / schema.stage_manifest_name(s)) for s in MANIFEST_STAGES}
    frames = {t: ctx.read_frame(t) for t in schema.STEP_SUMMARY.tables}
    diagnosis = io.read_json_or_empty(ctx.out_dir / schema.DIAGNOSIS_FINDINGS)
    findings = diagnosis.get("diagnosis_findings", [])
    evidence, evidence_kinds = _cited_evidence(ctx, findings)
    layers, pp_schedule = _layers(ctx), ctx.read_view(schema.PP_SCHEDULE_CSV)
    return ReportInputs(
        out_dir=str(ctx.out_dir),
        mode=ctx.options.mode,
        manifests=manifests,
        findings=findings,
        steps=_steps(ctx, frames),
        anatomy=int_ranks(ctx.read_frame(schema.STEP_ANATOMY)),
        accounting=int_ranks(ctx.read_frame(schema.STEP_TIME_ACCOUNTING)),
        ranks=ctx.read_view(schema.RANK_SUMMARY_CSV),
        step_classes=ctx.read_view(schema.STEP_CLASS_SUMMARY_CSV),
        layer_classes=ctx.read_view(schema.LAYER_CLASS_SUMMARY_CSV),
        block_classes=ctx.read_view(schema.BLOCK_CLASS_SUMMARY_CSV),
        operator_classes=ctx.read_view(schema.OPERATOR_CLASS_SUMMARY_CSV),
        hccl_classes=ctx.read_view(schema.HCCL_CLASS_SUMMARY_CSV),
        evidence=evidence,
        evidence_kinds=evidence_kinds,
        layers=layers,
        events=_held_events(ctx),
        model_insights=io.read_json_or_empty(ctx.out_dir / schema.MODEL_INSIGHTS),
        hardware=io.read_json_or_empty(ctx.out_dir / schema.HARDWARE_INSIGHTS),
        inferred_config=ctx.read_view(schema.MODEL_INFERRED_CONFIG_CSV),
        candidates=ctx.read_view(schema.MODEL_CANDIDATE_SUMMARY_CSV),
        peaks=ctx.read_view(schema.HARDWARE_THEORETICAL_PEAKS_CSV),
        efficiency=ctx.read_view(schema.OPERATOR_EFFICIENCY_SUMMARY_CSV),
        annotations=diagnosis.get("evidence_annotations", []),
        together=diagnosis.get("recoverable_together") or {},
        rules_overridden=diagnosis.get("rules_overridden") or {},
        not_judged=diagnosis.get("not_judged") or [],
        capture_health=diagnosis.get("capture_health") or [],
        step_trace=ctx.read_view(schema.STEP_TRACE_ACCOUNTING_CSV),
        pp_schedule=pp_schedule,
        pp_passes=stage_passes(layers, pp_schedule),  # the chart and the trace draw the same passes
        idle_causes=int_ranks(ctx.read_frame(schema.IDLE_BY_CAUSE)),
        ledger=int_ranks(ctx.read_frame(schema.STEP_LEDGER)),
    )


def _status(inputs: ReportInputs) -> tuple[str, list[str]]:
    """ok, or degraded with the reasons."""
    segment = inputs.manifest("segment")
    reasons = []
    if segment.get("hard_error_count"):
        reasons.append(f"segmentation has {segment['hard_error_count']} hard errors")
    if segment.get("interior_island_total"):
        reasons.append(f"segmentation left {segment['interior_island_total']} interior islands")
    for stage in STAGE_NAMES:  # a file of the capture that could not be read, and what was done instead
        reasons += [note_text(note) for note in inputs.manifest(stage).get("unreadable_inputs", [])]
    cited = {e for f in inputs.findings for e in f["evidence_ids"]}
    # look the few cited ids up in the index, not the index's hundreds of thousands of ids in a set
    known = (
        set(inputs.evidence["evidence_id"][inputs.evidence["evidence_id"].isin(cited)])
        if len(inputs.evidence)
        else set()
    )
    unresolved = sorted(cited - known)
    if unresolved:
        reasons.append(f"{len(unresolved)} cited evidence ids do not resolve (first: {unresolved[0]})")
    return ("degraded" if reasons else "ok"), reasons


def reduce_root(ctx: RootContext) -> StageResult:
    """Render the report artifacts of the mode, check they are all there, give the status."""
    inputs = _inputs(ctx)
    status, reasons = _status(inputs)
    # the Perfetto trace is as large as the kernels it draws: full mode, or fast mode when asked
    traced = inputs.mode == "full" or ctx.options.trace
    artifacts = {
        "report_md": schema.REPORT_MD,
        "analysis_summary": schema.ANALYSIS_SUMMARY,
        "cited_evidence": schema.REPORT_CITED_EVIDENCE,
        **({"trace": schema.REPORT_TRACE} if traced else {}),
        "diagnosis_findings": schema.DIAGNOSIS_FINDINGS,
    }
    summary = analysis_summary(inputs, status, artifacts)
    offsets = inputs.manifest("cross_rank").get("clock_offsets_us") or {}
    rendered: dict[str, bytes | str | Iterable[bytes]] = {
        schema.REPORT_CITED_EVIDENCE: cited_evidence_csv(inputs.evidence, inputs.findings)
    }
    if traced:
        spans = _trace_spans(ctx, inputs.events)
        steps, layers, passes = inputs.steps, inputs.layers, inputs.pp_passes
        trace = trace_json(spans, steps, layers, inputs.findings, inputs.evidence, offsets, passes)
        rendered[schema.REPORT_TRACE] = trace
    statuses = {"xlsx": "skipped (fast mode)", "html": "skipped (fast mode)"}
    if inputs.mode == "full":
        bubbles = _longest_bubbles(ctx)
        statuses["html"] = _render_html(ctx, inputs, summary, bubbles, offsets, rendered)
        artifacts["report_html"] = schema.REPORT_HTML
        try:
            rendered[schema.REPORT_XLSX] = _workbook(ctx, inputs, summary)
            artifacts["report_xlsx"] = schema.REPORT_XLSX
            statuses["xlsx"] = "ok"
        except (ValueError, TypeError, OSError) as error:  # the workbook must never cost the root its report
            statuses["xlsx"] = f"error: {' '.join(str(error).split())}"
    required = (*REQUIRED[inputs.mode], *((schema.REPORT_TRACE,) if traced else ()))
    missing = [n for n in required if n not in rendered and n not in (schema.REPORT_MD, schema.ANALYSIS_SUMMARY)]
    if missing:
        status, reasons = "degraded", [*reasons, f"required artifacts missing: {missing}"]
    summary.update(status=status, limitations=reasons + [t for t in summary["limitations"] if t not in reasons])
    rendered[schema.ANALYSIS_SUMMARY] = io.json_text(summary, indent=1)
    rendered[schema.REPORT_MD] = report_markdown(inputs, summary)
    manifest = {
        "status": status,
        "status_reasons": reasons,
        "report_mode": inputs.mode,
        "files": sorted(rendered),
        **{f"{kind}_status": value for kind, value in statuses.items()},
        "finding_count": len(inputs.findings),
        "claim_ids": [f["claim_id"] for f in inputs.findings],
    }
    rendered[schema.REPORT_MANIFEST] = io.json_text(manifest, indent=1)
    return StageResult(rendered=rendered, manifest=manifest)


def headline(manifest: dict) -> tuple[dict, list[str]]:
    """report's part of the result JSON: the status and where the report is."""
    warnings = [f"degraded: {reason}" for reason in manifest.get("status_reasons", [])]
    files = [f for f in manifest["files"] if "/assets/" not in f]
    return {"status": manifest["status"], "files": files, "html_status": manifest.get("html_status")}, warnings
