"""One rollup row per analyzed root, read back from its output dir (the archive is the truth).

Rows hold only what the root's artifacts say; a stage that did not run leaves its columns empty
rather than zero.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from npuprof.pipeline import csv_formulas, io, schema
from npuprof.pipeline.errors import no_space
from npuprof.pipeline.stages.report.headline import headline_costs, top_cost
from npuprof.pipeline.sweep.cohorts import SERVING_PHASES
from npuprof.pipeline.sweep.intelligence import COHORT_COLUMNS, analyze_sweep, sweep_tables, write_sweep_findings
from npuprof.pipeline.sweep.merge_state import forget_state, layout_key, previous_merge, write_state
from npuprof.pipeline.sweep.root_tables import TABLE_COLUMNS, root_tables

# rollup column <- profiler_metadata distributed_args key
PARALLEL_SIZES = {
    "world_size": "world_size",
    "tp_size": "tensor_model_parallel_size",
    "pp_size": "pipeline_model_parallel_size",
    "dp_size": "data_parallel_size",
    "ep_size": "expert_model_parallel_size",
    "cp_size": "context_parallel_size",
}
# a serving root's forwards per phase (segment's serving view): how many, their device wall p50, the
# device's idle before them p50 and the device µs per token; a phase the root did not run stays empty
SERVING_FIGURES = {
    "forwards": "forwards",
    "wall_p50_ms": "wall_p50_ms",
    "gap_p50_ms": "gap_before_p50_ms",
    "us_per_token": "device_us_per_token",
}
# and of the decodes replayed from full graphs, the share of the tokens they computed that was the graphs'
# padding (a deployment whose capture sizes miss the batches it runs stands out across a fleet)
SERVING_COLUMNS = [f"{phase}_{column}" for phase in SERVING_PHASES for column in SERVING_FIGURES] + [
    "decode_padded_share"
]
ROLLUP_COLUMNS = [
    "root",
    "slug",
    "status",
    "phase",
    "error",
    "analysis_status",
    "degraded_reasons",
    "output_dir",
    "npuprof_version",
    "rank_count",
    "event_count",
    "step_count",
    "complete_step_count",
    "layers_per_pass",
    "layer_validation",
    "wall_ms_sum",
    "step_class_count",
    "top_step_class_id",
    "top_step_class_members",
    "top_step_class_wall_ms_mean",
    "top_step_class_wall_ms_p90",
    "top_step_class_bubble_ratio_mean",
    "block_wall_share_attention",
    "block_wall_share_ffn",
    "block_wall_share_moe",
    "hccl_total_ms",
    "hccl_share_of_wall",
    "hccl_top_kind",
    "hccl_top_kind_ms",
    "hccl_top_kind_rank_skew_ratio",
    "hccl_max_rank_skew_ratio",
    "compute_share",
    "exposed_communication_share",
    "idle_share",
    "top_cost",  # the largest cost of the step over the ranks (report headline), with its ms and share
    "top_cost_ms_per_step",
    "top_cost_share",
    "top_cost_ranks",
    "top_noncompute_cost",  # the largest time the device is not computing: exposed communication or idle
    "top_noncompute_cost_ms_per_step",
    "top_noncompute_cost_share",
    "top_noncompute_cost_ranks",
    "workload",  # training | inference | serving (forwards labelled by phase: the columns below)
    *SERVING_COLUMNS,
    *PARALLEL_SIZES,
    "cann_version",
    "torch_npu_version",
    "host_names",  # the machines the ranks ran on, where the capture names them
    "capture_start_ns",  # the root's earliest event (ns since the epoch): a series' default order
    "model_best_candidate",
    "model_closest_candidate",
    "hidden_size",
    "num_hidden_layers",
    "hardware",
    "mfu_mean",
    "findings_total",
    "findings_by_type",
    "findings_by_severity",
    "top_recoverable_finding",  # the finding whose cause costs the most, its ms per step and ranks
    "top_recoverable_ms_per_step",
    "top_recoverable_ranks",
    # every finding fixed at once, replayed together (the findings' own estimates overlap: not their sum)
    "recoverable_together_ms_per_step",
    "elapsed_s",
    *COHORT_COLUMNS,
]
INTEGER_COLUMNS = (
    "rank_count",
    "event_count",
    "step_count",
    "complete_step_count",
    "layers_per_pass",
    "step_class_count",
    "top_step_class_members",
    *(f"{phase}_forwards" for phase in SERVING_PHASES),
    *PARALLEL_SIZES,
    "hidden_size",
    "num_hidden_layers",
    "findings_total",
    "capture_start_ns",
)


def root_status(out_dir: Path) -> str:
    """ok: the top manifest exists and no failure; failed: failure.json; missing: neither."""
    if (out_dir / schema.FAILURE_JSON).exists():
        return "failed"
    if (out_dir / schema.TOP_MANIFEST).exists():
        return "ok"
    return "missing"


def communication_figures(out_dir: Path) -> dict:
    """The rollup's HCCL columns of one root, from summarize's HCCL tables (no event is re-read).

    Share of wall: communication time over the ranks' captured spans (normalize's manifest).
    """
    per_rank_path, classes_path = (
        out_dir / schema.HCCL_OP_SUMMARY_CSV.file,
        out_dir / schema.HCCL_CLASS_SUMMARY_CSV.file,
    )
    if not per_rank_path.exists() or not classes_path.exists():
        return {}
    per_rank = csv_formulas.read_csv_view(per_rank_path)
    spans = io.read_json_or_empty(out_dir / schema.stage_manifest_name("normalize")).get("rank_summaries", [])
    wall_ns = float(sum((r["end_ns"] - r["start_ns"]) for r in spans if r.get("start_ns") is not None))
    if per_rank.empty:
        return {"hccl_total_ms": 0.0, "hccl_share_of_wall": 0.0}
    per_kind = per_rank.groupby("kind")["duration_sum_us"].sum().sort_values(ascending=False)
    top = per_kind.index[0]
    top_rows = per_rank[per_rank["kind"] == top].groupby("rank_id")[["duration_sum_us", "call_count"]].sum()
    rank_mean = top_rows["duration_sum_us"] / top_rows["call_count"]
    skew = (
        float((rank_mean.max() - rank_mean.min()) / rank_mean.mean())
        if len(rank_mean) > 1 and rank_mean.mean()
        else 0.0
    )
    classes = csv_formulas.read_csv_view(classes_path)
    total_us = float(per_rank["duration_sum_us"].sum())
    return {
        "hccl_total_ms": total_us / 1e3,
        "hccl_share_of_wall": total_us * 1e3 / wall_ns if wall_ns else None,
        "hccl_top_kind": top,
        "hccl_top_kind_ms": float(per_kind.iloc[0]) / 1e3,
        "hccl_top_kind_rank_skew_ratio": skew,
        "hccl_max_rank_skew_ratio": float(classes["rank_skew_ratio"].max()) if len(classes) else None,
    }


def _time_split(out_dir: Path) -> dict:
    """Compute / exposed communication / idle shares of the complete steps' wall, over all ranks."""
    path = out_dir / schema.STEP_TIME_ACCOUNTING_CSV.file
    if not path.exists():
        return {}
    accounting = csv_formulas.read_csv_view(path)
    primary = accounting[(accounting["breakdown"] == "primary") & accounting["complete"].astype(bool)]
    walls = primary.drop_duplicates(["rank_id", "step_ordinal"])["wall_ms"].sum()
    if not walls:
        return {}
    by_category = primary.groupby("category")["ms"].sum()
    headline = headline_costs(accounting, sorted(int(r) for r in accounting["rank_id"].unique()))
    return {
        "compute_share": float(by_category.get("compute", 0.0)) / walls,
        "exposed_communication_share": float(by_category.get("communication", 0.0)) / walls,
        "idle_share": float(by_category.get("idle", 0.0)) / walls,
        **top_cost(headline, "top_cost"),
        **top_cost(headline, "top_noncompute_cost", skip_compute=True),
    }


