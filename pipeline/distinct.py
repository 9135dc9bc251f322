"""A Python function of a column, computed once per distinct value: shapes, names and types repeat
across the rows of a capture, so per-row Python would redo the same work thousands of times."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd


def map_distinct(values: pd.Series, fn: Callable[[Any], Any]) -> np.ndarray:
    """``fn(value)`` for every row of ``values`` (an object array), called once per distinct value;
    rows with equal values share the result object, so callers must not mutate it."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    results = np.empty(len(uniques), dtype=object)
    for index, value in enumerate(uniques):  # a loop over distinct values only
        results[index] = fn(value)
    return results[codes]


def first_rows(codes: np.ndarray, count: int) -> np.ndarray:
    """The first row of each group ``0 … count-1`` (``codes``: the group of each row)."""
    first = np.full(count, len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    return first
