"""Time metrics of windows of a rank's device-ordered events (steps, layers, blocks), vectorised.

For each window: wall (last end − first start), busy (the union of its kernels' intervals), the
idle gaps between busy stretches (bubbles), kernel and wait sums. Windows are position ranges
[start, end] in the device order; they may nest or leave gaps between them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from npuprof.pipeline import schema


def window_reduce(ufunc: np.ufunc, values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``ufunc`` over each window [start, end] of ``values`` in one vectorised ``reduceat``.

    Windows need not touch (interludes lie between layers): the reduction runs over interleaved
    [start, end + 1) bounds on a copy padded with one element, and every other result is kept.
    """
    if len(starts) == 0:  # no windows (a rank without layers): nothing to read, even of no values
        return np.empty(0, dtype=np.asarray(values).dtype)
    padded = np.append(values, values[-1])
    bounds = np.empty(2 * len(starts), dtype=np.int64)
    bounds[0::2] = starts
    bounds[1::2] = ends + 1
    return ufunc.reduceat(padded, bounds)[0::2]


def window_evidence(
    starts: np.ndarray, ends: np.ndarray, row_idx: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray
) -> dict[str, np.ndarray]:
    """Evidence anchors of windows [start, end] (positions): the source rows and exact times they
    span, and the same times as float µs for people (``schema.WINDOW_EVIDENCE``)."""
    if len(starts) == 0:
        empty = np.array([], dtype=np.int64)
        return {
            "row_start": empty,
            "row_end": empty,
            "start_ns": empty,
            "end_ns": empty,
            "start_us": empty.astype(float),
            "end_us": empty.astype(float),
        }
    evidence = {
        "row_start": window_reduce(np.minimum, row_idx, starts, ends),
        "row_end": window_reduce(np.maximum, row_idx, starts, ends),
        "start_ns": window_reduce(np.minimum, start_ns, starts, ends),
        "end_ns": window_reduce(np.maximum, end_ns, starts, ends),
    }
    evidence["start_us"] = evidence["start_ns"] / 1000.0
    evidence["end_us"] = evidence["end_ns"] / 1000.0
    return evidence


def _segmented_cummax(values: np.ndarray, window_of: np.ndarray, firsts: np.ndarray) -> np.ndarray:
    """The running maximum of ``values`` restarted at every window (``firsts``: each window's first
    index; windows are contiguous and in order). Each window is lifted above every earlier one, so
    one ``np.maximum.accumulate`` never carries a maximum across a window edge."""
    base = np.minimum.reduceat(values, firsts)[window_of]
    relative = values - base
    span = int(relative.max()) + 1
    result = np.empty_like(values)
    per_chunk = max(1, (1 << 62) // span)  # windows per accumulate that cannot overflow int64
    window_count = len(firsts)
    for first_window in range(0, window_count, per_chunk):  # one chunk unless walls are astronomically long
        last_window = min(first_window + per_chunk, window_count)
        lo = firsts[first_window]
        hi = firsts[last_window] if last_window < window_count else len(values)
        lift = (window_of[lo:hi] - first_window).astype(np.int64) * span
        result[lo:hi] = np.maximum.accumulate(relative[lo:hi] + lift) - lift
    return result + base


def window_metrics(
    starts: np.ndarray,
    ends: np.ndarray,
    start_ns: np.ndarray,
    end_ns: np.ndarray,
    wait_ns: np.ndarray,
    bubble_min_ns: int,
) -> pd.DataFrame:
    """Metrics for windows [starts[i], ends[i]] (positions, inclusive); times in ms."""
    columns = list(schema.WINDOW_METRIC_COLUMNS)
    if len(starts) == 0:
        return pd.DataFrame(columns=columns)
    positions, window_of = window_positions(starts, ends)
    firsts = np.concatenate(([0], np.cumsum(np.asarray(ends, np.int64) - starts + 1)[:-1]))
    s = start_ns[positions]
    e = end_ns[positions]
    # the running latest end before each event, restarted at every window: a gap is start - that
    # (in float64 like the rest of the table's times)
    previous_end = np.empty(len(e), dtype=np.float64)
    previous_end[1:] = _segmented_cummax(e, window_of, firsts)[:-1]
    gap = np.maximum(s.astype(np.float64) - previous_end, 0.0)
    gap[firsts] = 0.0
    bubble = np.where(gap >= bubble_min_ns, gap, 0.0)
    # a window ends where its events end, but not past the start of the event after it: an op running on
    # another stream beyond the window (a gradient bucket's all-reduce under the next layers) is theirs
    following = np.append(start_ns, np.iinfo(np.int64).max)[np.asarray(ends, np.int64) + 1]
    last_end = np.minimum(np.maximum.reduceat(e, firsts), np.maximum(following, np.maximum.reduceat(s, firsts)))
    wall = last_end - np.minimum.reduceat(s, firsts)
    gaps = np.add.reduceat(gap, firsts)
    wall_ms = wall / 1e6
    out = pd.DataFrame(
        {
            "wall_ms": wall_ms,
            "busy_ms": (wall - gaps) / 1e6,
            "underfeed_ms": gaps / 1e6,
            "kernel_sum_ms": np.add.reduceat(e - s, firsts) / 1e6,
            "wait_sum_ms": np.add.reduceat(wait_ns[positions], firsts) / 1e6,
            "internal_bubble_total_ms": np.add.reduceat(bubble, firsts) / 1e6,
            "largest_internal_bubble_ms": np.maximum.reduceat(bubble, firsts) / 1e6,
            "bubble_count": np.add.reduceat((bubble > 0).astype(np.int64), firsts),
        }
    )
    out["underfeed_ratio"] = np.where(wall_ms > 0, out["underfeed_ms"] / np.where(wall_ms > 0, wall_ms, 1), 0.0)
    return out[columns]


def window_positions(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(every position inside the windows [start, end], the index of the window it belongs to):
    concatenated aranges without a Python loop."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(ends, dtype=np.int64) - starts + 1
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return np.arange(int(lengths.sum())) + offsets, np.repeat(np.arange(len(starts)), lengths)
