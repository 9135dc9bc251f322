"""What bounds an operator: the pipeline stage with the most time, its family, and its core
(reference §3.3, thresholds in knowledge/summary_rules.yaml). Vectorised over rows."""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
import pandas as pd

from npuprof import knowledge


class PipeFamilies(NamedTuple):
    """Per row of a (rows × pipeline stages) time array: ``values`` its times, 0 where not captured; ``code``
    the index in ``names`` (the families in name order, then ``mixed``) of the family with the most time;
    ``signal`` whether it has a pipeline signal at all."""

    values: np.ndarray
    code: np.ndarray
    names: np.ndarray
    signal: np.ndarray


def pipe_family_codes(times: np.ndarray) -> PipeFamilies:
    """``PipeFamilies`` of ``times`` (rows × the rules' stages, in their order; NaN where not captured): the
    family is ``mixed`` when the top two are within ``mixed_margin`` of the total. Families as codes, so a
    caller testing them never compares a text per row."""
    rules = knowledge.load("summary_rules")["bound"]
    stage_names = list(rules["stages"])
    missing = np.isnan(times)
    values = np.where(missing, 0.0, times)
    signal = ~missing.all(axis=1) & (values.sum(axis=1) > 0)
    families = sorted(set(rules["stages"].values()))
    columns_of = {f: [values[:, i] for i, s in enumerate(stage_names) if rules["stages"][s] == f] for f in families}
    family_time = [_added(columns_of[f]) for f in families]
    top, first, second = _top_two(family_time)
    total = _added(family_time)
    gap = (first - second) / np.where(total > 0, total, 1.0)
    code = np.where(gap < rules["mixed_margin"], len(families), top)
    return PipeFamilies(values, code, np.array([*families, "mixed"], dtype=object), signal)


def _added(columns: list[np.ndarray]) -> np.ndarray:
    """The columns' sum, added one after another: what NumPy's row sums of fewer than 8 columns give (its
    pairwise sum adds so few in order; tests/test_bound.py), without a reduction per row."""
    return functools.reduce(np.add, columns)


def _top_two(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of ``columns`` (at least two): the first column holding the largest value, that value and the
    second largest (equal to it on a tie) — a sort of each row's few values, done a column at a time."""
    top, first = np.zeros(len(columns[0]), dtype=np.intp), columns[0]
    second = np.full(len(first), -np.inf)
    for index, column in enumerate(columns[1:], start=1):  # a loop over the few families
        second = np.maximum(second, np.minimum(first, column))
        top = np.where(column > first, index, top)
        first = np.maximum(first, column)
    return top, first, second


def pipe_families(stages: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: (its stage times as a float array, 0 where not captured; the family of its pipeline
    stages with the most time — ``mixed`` when the top two are within ``mixed_margin`` of the total —;
    whether it has a pipeline signal at all). What a kernel's bound is judged by, before its op type
    overrides it (``bound_labels``)."""
    stage_names = list(knowledge.load("summary_rules")["bound"]["stages"])
    found = pipe_family_codes(stages.reindex(columns=stage_names).astype(float).to_numpy())
    return found.values, found.names[found.code], found.signal


def bound_labels(op_type: pd.Series, stages: pd.DataFrame) -> pd.DataFrame:
    """bound_stage, bound_family, dominant_core, pipeline_signal for each row.

    ``stages`` holds the 9 pipeline stage times (µs, null where not captured) per row, named as in
    the event table; ``op_type`` the row's op type. Communication, AI CPU and DSA rows are bound by
    their own kind; fused communication + AIV rows by their AIV stage.
    """
    rules = knowledge.load("summary_rules")["bound"]
    margin = rules["mixed_margin"]
    stage_names = list(rules["stages"])
    values, family, signal = pipe_families(stages)
    top_stage = np.array(stage_names, dtype=object)[values.argmax(axis=1)]

    aic = values[:, [stage_names.index(s) for s in rules["aic_stages"]]].sum(axis=1)
    aiv = values[:, [stage_names.index(s) for s in rules["aiv_stages"]]].sum(axis=1)
    larger = np.maximum(aic, aiv)
    close = np.abs(aic - aiv) / np.where(larger > 0, larger, 1.0) < margin
    core = np.where(
        aic == 0, "aiv", np.where(aiv == 0, "aic", np.where(close, "mix", np.where(aic > aiv, "aic", "aiv")))
    )

    labels = pd.DataFrame(
        {
            "bound_stage": np.where(signal, top_stage, "unknown"),
            "bound_family": np.where(signal, family, "unknown"),
            "dominant_core": np.where(signal, core, "none"),
            "pipeline_signal": signal,
        },
        index=stages.index,
    )
    kinds = op_type.map(rules["by_op_type"])
    own = kinds.notna().to_numpy()
    labels.loc[own, ["bound_stage", "bound_family"]] = np.column_stack([kinds[own], kinds[own]])
    labels.loc[own, "dominant_core"] = "none"
    fused = (op_type == "mix_comm_aiv").to_numpy()
    if fused.any():
        aiv_names = rules["aiv_stages"]
        aiv_values = values[fused][:, [stage_names.index(s) for s in aiv_names]]
        has_aiv = aiv_values.sum(axis=1) > 0
        labels.loc[fused, "bound_stage"] = np.where(
            has_aiv, np.array(aiv_names, dtype=object)[aiv_values.argmax(axis=1)], "communication"
        )
        labels.loc[fused, "bound_family"] = rules["comm_aiv_family"]
        labels.loc[fused, "dominant_core"] = np.where(has_aiv, "aiv", "none")
    return labels
