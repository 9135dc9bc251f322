"""Is a delta a change? Mann-Whitney U on per-instance times, and a move beyond both sides' spread."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import mannwhitneyu

from npuprof import knowledge


@dataclass(frozen=True)
class Change:
    base_median: float
    new_median: float
    delta: float  # new − base (median)
    ratio: float | None  # new / base (median)
    p_value: float | None
    significant: bool


def robust_spread(values: np.ndarray) -> float:
    """1.4826 × the median absolute deviation (0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    return float(1.4826 * np.median(np.abs(values - np.median(values))))


def change(base: np.ndarray, new: np.ndarray) -> Change:
    """The median move from ``base`` to ``new`` instances and whether it is a change (rules in
    knowledge/compare_rules.yaml: MWU p < alpha, |Δ| beyond both spreads and min_relative_change)."""
    rules = knowledge.load("compare_rules")
    base, new = np.asarray(base, dtype=float), np.asarray(new, dtype=float)
    b, n = float(np.median(base)), float(np.median(new))
    delta = n - b
    p = None
    if len(base) >= 2 and len(new) >= 2 and not (np.all(base == base[0]) and np.all(new == base[0])):
        p = float(mannwhitneyu(base, new, alternative="two-sided").pvalue)
    beyond = abs(delta) > max(robust_spread(base), robust_spread(new)) and abs(delta) > rules[
        "min_relative_change"
    ] * abs(b)
    return Change(b, n, delta, n / b if b else None, p, bool(p is not None and p < rules["alpha"] and beyond))
