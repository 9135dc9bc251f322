"""What each sheet of report.xlsx holds, in a sentence, and why it can be empty: the workbook's README
sheet and the line an empty sheet shows. Keyed by the sheet's title (its CSV's name)."""

from __future__ import annotations

from pathlib import Path

from npuprof.pipeline import schema


def _stem(view: schema.CsvView) -> str:
    return Path(view.file).stem


TIMES = "Times: µs from the capture start (columns *_us_from_start); durations in the unit their name says."

SHEET_NOTES: dict[str, tuple[str, str]] = {
    "case_summary": ("status, identity and the headline KPIs of the root", "never empty"),
    _stem(schema.RANK_SUMMARY_CSV): (
        "one row per rank: step walls over complete steps, busy time, the compute / exposed communication / "
        "idle shares, where its accounting came from (kernels or step_trace_time.csv)",
        "no rank has steps",
    ),
    _stem(schema.STEP_SUMMARY): (
        "one row per step of each rank: wall, head / main / tail, idle, layers, class",
        "no steps found",
    ),
    _stem(schema.STEP_ANOMALIES_CSV): (
        "one row per step of each rank: its anomaly tags (idle-heavy, a large internal gap, gaps before or after "
        "it, a partial capture) and what each means, from the thresholds of diagnosis_rules.yaml",
        "no steps found, or diagnostics did not run",
    ),
    _stem(schema.STEP_ANATOMY_CSV): (
        "each step cut into head, main (the layers) and tail, with the idle of each",
        "no steps found",
    ),
    _stem(schema.STEP_CLASS_SUMMARY_CSV): (
        "steps grouped by structure, with wall statistics per class",
        "no steps found",
    ),
    _stem(schema.STEP_TIME_ACCOUNTING_CSV): (
        "every step's wall split into compute (by bound family), exposed communication (by parallel role and "
        "kind), overlap and idle; the primary rows add up to the wall; the idle_by_cause rows split the idle "
        "time by what the host was doing (sync, dataloader, gc, allocation, launch, queued, unattributed)",
        "no rank has device events in steps",
    ),
    _stem(schema.HOST_API_SUMMARY_CSV): (
        "CANN and framework (aten) API calls per rank, step and API: count, total, p50 and p99 of their "
        "durations, from trace_view.json (like msprof-analyze's cann_api_sum)",
        "no rank has a readable trace_view.json with steps (or --no-host-trace)",
    ),
    _stem(schema.STEP_TRACE_ACCOUNTING_CSV): (
        "the profiler's own step split (step_trace_time.csv) of ranks whose kernels the capture does not hold",
        "every rank has device events: their accounting is read from the kernels",
    ),
    _stem(schema.LAYER_SUMMARY): (
        "one row per decoder-layer instance: rank, step, pass, role, wall, class",
        "no layers found",
    ),
    _stem(schema.LAYER_CLASS_SUMMARY_CSV): (
        "layers grouped by structure: wall statistics, share of each block kind",
        "no layers",
    ),
    _stem(schema.BLOCK_SUMMARY): (
        "attention / FFN / MoE blocks of each layer with their wall and bound",
        "no layers found",
    ),
    _stem(schema.BLOCK_CLASS_SUMMARY_CSV): (
        "blocks grouped by structure: wall, communication share, top kernels",
        "no layers",
    ),
    _stem(schema.OPERATOR_SUMMARY_CSV): (
        "per rank, every distinct kernel: calls, time, wait, evidence rows, what bounds it",
        "none",
    ),
    _stem(schema.OPERATOR_CLASS_SUMMARY_CSV): (
        "kernels merged over ranks (HCCL calls by call family), the spread over ranks, the total over core types",
        "the capture has no kernels",
    ),
    _stem(schema.OPERATOR_EFFICIENCY_SUMMARY_CSV): (
        "kernels with FLOPs from shapes: achieved TFLOP/s, roofline bound",
        "no shapes",
    ),
    _stem(schema.STEP_EFFICIENCY_CSV): ("per step: FLOPs, MFU where the hardware is known", "no shapes or no steps"),
    _stem(schema.MODEL_INFERRED_CONFIG_CSV): (
        "config fields read from kernel shapes, each with its evidence",
        "no shape data",
    ),
    _stem(schema.MODEL_FEATURE_SUMMARY_CSV): (
        "model features (MoE, MLA, GQA, RoPE, QK-norm, …) with their evidence",
        "no shapes",
    ),
    _stem(schema.MODEL_LAYER_TYPE_SUMMARY_CSV): ("layer classes named by the kernels they run", "no layers found"),
    _stem(schema.MODEL_CANDIDATE_SUMMARY_CSV): (
        "catalog models ranked by agreement with the inferred fields",
        "not read as a transformer (no attention kernel and no decoder layer): no model is named",
    ),
    _stem(schema.HARDWARE_SUMMARY_CSV): ("the NPU chosen and why, its clock and core counts", "hardware unknown"),
    _stem(schema.HARDWARE_THEORETICAL_PEAKS_CSV): (
        "peak TFLOP/s per data type and HBM bandwidth, each with its source",
        "unknown",
    ),
    _stem(schema.MODEL_CONFIG_OVERVIEW_CSV): (
        "config.json beside the inferred fields (--model-config)",
        "no --model-config given",
    ),
    _stem(schema.MODEL_PARAMETER_ESTIMATE_CSV): (
        "parameters from config.json (--model-config)",
        "no --model-config given",
    ),
    _stem(schema.MODEL_KV_CACHE_ESTIMATE_CSV): (
        "KV-cache bytes per token from config.json (--model-config)",
        "no --model-config",
    ),
    _stem(schema.HCCL_OP_SUMMARY_CSV): (
        "communication per kind, fusion, parallel role and rank: calls and durations",
        "no HCCL ops",
    ),
    _stem(schema.HCCL_CLASS_SUMMARY_CSV): (
        "communication per kind and role over ranks, with the rank skew",
        "no HCCL ops",
    ),
    _stem(schema.COMMUNICATION_SUMMARY_CSV): (
        "each collective / P2P op per rank from communication.json: transit, wait",
        "none",
    ),
    _stem(schema.COMMUNICATION_LINKS_CSV): (
        "each link's bytes, time and bandwidth (communication_matrix.json)",
        "no matrix file",
    ),
    _stem(schema.CROSS_RANK_ALIGNMENT_CSV): (
        "each collective instance matched over its members: arrival, wait",
        "one rank only",
    ),
    _stem(schema.EVIDENCE_INDEX_CSV): (
        "every evidence id findings cite: rank, kind, source rows, time window, file",
        "none",
    ),
    "diagnosis_findings": ("the findings: type, severity, summary, ranks, evidence ids, statistic", "no findings"),
}


def sheet_note(title: str) -> tuple[str, str]:
    """(what the sheet holds, why it may be empty)."""
    return SHEET_NOTES.get(title, (title, "no rows in this capture"))
