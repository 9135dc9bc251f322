"""The rows one analyzed root adds to a sweep's tables: its ranks (with the machine and card each
ran on), its step / layer / block classes, its top operators, its collectives, its time split, its
links and its findings — read from the root's own summary files, in ms per step so roots of different lengths
compare.

They are cached beside the root's rollup row (``rollup.root_rollup``) so that merging a sweep of
finished roots reads one small file per root.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from npuprof import knowledge
from npuprof.pipeline import csv_formulas, io, schema
from npuprof.pipeline.summaries.communication import captured_group_ranks
from npuprof.pipeline.summaries.links import LINK_INPUT_COLUMNS, link_bandwidths

# sweep table -> the columns kept from the root's summary CSV
CLASS_COLUMNS = {
    "step_class_stats": (
        schema.STEP_CLASS_SUMMARY_CSV,
        ["step_class_id", "complete", "member_count", "wall_ms_mean", "wall_ms_p50", "busy_ms_mean", "bubble_ms_mean"],
    ),
    "layer_class_stats": (
        schema.LAYER_CLASS_SUMMARY_CSV,
        ["layer_class_id", "layer_role", "block_kinds", "member_count", "wall_ms_mean", "wall_ms_p50", "busy_ms_mean"],
    ),
    "block_class_stats": (
        schema.BLOCK_CLASS_SUMMARY_CSV,
        ["block_class_id", "block_kind", "layer_role", "member_count", "wall_ms_mean", "comm_ms_mean", "bound_family"],
    ),
}
# time split breakdowns kept: what a step's time went to, and exposed communication by role and kind
TIME_SPLIT_BREAKDOWNS = ("primary", "comm_by_role_kind", "idle_by_cause")
# every sweep table's columns (besides the root's slug): a sweep whose roots all failed still has them
TABLE_COLUMNS = {
    "ranks": [
        "rank_id",
        "host_name",
        "device_id",
        "start_ns",
        "wall_ms_mean",
        "busy_ms_mean",
        "compute_share",
        "bubble_share",
    ],
    **{table: columns for table, (_, columns) in CLASS_COLUMNS.items()},
    "operators": ["name", "type", "primary_category", "call_count", "ms_per_step", "rank_max_ms_per_step"],
    "collectives": ["collective", "call_count", "ms_per_step", "rank_skew_ratio"],
    "time_split": ["breakdown", "category", "component", "ms_per_step"],
    "links": [
        "src_rank",
        "dst_rank",
        "transport",
        "parallel_role",
        "op_kind",
        "bandwidth_gbps",
        "comparable_median_gbps",
        "bandwidth_ratio",
        "comparable_links",
        "ops",
    ],
    "findings": [
        "finding_id",
        "finding_type",
        "severity",
        "confidence",
        "rank_ids",
        "recoverable_ms_per_step",
        "metrics",
        "summary",
    ],
}


def _csv(out_dir: Path, view) -> pd.DataFrame | None:
    path = out_dir / view.file
    return csv_formulas.read_csv_view(path) if path.exists() else None


def _step_count(out_dir: Path) -> int:
    """Complete steps per rank (at least 1): the divisor that turns a root's totals into ms per step."""
    steps = _csv(out_dir, schema.STEP_SUMMARY)
    if steps is None or steps.empty:
        return 1
    complete = steps[steps["complete"].astype(bool)] if "complete" in steps else steps
    return max(1, int(complete.groupby("rank_id").size().max()) if len(complete) else 1)


def rank_rows(out_dir: Path, normalize: dict) -> list[dict]:
    """One row per rank: where it ran (host name, device id) and its step times (rank_summary.csv);
    ``normalize`` is the root's normalize manifest."""
    capture = {r["rank_id"]: r for r in io.read_json_or_empty(out_dir / schema.CAPTURE_INFO).get("ranks", [])}
    spans = {r["rank_id"]: r for r in normalize.get("rank_summaries", [])}
    summary = _csv(out_dir, schema.RANK_SUMMARY_CSV)
    times = summary.set_index("rank_id").to_dict("index") if summary is not None else {}
    rows = []
    for rank_id in sorted(set(capture) | set(spans)):
        facts, span = capture.get(rank_id, {}), spans.get(rank_id, {})
        devices = span.get("device_ids") or []
        device = facts.get("device_id") if facts.get("device_id") is not None else (devices[0] if devices else None)
        own = times.get(rank_id, {})
        rows.append(
            {
                "rank_id": int(rank_id),
                "host_name": facts.get("host_name"),
                "device_id": device,
                "start_ns": span.get("start_ns"),
                "wall_ms_mean": own.get("wall_ms_mean"),
                "busy_ms_mean": own.get("busy_ms_mean"),
                "compute_share": own.get("compute_share"),
                "bubble_share": own.get("bubble_share"),
            }
        )
    return rows


def _class_rows(out_dir: Path, table: str) -> list[dict]:
    view, columns = CLASS_COLUMNS[table]
    frame = _csv(out_dir, view)
    if frame is None:
        return []
    return frame[[c for c in columns if c in frame]].to_dict("records")


