"""What each idle gap of a step is: a wait for the pipeline's neighbour stage, a dispatch gap between
kernels, or another long gap (kept by its anatomy window) — step_time_accounting's idle_by_gap rows,
which the step ledger's idle lines come from where no host trace names a cause."""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof import knowledge
from npuprof.pipeline.schema import AFTER_PREVIOUS_FORWARD

IDLE_BY_GAP = "idle_by_gap"  # the accounting breakdown of these rows


def idle_gap_names() -> dict:
    """The idle_by_gap rules: the gap length that splits waits from dispatch gaps, and their names."""
    return knowledge.load("summary_rules")["idle_by_gap"]


def idle_by_gap(
    inside: pd.DataFrame,
    event_of: np.ndarray,
    idle: np.ndarray,
    length: np.ndarray,
    windows: list[tuple[str, np.ndarray]],
) -> list[tuple[str, np.ndarray]]:
    """The idle stretches (each one gap between events: nothing starts or ends inside it) split by what
    they are: a gap of at least ``gap_min_us`` beside a PP send / recv (the event that ends as it starts,
    or starts as it ends) waits for the neighbour stage — the pipeline's bubble; a shorter gap is the
    device's dispatch gap between kernels, which no schedule removes; the other long gaps keep their
    anatomy window (``windows``: name, which stretches lie in it). (name, which stretches) per part; the
    parts of a step add up to its idle less its head. ``inside``: the events (is_comm, parallel_role) in
    boundary order's numbering (``event_of``: each boundary's event); ``length``: each stretch's ns."""
    rules = idle_gap_names()
    pipeline_op = inside["is_comm"].to_numpy(bool)
    if "parallel_role" in inside:
        pipeline_op = pipeline_op & (inside["parallel_role"].astype(object).to_numpy() == "PP")
    else:
        pipeline_op = np.zeros(len(inside), dtype=bool)
    beside = pipeline_op[event_of[:-1]] | pipeline_op[event_of[1:]]
    long = length >= float(rules["gap_min_us"]) * 1000.0
    neighbour = idle & long & beside
    parts = [(rules["pipeline"], neighbour), (rules["dispatch"], idle & ~long)]
    return parts + [(name, idle & long & ~beside & in_window) for name, in_window in windows]


def head_idle_name(steps: pd.DataFrame | None = None) -> str:
    """The idle window before a step's first event (from where the profiler started the step); for
    ``steps`` that are forwards each starting where the one before ended, the idle between forwards."""
    rules = knowledge.load("summary_rules")
    return rules["idle_between_forwards" if after_previous_forward(steps) else "idle_before_first_event"]


def after_previous_forward(steps: pd.DataFrame | None) -> bool:
    """Whether ``steps`` (one rank's step_segments) are forwards each starting where the one before
    ended (segment's ``forward_heads``: an inference capture without profiler steps)."""
    if steps is None or "start_source" not in steps:
        return False
    return bool((steps["start_source"] == AFTER_PREVIOUS_FORWARD).any())