def _capture(out_dir: Path) -> dict:
    """World / TP / PP / DP / EP / CP sizes the capture recorded (profiler_metadata distributed_args),
    its software versions, the machines it ran on and when it started."""
    capture = io.read_json_or_empty(out_dir / schema.CAPTURE_INFO)
    common = capture.get("common") or {}
    args = common.get("distributed_args") or {}
    hosts = sorted({str(r["host_name"]) for r in capture.get("ranks", []) if r.get("host_name")})
    spans = io.read_json_or_empty(out_dir / schema.stage_manifest_name("normalize")).get("rank_summaries", [])
    starts = [r["start_ns"] for r in spans if r.get("start_ns") is not None]
    return {
        **{column: args.get(key) for column, key in PARALLEL_SIZES.items() if isinstance(args.get(key), int)},
        "cann_version": common.get("cann_version"),
        "torch_npu_version": common.get("torch_npu_version"),
        "host_names": ";".join(hosts) or None,
        "capture_start_ns": min(starts) if starts else None,
    }


def _model(out_dir: Path) -> dict:
    """The fingerprint's verdict and the MFU over steps, from summarize's model and hardware documents."""
    insights = io.read_json_or_empty(out_dir / schema.MODEL_INSIGHTS)
    hardware = io.read_json_or_empty(out_dir / schema.HARDWARE_INSIGHTS)
    if not insights and not hardware:
        return {}
    fields = insights.get("fingerprint", {})
    candidates = insights.get("candidates") or []
    return {
        "model_best_candidate": insights.get("best_candidate"),
        "model_closest_candidate": candidates[0]["model"] if candidates else None,
        "hidden_size": (fields.get("hidden_size") or {}).get("value"),
        "num_hidden_layers": (fields.get("num_hidden_layers") or {}).get("value"),
        "hardware": hardware.get("name"),
        "mfu_mean": (hardware.get("mfu") or {}).get("mean"),
    }


