"""The yardsticks a per-kernel finding measures its cost against (how many steps each rank captured, the
mean wall of a step), and what the two chain findings (unfused_op_pattern, fusible_op_sequence) share:
which kinds of chain cost enough, and the claim each makes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from npuprof.pipeline.stages.diagnostics.findings import priced
from npuprof.pipeline.stages.diagnostics.retiming import close_windows

if TYPE_CHECKING:
    from npuprof.pipeline.stages.diagnostics.context import DiagnosisContext


def steps_per_rank(steps: pd.DataFrame) -> pd.Series:
    """Per rank (step_summary rows), how many steps it captured: a cost summed over its calls ÷ this is
    per step."""
    return steps.groupby("rank_id")["step_ordinal"].nunique()


def mean_step_wall_ms(steps: pd.DataFrame) -> float:
    """The mean wall of the complete steps (of every step when none is complete): a rule's share of the
    step is a share of this."""
    complete = steps.loc[steps["complete"].astype(bool), "wall_ms"]
    return float(complete.mean() if len(complete) else steps["wall_ms"].mean())


def costly_chains(
    chains: pd.DataFrame, key: str, steps: pd.DataFrame, min_step_share: float
) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """Per value of ``key`` among ``chains`` (rows with rank_id, saved_us, span_us, fused_us: kernel runs
    one fused kernel would replace), its rows and, per rank, their µs per step — for the values whose
    mean saving per step over their ranks is at least ``min_step_share`` of the mean step wall."""
    step_count, least_ms = steps_per_rank(steps), min_step_share * mean_step_wall_ms(steps)
    costly = []
    for value, own in chains.groupby(key, sort=True):  # a loop over the chains' kinds
        per_step = own.groupby("rank_id")[["saved_us", "span_us", "fused_us"]].sum().div(step_count, axis=0).dropna()
        if float(per_step["saved_us"].mean()) / 1000.0 >= least_ms:
            costly.append((str(value), own, per_step))
    return costly


def chain_claim(
    inputs: DiagnosisContext,
    own: pd.DataFrame,
    per_step: pd.DataFrame,
    steps: pd.Series,
    windows: pd.DataFrame | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the chain findings say of one costly kind (``own``, ``per_step``: a row of costly_chains;
    ``steps``: steps per rank): the Finding's keywords every such claim shares — its ranks, the operator
    rows of the chains' first kernels, and the price (each chain shortened by its saving, the steps
    replayed; ``windows``, rows of rank_id, start_us, duration_us, place the saving kernel by kernel
    where a chain's kernels are not consecutive) — and the values they word (ms saved, calls, span and
    fused time per step, ranks)."""
    ranks = sorted(int(r) for r in per_step.index)
    operators = inputs.operators[
        inputs.operators["name"].isin(own["first_name"].unique()) & inputs.operators["rank_id"].isin(ranks)
    ]
    if windows is None:
        windows = own.assign(duration_us=own["saved_us"])
    claim = {
        "rank_ids": ranks,
        "evidence_ids": operators["evidence_id"].tolist(),
        **priced(inputs.step_model, close_windows(inputs.step_model, windows, kernels=True)),
    }
    values = {
        "saved_ms": float(per_step["saved_us"].mean()) / 1000.0,
        "per_step": float(own.groupby("rank_id").size().div(steps).dropna().mean()),
        "ranks": ", ".join(map(str, ranks)),
        "span_ms": float(per_step["span_us"].mean()) / 1000.0,
        "fused_ms": float(per_step["fused_us"].mean()) / 1000.0,
    }
    return claim, values
