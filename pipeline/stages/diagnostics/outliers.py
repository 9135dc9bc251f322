"""Which member of each collective instance is a low outlier (arrived last, so waited least).

Dixon's Q for small groups (the vendor's slow_rank uses it too), a robust z-score (median and MAD)
for larger ones. Instances are tested all at once: members are pivoted into one row per instance.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

MAD_TO_SIGMA = 1.4826
RESULT_COLUMNS = ["alignment_id", "rank_id", "statistic", "threshold", "test", "gap", "outlier"]


def low_outliers(values: pd.DataFrame, q_critical: dict[int, float], z_min: float, min_gap: float) -> pd.DataFrame:
    """Per instance (rows of ``values``: alignment_id, rank_id, value), the low-outlier member, if any.

    Returns one row per tested instance: alignment_id, rank_id (the lowest member), statistic,
    threshold, test ('dixon_q' | 'robust_z'), outlier (bool), gap (others' median − lowest value).
    """
    wide = values.pivot_table(index="alignment_id", columns="rank_id", values="value", aggfunc="first")
    # only instances of 3+ members are tested: the statistics of smaller ones would be NaN medians
    wide = wide[wide.notna().sum(axis=1) >= 3]
    if wide.empty:
        return pd.DataFrame(columns=RESULT_COLUMNS)
    counts = wide.notna().sum(axis=1).to_numpy()
    ordered = np.sort(wide.to_numpy(dtype=np.float64), axis=1)  # NaN sort last
    lowest_rank = wide.columns.to_numpy()[np.nanargmin(np.where(wide.notna(), wide.to_numpy(float), np.inf), axis=1)]
    rows = np.arange(len(wide))
    low = ordered[:, 0]
    second = ordered[:, 1]  # every tested instance has 3+ members
    high = ordered[rows, counts - 1]
    span = high - low
    q = np.where(span > 0, (second - low) / np.where(span > 0, span, 1.0), 0.0)
    median = np.nanmedian(ordered, axis=1)
    mad = np.nanmedian(np.abs(ordered - median[:, None]), axis=1) * MAD_TO_SIGMA
    z = np.where(mad > 0, (median - low) / np.where(mad > 0, mad, 1.0), np.where(median > low, np.inf, 0.0))
    dixon = counts <= max(q_critical)
    critical = np.array([q_critical.get(int(n), np.nan) for n in counts])
    statistic = np.where(dixon, q, z)
    threshold = np.where(dixon, critical, z_min)
    gap = np.nanmedian(ordered[:, 1:], axis=1) - low
    result = pd.DataFrame(
        {
            "alignment_id": wide.index.to_numpy(),
            "rank_id": lowest_rank,
            "statistic": statistic,
            "threshold": threshold,
            "test": np.where(dixon, "dixon_q", "robust_z"),
            "gap": gap,
        }
    )
    result["outlier"] = (result["statistic"] > result["threshold"]) & (result["gap"] >= min_gap)
    return result.reset_index(drop=True)
