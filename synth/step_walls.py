"""A rank's steps as the ground truth records them: each step's wall (from where it starts to its last
event's end) and, for a serving capture's forwards, each one's device span."""

from __future__ import annotations

import numpy as np

from npuprof.synth.timeline import RankTimeline


def _ends_ns(t: RankTimeline) -> np.ndarray:
    ends = np.full(len(t.step_start_ns), np.iinfo(np.int64).min)
    np.maximum.at(ends, t.step, t.start_ns + t.duration_ns)
    return ends


def _first_starts_ns(t: RankTimeline) -> np.ndarray:
    starts = np.full(len(t.step_start_ns), np.iinfo(np.int64).max)
    np.minimum.at(starts, t.step, t.start_ns)
    return starts


def _spans_us(starts: np.ndarray, ends: np.ndarray) -> list[float]:
    """Each step's µs from ``starts`` to ``ends`` (one each per step), steps without events left out."""
    return [round(float(e - s) / 1000, 3) for s, e in zip(starts, ends) if e > s]


def step_walls_us(t: RankTimeline, unmarked: bool) -> list[float]:
    """Each step's wall on this rank: from the step's start, as step_trace_time.csv has it; in a capture
    without profiler steps (``unmarked``) each forward's from the previous forward's end (the device's
    idle between them is the host readying this one), the first from its first kernel."""
    ends = _ends_ns(t)
    if not unmarked:
        return _spans_us(t.step_start_ns, ends)
    starts = _first_starts_ns(t)
    starts[1:] = np.minimum(starts[1:], ends[:-1])
    return _spans_us(starts, ends)


def device_spans_us(t: RankTimeline) -> list[float]:
    """Each step's device span on this rank: its first kernel's start to its last one's end."""
    return _spans_us(_first_starts_ns(t), _ends_ns(t))