def _workload(segment: dict) -> dict:
    """What the root ran — training, inference, or serving (forwards labelled by phase) — and a serving
    root's figures per phase (segment's serving view)."""
    if not segment:
        return {}
    phases = (segment.get("serving") or {}).get("phases")
    if not phases:
        training = any(rank.get("training") for rank in segment.get("rank_summaries", []))
        return {"workload": "training" if training else "inference"}
    row = {"workload": "serving"}
    for phase, figures in phases.items():
        if phase in SERVING_PHASES:
            row.update({f"{phase}_{column}": figures.get(key) for column, key in SERVING_FIGURES.items()})
    return row | {"decode_padded_share": _padded_share(phases.get("decode") or {})}


def _padded_share(decode: dict) -> float | None:
    """The padding's share of the tokens the decodes computed (real tokens plus padding), where the serving
    view tells the padding (full-graph decodes whose sampled rows it read); None elsewhere."""
    padded, tokens = decode.get("padded_tokens"), decode.get("tokens")
    if padded is None or not tokens:
        return None
    return round(padded / (tokens + padded), 4)


def _steps(out_dir: Path) -> dict:
    path = out_dir / schema.STEP_SUMMARY.file
    if not path.exists():
        return {}
    steps = csv_formulas.read_csv_view(path)
    complete = steps[steps["complete"]] if "complete" in steps else steps
    row = {
        "step_count": int(len(steps)),
        "complete_step_count": int(len(complete)),
        "wall_ms_sum": float(complete["wall_ms"].sum()) if "wall_ms" in complete else None,
    }
    if "step_class_id" in complete and len(complete):
        counts = complete["step_class_id"].value_counts()
        top = counts.index[0]
        members = complete[complete["step_class_id"] == top]
        row.update(
            {
                "step_class_count": int(len(counts)),
                "top_step_class_id": top,
                "top_step_class_members": int(counts.iloc[0]),
                "top_step_class_wall_ms_mean": float(members["wall_ms"].mean()),
                "top_step_class_wall_ms_p90": float(np.percentile(members["wall_ms"], 90)),
                "top_step_class_bubble_ratio_mean": float(members["underfeed_ratio"].mean()),
            }
        )
    return row


def _blocks(out_dir: Path) -> dict:
    path = out_dir / schema.BLOCK_SUMMARY.file
    if not path.exists():
        return {}
    blocks = csv_formulas.read_csv_view(path)
    if blocks.empty:
        return {}
    wall = blocks.groupby("block_kind")["wall_ms"].sum()
    total = float(wall.sum())
    return (
        {f"block_wall_share_{kind}": float(wall.get(kind, 0.0)) / total for kind in ("attention", "ffn", "moe")}
        if total
        else {}
    )


