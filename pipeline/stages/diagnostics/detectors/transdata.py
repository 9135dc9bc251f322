"""transdata_heavy: layout conversions (TransData: ND -> FRACTAL_NZ, NCHW -> NC1HWC0, ...) that run in every
step, where a weight cast to its compute format once ahead (at load) or a tensor kept in one format between
its ops would leave nothing to convert.

A conversion is a TransData call inside a step (``kernel_calls``: the rules list the kernel type); its
kind is its first input's format -> its first output's. A kind is a finding when its calls cost the rule's
share of the step, priced by the replay with each call removed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext
from npuprof.pipeline.stages.diagnostics.findings import Finding, rule
from npuprof.pipeline.stages.diagnostics.registry import detector
from npuprof.pipeline.stages.diagnostics.step_scale import chain_claim, costly_chains, mean_step_wall_ms, steps_per_rank

FINDING = "transdata_heavy"


def conversions(calls: pd.DataFrame) -> pd.DataFrame:
    """One row per conversion call (``kernel_calls`` rows) as costly_chains and chain_claim read a chain:
    its kind (``conversion``), its first input's shape, its time, all of it saved (nothing replaces it)."""
    kernel_us = (calls["end_ns"].to_numpy(np.int64) - calls["start_ns"].to_numpy(np.int64)) / 1000.0

    def first(column: str) -> pd.Series:
        return calls[column].fillna("").astype(str).str.split(";").str[0].str.strip('"')

    fmt_in, fmt_out = first("input_formats").replace("", "?"), first("output_formats").replace("", "?")
    return pd.DataFrame(
        {
            "rank_id": calls["rank_id"].to_numpy(),
            "conversion": (fmt_in + " → " + fmt_out).to_numpy(object),
            "first_name": calls["name"].to_numpy(object),
            "shape": first("input_shapes").to_numpy(object),
            "start_us": calls["start_ns"].to_numpy(np.int64) / 1000.0,
            "span_us": kernel_us,
            "kernel_us": kernel_us,
            "fused_us": 0.0,
            "saved_us": kernel_us,
        }
    )


@detector(
    finding_types=(FINDING,),
    reads={
        "kernel_calls": (),
        "steps": ("rank_id", "step_ordinal", "complete", "wall_ms"),
        "operators": ("rank_id", "name", "evidence_id"),
        "step_model": (),
    },
)
def transdata_heavy(inputs: DiagnosisContext) -> list[Finding]:
    """One finding per conversion kind whose calls cost the rule's share of the step, over the ranks that
    run them."""
    spec, steps = rule(FINDING), inputs.steps
    calls = inputs.kernel_calls
    calls = calls[calls["type"].isin(spec["kernel_types"])]
    if calls.empty or steps.empty:
        return []
    threshold_ms = spec["min_step_share"] * mean_step_wall_ms(steps)
    return [
        _finding(inputs, kind, own, per_step, steps_per_rank(steps), threshold_ms)
        for kind, own, per_step in costly_chains(conversions(calls), "conversion", steps, spec["min_step_share"])
    ]


def _finding(
    inputs: DiagnosisContext, kind: str, own: pd.DataFrame, per_step: pd.DataFrame, steps: pd.Series, least_ms: float
) -> Finding:
    """The finding of one conversion kind's calls (``own``; ``per_step``: per rank, their µs per step)."""
    claim, worded = chain_claim(inputs, own, per_step, steps)
    saved_ms = worded.pop("saved_ms")
    shapes = own["shape"].value_counts()
    return Finding(
        finding_type=FINDING,
        scope="operator",
        statistic={"name": "transdata_ms_per_step", "value": saved_ms, "threshold": least_ms},
        values={
            "conversion": kind,
            **worded,
            "shapes": ", ".join(f"[{shape}]" for shape in shapes.index[:3])
            + (f" and {len(shapes) - 3} more" if len(shapes) > 3 else ""),
        },
        limitations=[
            "priced as if every call could go: a conversion whose next op needs the other format stays unless "
            "the tensor is kept in that format"
        ],
        **claim,  # each call removed, the steps replayed
    )
