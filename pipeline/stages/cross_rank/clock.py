"""Each rank's clock offset, from collective end times.

A collective completes together on all its members (whoever arrived first waits for the last), so
on a common clock the member end times agree; what remains is the offset between rank clocks. The
model ``end[rank, instance] = offset[rank] + common_end[instance] + noise`` is fitted by alternating
medians (robust to the odd late completion), and offsets are reported relative to the median rank
of each group of connected ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

ITERATIONS = 30
CONVERGED_NS = 10.0


@dataclass(frozen=True)
class ClockFit:
    """Offsets (ns, by rank; subtract from a rank's times for the common clock) and how well they fit."""

    offsets_ns: pd.Series
    residual_us: float  # median |end - offset - common end| over matched instances
    instance_count: int  # matched instances the fit used


def _centred(offsets: pd.Series, components: pd.Series) -> pd.Series:
    median = offsets.groupby(components.reindex(offsets.index)).transform("median")
    return offsets - median


def clock_offsets(instances: pd.DataFrame, components: pd.Series) -> ClockFit:
    """Fit offsets from instances with ≥ 2 members (columns alignment_id, rank_id, end_ns)."""
    matched = instances[instances["member_count"] >= 2]
    ranks = np.sort(instances["rank_id"].unique())
    if matched.empty:
        return ClockFit(pd.Series(0.0, index=ranks), float("nan"), 0)
    base = int(matched["end_ns"].min())
    ends = (matched["end_ns"] - base).astype(np.float64).to_numpy()  # float64 holds ns after the shift
    rank = matched["rank_id"].to_numpy()
    instance = pd.factorize(matched["alignment_id"])[0]
    offsets = pd.Series(0.0, index=ranks)
    for _ in range(ITERATIONS):
        common = pd.Series(ends - offsets.reindex(rank).to_numpy()).groupby(instance).median().to_numpy()
        residual = pd.Series(ends - common[instance])
        fitted = residual.groupby(rank).median().reindex(ranks).fillna(0.0)
        fitted = _centred(fitted, components)
        moved = float((fitted - offsets).abs().max())
        offsets = fitted
        if moved < CONVERGED_NS:
            break
    common = pd.Series(ends - offsets.reindex(rank).to_numpy()).groupby(instance).median().to_numpy()
    spread = np.abs(ends - offsets.reindex(rank).to_numpy() - common[instance])
    return ClockFit(offsets, float(np.median(spread)) / 1000.0, int(matched["alignment_id"].nunique()))