def root_entry(root: str, slug: str, out_dir: Path) -> tuple[dict, dict[str, list[dict]]]:
    """The rollup row of one root and the rows it adds to the sweep's tables (``root_tables``), from
    whatever its output dir holds.

    Both are cached beside the root's outputs, keyed by its manifest's ``updated_at``: merging a
    sweep of finished roots then reads one small file per root instead of every summary.
    """
    status = root_status(out_dir)
    if status != "ok":
        return _fresh_row(root, slug, out_dir, status), {}
    stamp = io.read_json_or_empty(out_dir / schema.TOP_MANIFEST).get("updated_at")
    cached = io.read_json_or_empty(out_dir / schema.ROLLUP_ROW_CACHE)
    fresh = cached.get("manifest_updated_at") == stamp and cached.get("row", {}).get("root") == str(root)
    if fresh and "tables" in cached:
        return {**cached["row"], "slug": slug, "output_dir": str(out_dir)}, cached["tables"]
    row, tables = _fresh_row(root, slug, out_dir, status), root_tables(out_dir)
    cache = io.json_text({"manifest_updated_at": stamp, "row": row, "tables": tables})  # compact: read by code only
    try:
        io.write_with(out_dir / schema.ROLLUP_ROW_CACHE, lambda tmp: tmp.write_text(cache, encoding="utf-8"))
    except OSError as exc:
        if not no_space(exc):  # a cache: a full archive only costs the next merge a re-read
            raise
    return row, tables


def root_rollup(root: str, slug: str, out_dir: Path) -> dict:
    """The rollup row of one root (``root_entry``; caches its table rows too)."""
    return root_entry(root, slug, out_dir)[0]


def _fresh_row(root: str, slug: str, out_dir: Path, status: str) -> dict:
    row: dict = {"root": str(root), "slug": slug, "output_dir": str(out_dir), "status": status}
    if row["status"] == "failed":
        failure = io.read_failure(out_dir) or {}
        row.update({"phase": failure.get("phase"), "error": failure.get("error")})
        return row
    if row["status"] != "ok":
        return row
    top = io.read_json_or_empty(out_dir / schema.TOP_MANIFEST)
    normalize = io.read_json_or_empty(out_dir / schema.stage_manifest_name("normalize"))
    segment = io.read_json_or_empty(out_dir / schema.stage_manifest_name("segment"))
    report = io.read_json_or_empty(out_dir / schema.stage_manifest_name("report"))
    row.update(
        {
            "analysis_status": report.get("status"),  # ok | degraded (why: degraded_reasons)
            "degraded_reasons": "; ".join(report.get("status_reasons", [])) or None,
            "npuprof_version": top.get("npuprof_version"),
            "rank_count": normalize.get("rank_count"),
            "event_count": normalize.get("event_count"),
            "elapsed_s": round(sum(top.get("stage_timings", {}).values()), 3),
        }
    )
    if segment:
        inventory = segment.get("layers_per_pass_inventory") or {}
        if inventory:  # the most common decoder-layer count per pass over the root's ranks
            row["layers_per_pass"] = int(max(inventory.items(), key=lambda kv: (kv[1], int(kv[0])))[0])
        row["layer_validation"] = segment.get("layer_validation", {}).get("status")
    row.update(_workload(segment))
    row.update(_steps(out_dir))
    row.update(_blocks(out_dir))
    row.update(communication_figures(out_dir))
    row.update(_time_split(out_dir))
    row.update(_capture(out_dir))
    row.update(_model(out_dir))
    findings = io.read_json_or_empty(out_dir / schema.DIAGNOSIS_FINDINGS)
    if findings:
        listed = findings.get("diagnosis_findings", [])
        by_type = Counter(f.get("finding_type") for f in listed)
        by_severity = Counter(f.get("severity") for f in listed)
        row.update(
            {
                "findings_total": len(listed),
                "findings_by_type": json.dumps(dict(sorted(by_type.items()))),
                "findings_by_severity": json.dumps(dict(sorted(by_severity.items()))),
            }
        )
        # diagnostics lists findings most recoverable time first
        priced = [f for f in listed if f.get("recoverable_ms_per_step")]
        if priced:
            row["top_recoverable_finding"] = priced[0]["finding_type"]
            row["top_recoverable_ms_per_step"] = priced[0]["recoverable_ms_per_step"]
            row["top_recoverable_ranks"] = ";".join(map(str, priced[0]["rank_ids"]))
        row["recoverable_together_ms_per_step"] = (findings.get("recoverable_together") or {}).get("ms_per_step")
    return row


def _in_root_order(frame: pd.DataFrame, order: dict[str, int]) -> pd.DataFrame:
    """Rows by their root's place in the sweep (stable: a root's own rows keep their order)."""
    return frame.iloc[frame["slug"].map(order).argsort(kind="stable")].reset_index(drop=True)


