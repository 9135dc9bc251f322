"""Steps of one rank: from Step Id / STEP_TIME when the capture has them, else from structure.

A step is a contiguous window of the rank's events in device order. Edge steps with clearly
fewer events than the rank's typical step are partial captures (PARTIAL_CAPTURE_BOUNDARY). A step
starts where the profiler started it, before its first event when the export says when
(``profiler_heads``); an inference rank's forward found from structure, where its previous forward
ended (``forward_heads``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from npuprof import knowledge
from npuprof.pipeline.schema import AFTER_PREVIOUS_FORWARD
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


def _rows_text(rows: np.ndarray) -> str:
    return f"row {rows[0]}" if len(rows) == 1 else f"rows {rows.min()}–{rows.max()}"


def _relabelled(step_ids: np.ndarray, row_idx: np.ndarray, most: int) -> tuple[np.ndarray, list[str]]:
    """Short runs of one step id between two runs of another (a row relabelled: it ran inside that step)
    given their neighbours' id."""
    fixed, notes = step_ids.copy(), []
    runs = _runs(np.where(np.isnan(step_ids), -1.0, step_ids))
    for (_, before), (start, end), (after, _) in zip(runs, runs[1:], runs[2:]):
        around, inside = step_ids[before], step_ids[start]
        if end - start + 1 <= most and around == step_ids[after] and not np.isnan(around) and around != inside:
            fixed[start : end + 1] = around
            notes.append(
                f"{_rows_text(row_idx[start : end + 1])} labelled step {inside:g} ran inside step {around:g}: "
                f"counted in step {around:g}"
            )
    return fixed, notes


def _strays(step_ids: np.ndarray, start_ns: np.ndarray, rules: dict) -> tuple[np.ndarray, np.ndarray]:
    """Rows separated from the rest of the rank by a gap far longer than its steps (a clock jump, a
    corrupt timestamp): (a few rows on the small side of such a gap; the rows beyond one whose step's
    other rows lie in the rank's main stretch — a step does not straddle such a gap, so its far rows'
    times are corrupt however many they are)."""
    order = np.argsort(start_ns, kind="stable")
    times = start_ns[order]
    runs = [(s, e) for s, e in _runs(np.where(np.isnan(step_ids), -1.0, step_ids)) if not np.isnan(step_ids[s])]
    if len(times) < 2 or not runs:
        return np.zeros(len(step_ids), dtype=bool), np.zeros(len(step_ids), dtype=bool)
    spans = [float(start_ns[s : e + 1].max() - start_ns[s : e + 1].min()) for s, e in runs]
    rows_per_step = float(np.median([e - s + 1 for s, e in runs]))
    threshold = max(rules["min_gap_s"] * 1e9, rules["gap_steps"] * float(np.median(spans)))
    cluster = np.concatenate(([0], np.cumsum(np.diff(times) > threshold)))
    sizes = np.bincount(cluster)
    small = (sizes < rules["max_stray_share"] * len(times)) & (sizes < rows_per_step / 2)
    stray = np.zeros(len(step_ids), dtype=bool)
    stray[order] = small[cluster]
    cluster_of = np.empty(len(step_ids), dtype=np.int64)
    cluster_of[order] = cluster
    main = cluster_of == int(np.argmax(sizes))
    steps_in_main = np.unique(step_ids[main & ~np.isnan(step_ids)])
    split = ~main & ~stray & np.isin(step_ids, steps_in_main)
    return stray, split


def quarantine_step_ids(
    step_ids: np.ndarray, start_ns: np.ndarray, row_idx: np.ndarray
) -> tuple[np.ndarray, list[str], set[int]]:
    """Step ids with the rows that contradict the capture fixed or left out (NaN), a note for each, and
    the steps that lost rows: a row relabelled with another step's id inside a step is counted in that
    step; rows a huge gap separates from the rest belong to no step (they would stretch one to hours of
    idle, or make a second, phantom copy of their step); a step that lost some is no complete step."""
    step_ids = np.asarray(step_ids, dtype=float)
    if len(step_ids) == 0 or np.isnan(step_ids).all():
        return step_ids, [], set()
    rules = knowledge.load("segmentation_rules")["quarantine"]
    fixed, notes = _relabelled(step_ids, row_idx, int(rules["max_relabelled_rows"]))
    stray, split = _strays(fixed, start_ns, rules)
    if stray.any():
        notes.append(
            f"{int(stray.sum())} rows ({_rows_text(row_idx[stray])}) start more than "
            f"{rules['min_gap_s']} s away from the rest of the rank: left out of every step (a clock jump or a "
            "corrupt timestamp)"
        )
    damaged = {int(step) for step in np.unique(fixed[split])}
    for step in sorted(damaged):
        rows = split & (fixed == step)
        notes.append(
            f"{int(rows.sum())} rows of step {step} ({_rows_text(row_idx[rows])}) start more than "
            f"{rules['min_gap_s']} s away from the rest of their step: left out of every step (a corrupt "
            f"timestamp), and step {step} is not counted as complete"
        )
    return np.where(stray | split, np.nan, fixed), notes, damaged


def step_windows(
    step_ids: np.ndarray, features: EventFeatures, training: bool, damaged: set[int] = frozenset()
) -> tuple[list[StepWindow], list[tuple[int, int]]]:
    """Step windows and the interior islands (events between steps that belong to none).

    ``step_ids`` is float with NaN where the capture marks no step; ``damaged``: the steps that lost rows
    to the quarantine (``quarantine_step_ids``), no complete steps.
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
    _mark_rows_left_out(windows, damaged)
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


def _mark_rows_left_out(windows: list[StepWindow], damaged: set[int]) -> None:
    """Each step that lost rows to the quarantine (``quarantine_step_ids``) is no complete step."""
    for window in windows:
        if window.step_id in damaged:
            window.complete = False
            window.tags.append("ROWS_LEFT_OUT")


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


def forward_heads(steps: pd.DataFrame) -> pd.DataFrame:
    """``steps`` (an inference rank's forwards found from structure, by ordinal) each starting where the
    rank's previous forward ended: no profiler step starts a forward, and the device's idle between two
    forwards is the host's turn — the next batch scheduled, its inputs prepared and copied, the previous
    one's tokens sampled — which belongs to the forward it readies, as a training step's head holds its
    batch's loading. head_ms is that idle; the first forward starts at its first kernel."""
    first = steps["start_ns"].to_numpy(np.int64)
    previous_end = np.concatenate([first[:1], steps["end_ns"].to_numpy(np.int64)[:-1]])
    head = np.clip(first - previous_end, 0, None)
    start_ns = first - head
    return steps.assign(
        start_ns=start_ns,
        start_us=start_ns / 1000.0,
        head_ms=head / 1e6,
        start_source=np.where(np.arange(len(steps)) > 0, AFTER_PREVIOUS_FORWARD, None),
    )
