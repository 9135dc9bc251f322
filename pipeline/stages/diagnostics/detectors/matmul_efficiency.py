"""operator_low_efficiency: a heavy matmul shape running far below the speed the capture's own matmuls
reach — a dimension off the cube's 16 × 16 fractal, fp32 inputs where the model runs bf16, or a cause
the capture does not show.

The yardstick is measured, not a datasheet's: per compute dtype, the fastest matmul shape (achieved
TFLOP/s, model's operator_efficiency_summary) among those holding at least ``reference_share_min`` of
that dtype's matmul time — what this card demonstrably sustains on this workload. A shape at most
``speed_ratio_max`` of it is priced at that speed: each call's time beyond its FLOPs at the reference,
closed in the replay. It needs the card named (``--hardware-model``, or a db capture's NPU_INFO): a
reference above the card's peak says the FLOPs or the card are wrong, and that dtype is not judged.
The roofline is quoted beside the finding, not used to price: no shape reaches the datasheet's roof,
and pricing to it would promise what no fix delivers.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from npuprof.pipeline import schema
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, priced, rule
from npuprof.pipeline.stages.diagnostics.rank_kernels import scan_kernels_in_steps
from npuprof.pipeline.stages.diagnostics.registry import derived_input, detector
from npuprof.pipeline.stages.diagnostics.retiming import close_windows
from npuprof.pipeline.stages.diagnostics.step_scale import mean_step_wall_ms, steps_per_rank

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext

FINDING = "operator_low_efficiency"
SHAPE_KEY = ["name", "input_shapes"]
CALL_COLUMNS = [*SHAPE_KEY, "rank_id", "start_us", "duration_us"]


@derived_input("matmul_shapes")
def matmul_shapes(ctx: RootContext) -> pd.DataFrame:
    """The cube matmul shapes (model's operator_efficiency_summary) whose FLOPs the shapes give, with
    their achieved speed; empty where the model stage wrote none."""
    table = ctx.read_view(schema.OPERATOR_EFFICIENCY_SUMMARY_CSV)
    if not len(table):
        return table
    pattern = rule(FINDING)["matmul_types"]
    matmul = table["type"].astype(str).str.fullmatch(pattern) & (table["flops_kind"] == "cube")
    known = (table["flops_confidence"] == "high") & (pd.to_numeric(table["achieved_tflops"], errors="coerce") > 0)
    return table[matmul & known].reset_index(drop=True)


def reference_speeds(shapes: pd.DataFrame, share_min: float) -> pd.Series:
    """Per compute dtype: the fastest shape's achieved TFLOP/s among those with ``share_min`` of the
    dtype's matmul time."""
    share = shapes["duration_sum_us"] / shapes.groupby("compute_dtype")["duration_sum_us"].transform("sum")
    return shapes[share >= share_min].groupby("compute_dtype")["achieved_tflops"].max()


def slow_shapes(shapes: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """The shapes at most ``speed_ratio_max`` of their dtype's reference, with ``reference_tflops``,
    ``ratio`` and the µs their calls take beyond their FLOPs at the reference (``excess_us``, all ranks)."""
    reference = shapes["compute_dtype"].map(reference_speeds(shapes, spec["reference_share_min"]))
    ratio = shapes["achieved_tflops"] / reference
    at_reference_us = shapes["call_count"] * shapes["flops_per_call"] / (reference * 1e6)
    table = shapes.assign(
        reference_tflops=reference, ratio=ratio, excess_us=shapes["duration_sum_us"] - at_reference_us
    )
    return table[table["ratio"] <= spec["speed_ratio_max"]].reset_index(drop=True)


def off_fractal(input_shapes: str, fractal: int) -> list[int]:
    """The dimensions of ``input_shapes`` that are not a multiple of the cube's fractal edge."""
    return sorted({int(d) for d in re.findall(r"\d+", str(input_shapes)) if int(d) > 1 and int(d) % fractal})


def fractal_words(dims: list[int], fractal: int) -> str:
    return f"dimension {', '.join(map(str, dims))} is not a multiple of the cube's {fractal} x {fractal} fractal"


def likely_cause(input_shapes: str, input_dtypes: str, fractal: int) -> tuple[str, str]:
    """What the shape itself says — (kind, words): a dimension off the cube's fractal (``fractal``), fp32
    inputs (``fp32``), or nothing (``unknown``)."""
    off = off_fractal(input_shapes, fractal)
    if off:
        return "fractal", fractal_words(off, fractal)
    if str(input_dtypes).split(";")[0].strip().upper() in ("FLOAT", "DT_FLOAT", "FLOAT32"):
        return "fp32", "its inputs are fp32 where the cube runs fastest on bf16 / fp16"
    return "unknown", "the capture does not show why"


def _call_windows(ctx: RootContext, slow: pd.DataFrame) -> pd.DataFrame:
    """Each call of the slow shapes on every rank: rank_id, start_us and the µs beyond its FLOPs at the
    reference (duration_us: what the replay closes)."""
    where = pc.field("name").isin(sorted(slow["name"].unique()))
    at_reference = slow.set_index(SHAPE_KEY)["flops_per_call"] / (slow.set_index(SHAPE_KEY)["reference_tflops"] * 1e6)

    def beyond_reference(rank: int, calls: pd.DataFrame) -> pd.DataFrame:
        calls = calls.join(at_reference.rename("at_reference_us"), on=SHAPE_KEY, how="inner")
        cut = (calls["duration_ns"] / 1000.0 - calls["at_reference_us"]).clip(lower=0.0)
        return calls[SHAPE_KEY].assign(rank_id=rank, start_us=calls["start_ns"] / 1000.0, duration_us=cut)

    columns = ["name", "input_shapes", "start_ns", "duration_ns"]
    parts = [part for _, part in scan_kernels_in_steps(ctx, columns, beyond_reference, where=where)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=CALL_COLUMNS)


@derived_input("slow_matmul_calls")
def slow_matmul_calls(ctx: RootContext) -> pd.DataFrame:
    """The calls of the slow matmul shapes, for the replay (see ``_call_windows``)."""
    slow = slow_shapes(matmul_shapes(ctx), rule(FINDING))
    return _call_windows(ctx, slow) if len(slow) else pd.DataFrame(columns=CALL_COLUMNS)


@detector(
    finding_types=(FINDING,),
    reads={
        "matmul_shapes": (),
        "slow_matmul_calls": (),
        "hardware": (),
        "steps": ("rank_id", "step_ordinal", "complete", "wall_ms"),
        "step_model": (),
    },
)
def operator_low_efficiency(inputs: DiagnosisContext) -> list[Finding]:
    """One finding per matmul shape far below its dtype's reference speed that costs at least
    ``min_step_share`` of the mean step."""
    spec = rule(FINDING)
    shapes = inputs.matmul_shapes
    if not len(shapes):
        return []
    peaks = (inputs.hardware.get("cube_tflops") or {}) if inputs.hardware.get("name") else {}
    if not peaks:
        inputs.not_judging(FINDING, _unnamed_card(inputs.hardware.get("capture_devices") or []))
        return []
    shapes = _under_peaks(inputs, shapes, peaks, spec)
    if not len(shapes):  # every dtype's reference is above the named card's peak: said as not judged
        return []
    slow = slow_shapes(shapes, spec)
    if not len(slow):
        return []
    steps = inputs.steps
    per_step = slow["excess_us"] / slow["rank_count"] / float(steps_per_rank(steps).mean()) / 1000.0
    causes = [likely_cause(r.input_shapes, r.input_dtypes, spec["cube_fractal"]) for r in slow.itertuples()]
    slow = slow.assign(ms_per_step=per_step, cause_kind=[c[0] for c in causes], cause=[c[1] for c in causes])
    calls = inputs.slow_matmul_calls
    findings = []
    least_ms = spec["min_step_share"] * mean_step_wall_ms(steps)
    for _, group in slow.groupby(["name", "cause_kind"], sort=False):  # a loop over slow kernels and causes
        if group["ms_per_step"].sum() < least_ms:
            continue
        mine = calls.merge(group[SHAPE_KEY], on=SHAPE_KEY, how="inner")
        claim = priced(inputs.step_model, close_windows(inputs.step_model, mine, kernels=True))
        findings.append(_finding(group, sorted(int(r) for r in mine["rank_id"].unique()), spec, claim))
    return findings


def _unnamed_card(capture_devices: list[str]) -> str:
    """Why the card's peak is not known: a db capture's NPU_INFO names a family (Ascend910B), not the SoC;
    a text capture names nothing."""
    if capture_devices:
        named = ", ".join(capture_devices)
        return f"the capture names {named}, not one SoC with a known peak: pass --hardware-model (e.g. {named}4)"
    return "the card is not named (a text capture does not say): pass --hardware-model"


def _under_peaks(inputs: DiagnosisContext, shapes: pd.DataFrame, peaks: dict, spec: dict) -> pd.DataFrame:
    """``shapes`` of the dtypes whose reference speed is under the named card's peak: a faster one says
    the card is not the one named, or the shapes do not give the FLOPs — no yardstick; said as not judged."""
    reference = reference_speeds(shapes, spec["reference_share_min"])
    peak = pd.Series({dtype: peaks.get(dtype, np.nan) for dtype in reference.index}, dtype=float)
    unknown = reference[peak.isna()]
    implausible = reference[peak.notna() & ~(reference <= peak)]
    said = []
    if len(implausible):
        faster = ", ".join(f"{d} {v:.0f} TFLOP/s (peak {peak[d]:.0f})" for d, v in implausible.items())
        said.append(f"matmuls run faster than the named card's peak: {faster}")
    if len(unknown):  # no yardstick either: the card's profile gives no peak for that dtype
        said.append(f"the named card's profile gives no peak for {', '.join(unknown.index)}")
    if said:
        inputs.not_judging(FINDING, "; ".join(said))
    return shapes[~shapes["compute_dtype"].isin([*implausible.index, *unknown.index])]


def _finding(group: pd.DataFrame, ranks: list[int], spec: dict, claim: dict) -> Finding:
    """One kernel's slow shapes of one cause: their speed over all their calls against the reference."""
    first = group.iloc[0]
    flops = float((group["flops_per_call"] * group["call_count"]).sum())
    tflops = flops / float(group["duration_sum_us"].sum()) / 1e6
    ratio = tflops / float(first["reference_tflops"])
    identified = first["cause_kind"] != "unknown"
    fractal = spec["cube_fractal"]
    dims = sorted({d for shapes in group["input_shapes"] for d in off_fractal(shapes, fractal)})
    cause = fractal_words(dims, fractal) if first["cause_kind"] == "fractal" else first["cause"]
    roofline = pd.to_numeric(group["roofline_efficiency"], errors="coerce") if "roofline_efficiency" in group else None
    quoted = (
        ""
        if roofline is None or roofline.isna().all()
        else f" ({float(roofline.min()):.0%} of the card's sustained roof)"
    )
    return Finding(
        finding_type=FINDING,
        scope="operator",
        rank_ids=ranks,
        evidence_ids=list(dict.fromkeys(group["evidence_id"].astype(str))),
        statistic={
            "name": "speed over the capture's reference matmul",
            "value": ratio,
            "threshold": spec["speed_ratio_max"],
        },
        values={
            "name": first["name"],
            "shapes": " | ".join(group["input_shapes"].astype(str).head(3)) + (" | ..." if len(group) > 3 else ""),
            "dtype": first["compute_dtype"],
            "tflops": tflops,
            "reference_tflops": float(first["reference_tflops"]),
            "ratio": ratio,
            "calls": int(group["call_count"].sum()),
            "cause": cause,
            "roofline": quoted,
            "ranks": ", ".join(map(str, ranks)),
            "ms_per_step": claim["recoverable_ms_per_step"],
        },
        limitations=[
            "priced at the speed of the fastest heavy matmul shape of this capture, not at the card's roof",
            *([] if identified else ["no cause in the shape or dtype: compare its kernel's tiling and formats"]),
        ],
        confidence=None if identified else "low",
        **claim,
    )