def _joined(parts: list[pd.DataFrame], columns: list[str], order: dict[str, int]) -> pd.DataFrame:
    """Reused and fresh rows of one table as one frame in root order."""
    present = [p for p in parts if len(p)]
    if not present:
        return pd.DataFrame(columns=columns)
    return _in_root_order(pd.concat(present, ignore_index=True) if len(present) > 1 else present[0], order)


def _sweep_summary(frame: pd.DataFrame, meta: dict, archive: Path) -> dict:
    """sweep_summary.json's record of the roots (before what the intelligence adds)."""
    failed = frame[frame["status"] == "failed"]
    layers = [int(v) for v in frame["layers_per_pass"].dropna() if v]
    return {
        **meta,
        "root_count": len(frame),
        "status_counts": dict(Counter(frame["status"])),
        "failed_roots": [
            {"root": root, "phase": None if pd.isna(phase) else phase, "error": None if pd.isna(error) else error}
            for root, phase, error in zip(failed["root"], failed["phase"], failed["error"])
        ],
        "missing_roots": frame.loc[frame["status"] == "missing", "root"].tolist(),
        "layer_inventory": dict(Counter(layers)),
        "analysis_seconds_sum": round(float(frame["elapsed_s"].fillna(0).sum()), 3),
        "rollup": str(archive / schema.SWEEP_ROLLUP),
    }


def merge_sweep(archive: Path, roots: list[tuple[str, str]], meta: dict) -> dict:
    """Write sweep_class_rollup.csv, sweep_summary.json and what the sweep says beyond one row per root
    (``intelligence.analyze_sweep``: cohorts, outliers, fleet suspects, trends, datasets, sweep_report.html)
    for ``roots`` [(root, slug)] from the archive. ``meta["series_key"]`` orders the roots of a series.

    Roots the last merge took and that have not changed since come from its datasets; only new and
    re-analyzed roots' cached rows are read (``merge_state``)."""
    roots = sorted(roots)
    order = {slug: index for index, (_, slug) in enumerate(roots)}
    layout = layout_key(ROLLUP_COLUMNS)
    base_columns = [c for c in ROLLUP_COLUMNS if c not in COHORT_COLUMNS]
    previous = previous_merge(archive, roots, layout, base_columns)
    entries = [root_entry(root, slug, archive / slug) for root, slug in roots if slug not in previous.slugs]
    fresh = pd.DataFrame([row for row, _ in entries], columns=base_columns)
    for column in INTEGER_COLUMNS:
        fresh[column] = pd.array(fresh[column], dtype="Int64")
    frame = _joined([previous.rollup, fresh], base_columns, order)
    fresh_tables = sweep_tables({row["slug"]: tables for row, tables in entries})
    tables = {
        name: _joined([previous.tables.get(name, pd.DataFrame()), fresh_tables[name]], ["slug", *columns], order)
        for name, columns in TABLE_COLUMNS.items()
    }
    summary = _sweep_summary(frame, meta, archive)
    try:
        found = analyze_sweep(frame, tables, meta.get("series_key"))
    except Exception as exc:  # noqa: BLE001 — the rollup is the sweep's record; what is derived from it may fail
        found = None
        summary["not_written"] = f"cohorts, outliers, fleet and trends not computed: {type(exc).__name__}: {exc}"
    rollup = (found.rollup if found else frame).reindex(columns=ROLLUP_COLUMNS)
    for column in rollup.select_dtypes("float").columns:
        rollup[column] = rollup[column].round(6)
    # small; pandas keeps NA cells empty
    io.write_with(archive / schema.SWEEP_ROLLUP, lambda tmp: csv_formulas.formula_safe(rollup).to_csv(tmp, index=False))
    forget_state(archive)  # the datasets are about to change: until they have, no merge may trust them
    if found:
        summary.update(found.summary(archive))
        try:
            write_sweep_findings(archive, found, summary)
            write_state(archive, frame, layout)
        except OSError as exc:
            if not no_space(exc):
                raise
            # the rollup landed; the sweep's tables and report are derived from it and can be merged again
            summary.update(sweep_report=None, datasets=None)
            summary["not_written"] = f"no space left on device writing the sweep's tables and report into {archive}"
    io.write_json(archive / schema.SWEEP_SUMMARY, summary)
    return summary
