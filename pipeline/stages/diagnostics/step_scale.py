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
