"""Roofline per operator shape and MFU per step, against the chosen hardware's peaks."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.modelinfo.hardware import Hardware
from npuprof.pipeline.stages.model.shape_ops import SHAPE_KEY
from npuprof.pipeline.summaries.communication import COMMUNICATION_OP_TYPES

FLOPS_FIRST = ["flops_per_call", "bytes_per_call", "flops_kind", "compute_dtype", "flops_formula", "flops_confidence"]


def _peaks(frame: pd.DataFrame, hw: Hardware) -> tuple[np.ndarray, np.ndarray, float]:
    """(theoretical TFLOPS, sustained TFLOPS) per row by its kind and dtype, and the sustained GB/s."""
    peak = np.full(len(frame), np.nan)
    sustained = np.full(len(frame), np.nan)
    cube = (frame["flops_kind"] == "cube").to_numpy()
    for dtype, value in hw.cube_tflops.items():
        rows = cube & (frame["compute_dtype"] == dtype).to_numpy()
        peak[rows] = value
        sustained[rows] = hw.sustained_tflops(dtype) or np.nan
    if hw.vector_tflops:
        rows = (frame["flops_kind"] == "vector").to_numpy()
        peak[rows] = hw.vector_tflops
        sustained[rows] = hw.vector_tflops * hw.sustained.get("vector", 1.0)
    bandwidth = hw.hbm_gbps * hw.sustained.get("hbm", 1.0) if hw.hbm_gbps else np.nan
    return peak, sustained, bandwidth


def operator_efficiency(shapes: pd.DataFrame, hw: Hardware) -> pd.DataFrame:
    """Per distinct kernel + shapes (merged over ranks): FLOPs, intensity, achieved rates, roofline and MFU."""
    compute = shapes[~shapes["op_type"].isin(COMMUNICATION_OP_TYPES)]
    if compute.empty:
        return pd.DataFrame()
    keys = compute[SHAPE_KEY].fillna("")
    grouped = compute.assign(**{k: keys[k] for k in SHAPE_KEY}).sort_values(["rank_id", "row_start"])
    grouped = grouped.groupby(SHAPE_KEY, sort=False)
    table = grouped.agg(
        rank_count=("rank_id", "nunique"),
        call_count=("call_count", "sum"),
        duration_sum_us=("duration_sum_us", "sum"),
        evidence_rank=("rank_id", "first"),
        evidence_row=("row_start", "first"),
        evidence_id=("evidence_id", "first"),
        **{c: (c, "first") for c in FLOPS_FIRST},
    ).reset_index()
    table[SHAPE_KEY] = table[SHAPE_KEY].replace("", None)
    table["duration_avg_us"] = table["duration_sum_us"] / table["call_count"]
    flops, moved = table["flops_per_call"].to_numpy(float), table["bytes_per_call"].to_numpy(float)
    seconds = table["duration_avg_us"].to_numpy(float) / 1e6
    with np.errstate(divide="ignore", invalid="ignore"):
        table["arithmetic_intensity"] = flops / moved
        table["achieved_tflops"] = flops / seconds / 1e12
        table["achieved_gbps"] = moved / seconds / 1e9
        peak, sustained, bandwidth = _peaks(table, hw)
        compute_us = flops / (sustained * 1e12) * 1e6
        memory_us = moved / (bandwidth * 1e9) * 1e6
    table["peak_tflops"] = peak
    table["sustained_tflops"] = sustained
    table["sustained_gbps"] = bandwidth
    roof = np.fmax(compute_us, memory_us)
    bound = np.where(
        np.isnan(roof),
        "unknown",
        np.where(np.nan_to_num(compute_us, nan=-1) >= np.nan_to_num(memory_us, nan=-1), "compute", "memory"),
    )
    table["roofline_bound"] = bound
    table["roofline_time_us"] = roof
    with np.errstate(divide="ignore", invalid="ignore"):
        table["roofline_efficiency"] = roof / table["duration_avg_us"].to_numpy(float)
    table["reclaimable_us"] = np.clip(
        table["duration_sum_us"].to_numpy() - roof * table["call_count"].to_numpy(), 0, None
    )
    cube = (table["flops_kind"] == "cube").to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        table["mfu"] = np.where(cube, table["achieved_tflops"] / peak, np.nan)
    table["evidence_rank_row"] = "r" + table["evidence_rank"].astype(str) + ":row" + table["evidence_row"].astype(str)
    table = table.drop(columns=["evidence_rank", "evidence_row"])
    order = table.assign(_r=table["reclaimable_us"].fillna(-1)).sort_values(
        ["_r", "duration_sum_us"], ascending=False, kind="stable"
    )
    return order.drop(columns="_r").reset_index(drop=True)


def step_efficiency(step_flops: pd.DataFrame, accounting: pd.DataFrame, hw: Hardware) -> pd.DataFrame:
    """Per rank and step: cube FLOPs over the step wall, and MFU against the main dtype's theoretical peak."""
    if step_flops.empty or accounting.empty:
        return pd.DataFrame()
    walls = accounting.drop_duplicates(["rank_id", "step_ordinal"])[["rank_id", "step_ordinal", "wall_ms"]]
    table = step_flops.merge(walls, on=["rank_id", "step_ordinal"], how="inner")
    seconds = table["wall_ms"].to_numpy(float) / 1e3
    with np.errstate(divide="ignore", invalid="ignore"):
        table["achieved_tflops"] = table["cube_flops"].to_numpy(float) / seconds / 1e12
        table["flops_coverage"] = table["cube_kernel_us_with_flops"] / table["cube_kernel_us"]
    peak = hw.cube_tflops.get(hw.facts.get("mfu_dtype") or "bf16") if hw.resolved else None
    table["mfu"] = table["achieved_tflops"] / peak if peak else np.nan
    columns = [
        "rank_id",
        "step_ordinal",
        "step_id",
        "wall_ms",
        "cube_flops",
        "achieved_tflops",
        "mfu",
        "flops_coverage",
    ]
    return table[columns].sort_values(["rank_id", "step_ordinal"]).reset_index(drop=True)


def main_dtype(shapes: pd.DataFrame) -> str | None:
    """The compute dtype that holds the most cube-kernel time (MFU is quoted against its peak)."""
    cube = shapes[shapes["flops_kind"] == "cube"]
    if cube.empty:
        return None
    return str(cube.groupby("compute_dtype")["duration_sum_us"].sum().idxmax())
