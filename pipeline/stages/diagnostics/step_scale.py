"""The yardsticks a per-kernel finding measures its cost against: how many steps each rank captured and
the mean wall of a step."""

from __future__ import annotations

import pandas as pd


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
