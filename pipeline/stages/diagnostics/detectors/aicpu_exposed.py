"""aicpu_exposed: AI CPU ops that run with almost no AI core work beside them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from npuprof.pipeline import schema
from npuprof.pipeline.io import int_ranks
from npuprof.pipeline.kernel_categories import AICORE_OP_TYPES
from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, priced, rule
from npuprof.pipeline.stages.diagnostics.registry import derived_input, detector
from npuprof.pipeline.stages.diagnostics.retiming import close_windows

if TYPE_CHECKING:
    from npuprof.pipeline.stages.base import RootContext


def masked_time_ns(aicpu: pd.DataFrame, busy: pd.DataFrame) -> np.ndarray:
    """For each AI CPU interval (start_ns, end_ns), the ns of it that AI core work overlaps.

    ``busy`` are the AI core intervals of the same rank; their union is built once (sorted starts,
    running max of ends), then each AI CPU interval is measured against it with sorted searches and
    prefix sums — no loop over events.
    """
    if aicpu.empty or busy.empty:
        return np.zeros(len(aicpu))
    order = np.argsort(busy["start_ns"].to_numpy(), kind="stable")
    starts = busy["start_ns"].to_numpy()[order]
    ends = np.maximum.accumulate(busy["end_ns"].to_numpy()[order])
    new = np.r_[True, starts[1:] > ends[:-1]]
    union_start = starts[new]
    union_end = np.r_[ends[np.flatnonzero(new)[1:] - 1], ends[-1]]
    covered = np.r_[0, np.cumsum(union_end - union_start)]

    def covered_until(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(union_start, t, side="right")
        inside = np.clip(t - union_start[np.maximum(k - 1, 0)], 0, None)
        partial = np.where(k > 0, np.minimum(inside, (union_end - union_start)[np.maximum(k - 1, 0)]), 0)
        return covered[np.maximum(k - 1, 0)] * (k > 0) + partial

    a, b = aicpu["start_ns"].to_numpy(), aicpu["end_ns"].to_numpy()
    return covered_until(b) - covered_until(a)


def _any_aicpu_operator(ctx: RootContext) -> bool:
    """Whether any rank ran an AI CPU op (from the operator summaries, a row per kernel; a root
    written without them is scanned)."""
    if not (ctx.out_dir / schema.OPERATOR_SUMMARY).exists():
        return True
    aicpu = ctx.read_table(schema.OPERATOR_SUMMARY, columns=["op_type"], filter=pc.field("op_type") == "aicpu")
    return aicpu.num_rows > 0


@derived_input("aicpu_exposure")
def aicpu_exposure(ctx: RootContext) -> pd.DataFrame:
    """Per AI CPU op instance: rank_id, name, start_us, its time and the part AI core work on the rank
    overlaps."""
    columns = ["rank_id", "name", "start_us", "duration_us", "masked_us"]
    if not (ctx.out_dir / schema.NORMALIZED_EVENTS).exists() or not _any_aicpu_operator(ctx):
        return pd.DataFrame(columns=columns)  # most roots: no AI CPU op, so no scan of every event
    events = int_ranks(
        ctx.read_table(
            schema.NORMALIZED_EVENTS,
            columns=["name", "op_type", "start_ns", "end_ns"],
            filter=pc.field("op_type").isin(["aicpu", *AICORE_OP_TYPES]),
        ).to_pandas()
    )
    if not (events["op_type"] == "aicpu").any():
        return pd.DataFrame(columns=columns)
    parts = []
    for rank, own in events.groupby("rank_id"):  # a loop over ranks
        aicpu = own[own["op_type"] == "aicpu"]
        parts.append(
            pd.DataFrame(
                {
                    "rank_id": rank,
                    "name": aicpu["name"].to_numpy(),
                    "start_us": aicpu["start_ns"].to_numpy() / 1000.0,
                    "duration_us": (aicpu["end_ns"] - aicpu["start_ns"]).to_numpy() / 1000.0,
                    "masked_us": masked_time_ns(aicpu, own[own["op_type"] != "aicpu"]) / 1000.0,
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


@detector(
    finding_types=("aicpu_exposed",),
    reads={"aicpu_exposure": (), "operators": ("rank_id", "name", "op_type", "evidence_id"), "step_model": ()},
)
def aicpu_exposed(inputs: DiagnosisContext) -> list[Finding]:
    """AI CPU ops that run with almost no AI core work beside them, per op name over ranks."""
    spec = rule("aicpu_exposed")
    exposure = inputs.aicpu_exposure
    if exposure.empty:
        return []
    per_op = exposure.groupby(["name"]).agg(duration_us=("duration_us", "sum"), masked_us=("masked_us", "sum"))
    per_op["masked_ratio"] = per_op["masked_us"] / per_op["duration_us"].where(per_op["duration_us"] > 0)
    per_op["exposed_us"] = per_op["duration_us"] - per_op["masked_us"]
    flagged = per_op[
        (per_op["masked_ratio"] < spec["masked_ratio_max"]) & (per_op["exposed_us"] >= spec["min_exposed_us"])
    ]
    findings = []
    for name, row in flagged.iterrows():  # a loop over flagged AI CPU op names
        instances = exposure[exposure["name"] == name]
        ranks = sorted(instances["rank_id"].unique().tolist())
        exposed = instances.assign(duration_us=instances["duration_us"] - instances["masked_us"])
        ops = inputs.operators[(inputs.operators["name"] == name) & (inputs.operators["op_type"] == "aicpu")]
        findings.append(
            Finding(
                finding_type="aicpu_exposed",
                scope="operator",
                rank_ids=ranks,
                evidence_ids=ops["evidence_id"].tolist(),
                statistic={
                    "name": "masked_ratio",
                    "value": float(row["masked_ratio"]),
                    "threshold": spec["masked_ratio_max"],
                },
                values={
                    "name": name,
                    "ranks": ", ".join(map(str, ranks)),
                    "exposed_ms": float(row["exposed_us"]) / 1000.0,
                    "masked": float(row["masked_ratio"]),
                },
                limitations=["masking is measured against AI core kernels on any stream of the same rank"],
                # the op off the device's critical path: each instance's exposed part removed, replayed
                **priced(inputs.step_model, close_windows(inputs.step_model, exposed, kernels=True)),
            )
        )
    return findings