def operator_rows(out_dir: Path, ranks: int, per_step_divisor: int, top: int) -> list[dict]:
    """The root's ``top`` operators by device time, as ms per step per rank."""
    frame = _csv(out_dir, schema.OPERATOR_CLASS_SUMMARY_CSV)
    if frame is None or frame.empty:
        return []
    frame = frame[frame["op_type"] != "communication"].nlargest(top, "duration_sum_us")
    return [
        {
            "name": row.name_,
            "type": row.type,
            "primary_category": row.primary_category,
            "call_count": int(row.call_count),
            "ms_per_step": float(row.duration_sum_us) / 1e3 / (ranks * per_step_divisor),
            "rank_max_ms_per_step": float(row.rank_duration_max_us) / 1e3 / per_step_divisor,
        }
        for row in frame.rename(columns={"name": "name_"}).itertuples(index=False)
    ]


def collective_rows(out_dir: Path, ranks: int, per_step_divisor: int) -> list[dict]:
    """Each collective kind × parallel role: its time in ms per step per rank and its rank skew."""
    frame = _csv(out_dir, schema.HCCL_CLASS_SUMMARY_CSV)
    if frame is None or frame.empty:
        return []
    frame = frame.assign(parallel_role=frame["parallel_role"].fillna("?"))
    grouped = frame.groupby(["kind", "parallel_role"], as_index=False).agg(
        call_count=("call_count", "sum"), duration_sum_us=("duration_sum_us", "sum"), skew=("rank_skew_ratio", "max")
    )
    return [
        {
            "collective": f"{row.parallel_role} {row.kind}",
            "call_count": int(row.call_count),
            "ms_per_step": float(row.duration_sum_us) / 1e3 / (ranks * per_step_divisor),
            "rank_skew_ratio": float(row.skew),
        }
        for row in grouped.itertuples(index=False)
    ]


def time_split_rows(out_dir: Path) -> list[dict]:
    """Where the complete steps' time went, ms per step averaged over ranks (step_time_accounting.csv)."""
    accounting = _csv(out_dir, schema.STEP_TIME_ACCOUNTING_CSV)
    if accounting is None or accounting.empty:
        return []
    kept = accounting[accounting["breakdown"].isin(TIME_SPLIT_BREAKDOWNS) & accounting["complete"].astype(bool)]
    instances = accounting[accounting["complete"].astype(bool)][["rank_id", "step_ordinal"]].drop_duplicates()
    if kept.empty or instances.empty:
        return []
    sums = kept.groupby(["breakdown", "category", "component"], as_index=False)["ms"].sum()
    sums["ms_per_step"] = sums.pop("ms") / len(instances)
    return sums.to_dict("records")


def link_rows(out_dir: Path) -> list[dict]:
    """Each link of the root (global ranks, transport, role, op kind) with its median bandwidth and its
    ratio to its comparable links' median — what slow_link_suspected judges, kept for every link so the
    sweep can see a link that is a little slow again and again (``fleet_links.fleet_link_suspects``)."""
    if not (out_dir / schema.COMMUNICATION_LINKS.path).exists():
        return []
    links = io.int_ranks(io.read_dataset(out_dir, schema.COMMUNICATION_LINKS, columns=LINK_INPUT_COLUMNS).to_pandas())
    group_ranks = captured_group_ranks(io.read_json_or_empty(out_dir / schema.CAPTURE_INFO))
    per_link = link_bandwidths(links, group_ranks)
    named = {
        "src": "src_rank",
        "dst": "dst_rank",
        "bandwidth": "bandwidth_gbps",
        "median": "comparable_median_gbps",
        "ratio": "bandwidth_ratio",
        "peers": "comparable_links",
    }
    return per_link.rename(columns=named)[TABLE_COLUMNS["links"]].to_dict("records")


def finding_rows(out_dir: Path) -> list[dict]:
    """Every finding: type, ranks, recoverable time, its metrics as JSON, its text."""
    listed = io.read_json_or_empty(out_dir / schema.DIAGNOSIS_FINDINGS).get("diagnosis_findings", [])
    return [
        {
            "finding_id": f.get("claim_id"),
            "finding_type": f.get("finding_type"),
            "severity": f.get("severity"),
            "confidence": f.get("confidence"),
            "rank_ids": ";".join(str(r) for r in f.get("rank_ids", [])),
            "recoverable_ms_per_step": f.get("recoverable_ms_per_step"),
            "metrics": json.dumps(f.get("metrics")) if isinstance(f.get("metrics"), dict) else f.get("metrics"),
            "summary": f.get("summary"),
        }
        for f in listed
    ]


def _rank_count(normalize: dict) -> int:
    """Ranks with events (at least 1): the divisor that turns a root's totals into ms per rank."""
    return max(1, int(normalize.get("ranks_with_events") or normalize.get("rank_count") or 1))


def root_tables(out_dir: Path) -> dict[str, list[dict]]:
    """The rows a finished root adds to each sweep table (``TABLE_COLUMNS``); empty lists where the
    root's summaries are missing (a stage that did not run)."""
    normalize = io.read_json_or_empty(out_dir / schema.stage_manifest_name("normalize"))
    ranks, steps = _rank_count(normalize), _step_count(out_dir)
    top = int(knowledge.load("sweep_rules")["outliers"]["top_operators_per_root"])
    return {
        "ranks": rank_rows(out_dir, normalize),
        **{table: _class_rows(out_dir, table) for table in CLASS_COLUMNS},
        "operators": operator_rows(out_dir, ranks, steps, top),
        "collectives": collective_rows(out_dir, ranks, steps),
        "time_split": time_split_rows(out_dir),
        "links": link_rows(out_dir),
        "findings": finding_rows(out_dir),
    }
