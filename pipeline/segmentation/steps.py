"""Steps of one rank: from Step Id / STEP_TIME when the capture has them, else from structure.

A step is a contiguous window of the rank's events in device order. Edge steps with clearly
fewer events than the rank's typical step are partial captures (PARTIAL_CAPTURE_BOUNDARY). A step
starts where the profiler started it, before its first event when the export says when
(``profiler_heads``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from npuprof import knowledge
from npuprof.pipeline.segmentation.features import EventFeatures


@dataclass
class StepWindow:
    """One step: positions [start, end] in the rank's device-ordered events."""

    ordinal: int
    step_id: int | None
    start: int
    end: int
    source: str  # step_id | structure | whole_capture
    complete: bool = True
    tags: list[str] = field(default_factory=list)

    @property
    def event_count(self) -> int:
        return self.end - self.start + 1


def _runs(values: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of each run of equal consecutive values."""
    if len(values) == 0:
        return []
    change = np.flatnonzero(values[1:] != values[:-1]) + 1
    starts = np.concatenate(([0], change))
    ends = np.concatenate((change - 1, [len(values) - 1]))
    return list(zip(starts.tolist(), ends.tolist()))


def step_windows(
    step_ids: np.ndarray, features: EventFeatures, training: bool
) -> tuple[list[StepWindow], list[tuple[int, int]]]:
    """Step windows and the interior islands (events between steps that belong to none).

    ``step_ids`` is float with NaN where the capture marks no step.
    """
    n = len(step_ids)
    islands: list[tuple[int, int]] = []
    if n == 0:
        return [], islands
    has_id = ~np.isnan(step_ids)
    if has_id.any():
        windows = []
        filled = np.where(has_id, step_ids, -1.0)
        for start, end in _runs(filled):
            if filled[start] < 0:
                continue
            windows.append(StepWindow(len(windows), int(filled[start]), start, end, "step_id"))
        first, last = windows[0].start, windows[-1].end
        islands = [(s, e) for s, e in _runs(filled) if filled[s] < 0 and s > first and e < last]
    else:
        windows = _structural_steps(features, training)
    _mark_partial(windows)
    return windows, islands


def _structural_steps(features: EventFeatures, training: bool) -> list[StepWindow]:
    """No step marks: a step ends after each run of terminator kernels (sampling / optimizer)."""
    rules = knowledge.load("segmentation_rules")["step_terminators"]
    roles = rules["training_roles"] if training else rules["inference_roles"]
    terminator = np.zeros(len(features.kernel_key), dtype=bool)
    for role in roles:
        terminator |= features.role_flags.get(role, np.zeros_like(terminator))
    n = len(terminator)
    ends = [e for s, e in _runs(terminator.astype(np.int8)) if terminator[s]]
    if not ends:
        return [StepWindow(0, None, 0, n - 1, "whole_capture", complete=True, tags=["NO_STEP_MARKS"])]
    windows, start = [], 0
    for end in ends:
        windows.append(StepWindow(len(windows), None, start, end, "structure"))
        start = end + 1
    if start <= n - 1:
        windows.append(StepWindow(len(windows), None, start, n - 1, "structure"))
    return windows


def _mark_partial(windows: list[StepWindow]) -> None:
    rules = knowledge.load("segmentation_rules")["partial_capture"]
    if len(windows) < rules["min_steps"]:
        return
    counts = np.array([w.event_count for w in windows])
    for edge in {0, len(windows) - 1}:
        others = np.delete(counts, edge)
        if counts[edge] < rules["max_event_share"] * float(np.median(others)):
            windows[edge].complete = False
            windows[edge].tags.append("PARTIAL_CAPTURE_BOUNDARY")


def profiler_heads(steps: pd.DataFrame, starts: pd.DataFrame) -> np.ndarray:
    """Per step of ``steps`` (step_segments rows by ordinal: step_id, start_ns and end_ns of its events):
    the ns from where the profiler started it to its first event (``starts``: step_id with start_ns or
    preparing_ns, ``profiler_step_starts``). Never negative and never back into the rank's previous
    step (a host that runs ahead starts step N+1 while the device still runs step N: the device's step
    starts when it is free); 0 where the profiler's start is unknown."""
    first = steps["start_ns"].to_numpy(np.int64)
    head = np.zeros(len(steps), dtype=np.int64)
    if not len(starts) or not len(steps):
        return head
    by_id = starts.drop_duplicates("step_id").set_index("step_id")
    preparing = "preparing_ns" in by_id  # else start_ns: when the profiler started the step
    found = steps["step_id"].map(by_id["preparing_ns" if preparing else "start_ns"])
    known = found.notna().to_numpy()
    recorded = found[known].to_numpy(np.int64)
    head[known] = recorded if preparing else first[known] - recorded
    previous_end = np.concatenate([[np.iinfo(np.int64).min // 2], steps["end_ns"].to_numpy(np.int64)[:-1]])
    return np.clip(np.minimum(head, first - previous_end), 0, None)
