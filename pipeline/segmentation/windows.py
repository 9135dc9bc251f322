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
    s = start_ns[positions]
    e = end_ns[positions]
    frame = pd.DataFrame({"w": window_of, "s": s, "e": e, "dur": e - s, "wait": wait_ns[positions]})
    # the running latest end before each event, reset at every window: a gap is start - that
    frame["prev_end"] = frame.groupby("w")["e"].cummax().groupby(frame["w"]).shift(1)
    gap = (frame["s"] - frame["prev_end"]).clip(lower=0).fillna(0)
    frame["gap"] = gap
    frame["bubble"] = gap.where(gap >= bubble_min_ns, 0)
    grouped = frame.groupby("w")
    wall = grouped["e"].max() - grouped["s"].min()
    gaps = grouped["gap"].sum()
    out = pd.DataFrame(
        {
            "wall_ms": wall / 1e6,
            "busy_ms": (wall - gaps) / 1e6,
            "underfeed_ms": gaps / 1e6,
            "kernel_sum_ms": grouped["dur"].sum() / 1e6,
            "wait_sum_ms": grouped["wait"].sum() / 1e6,
            "internal_bubble_total_ms": grouped["bubble"].sum() / 1e6,
            "largest_internal_bubble_ms": grouped["bubble"].max() / 1e6,
            "bubble_count": (frame["bubble"] > 0).groupby(frame["w"]).sum(),
        }
    )
    out["underfeed_ratio"] = np.where(
        out["wall_ms"] > 0, out["underfeed_ms"] / out["wall_ms"].where(out["wall_ms"] > 0, 1), 0.0
    )
    return out[columns].reset_index(drop=True)


def window_positions(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(every position inside the windows [start, end], the index of the window it belongs to):
    concatenated aranges without a Python loop."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(ends, dtype=np.int64) - starts + 1
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return np.arange(int(lengths.sum())) + offsets, np.repeat(np.arange(len(starts)), lengths)
